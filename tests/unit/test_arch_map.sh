#!/bin/sh
# docs/ARCHITECTURE.md is the map of the code: every source file of src/
# (*.c, *.h) and of tools/ (*.c, *.h, and all of tools/weft-train/) must
# be named in it, and every file it names must exist, so that the map
# rots in neither direction.
#
# "Named": the map has a heading per folder (### src/coll/sched/); a file
# is named when its basename appears as a word in its own folder's
# section (up to the next heading), or its path (src/x/y.c, or x/y.c for a
# file of src/) appears anywhere. So coll/sched/plan.c and sim/plan.c are
# never taken for each other.
#
# "Exists": a bare name in a folder's section must be a file of that
# folder; a path must be a file (as written, or under src/); a bare name
# outside any folder's section must be the basename of some file.
cd "$(dirname "$0")/../.." || exit 1
passed=0; failed=0
map=${ARCH_MAP:-docs/ARCHITECTURE.md} # ARCH_MAP: another map, to try the test

# check MAP CHECKED EXISTING: prints "missing PATH" for each file of
# CHECKED (a list, one path a line) the map does not name, and
# "stale NAME (in SECTION)" for each name in MAP that EXISTING (a list of
# every file) lacks.
check() {
    awk -v mapfile="$1" -v checkfile="$2" -v existfile="$3" '
    function addname(sec, t,   p) {
        if (index(t, "/")) {
            p = t
            if (!(p in exists) && sec != "" && ((sec "/" t) in exists))
                p = sec "/" t
            if (!(p in exists) && (("src/" t) in exists))
                p = "src/" t
            if (!(p in exists))
                stale[t " (a path)"] = 1
            named[p] = 1
            return
        }
        if (sec != "") {
            p = sec "/" t
            if (!(p in exists))
                stale[t " (in " sec "/)"] = 1
            named[p] = 1
        } else if (!(t in base)) {
            stale[t " (no file has this name)"] = 1
        }
    }
    BEGIN {
        while ((getline f < existfile) > 0) {
            exists[f] = 1
            b = f; sub(/.*\//, "", b); base[b] = 1
        }
        close(existfile)
        fence = 0; sec = ""
        while ((getline line < mapfile) > 0) {
            if (line ~ /^[ \t]*```/) { fence = !fence; continue }
            if (!fence && line ~ /^#+[ \t]/) {
                sec = ""
                if (match(line, /(^|[^A-Za-z0-9_.\/-])(src|tools)(\/[A-Za-z0-9_.-]+)*\/?/)) {
                    sec = substr(line, RSTART, RLENGTH)
                    sub(/^[^A-Za-z0-9_.\/-]/, "", sec)
                    sub(/\/$/, "", sec)
                }
                continue
            }
            # a file name: path characters ending in .c .h .py .sh, preceded
            # and followed by something that cannot be part of a name
            rest = line
            while (match(rest, /[A-Za-z0-9_.\/-]*[A-Za-z0-9_-]\.(c|h|py|sh)([^A-Za-z0-9_]|$)/)) {
                t = substr(rest, RSTART, RLENGTH)
                before = RSTART > 1 ? substr(rest, RSTART - 1, 1) : ""
                rest = substr(rest, RSTART + RLENGTH - 1)
                sub(/[^A-Za-z0-9_]$/, "", t)
                sub(/^[.\/]+/, "", t)
                if (before ~ /[*<>$]/)
                    continue  # a pattern (run_sync*.c, pipe_<name>.c), not a file
                addname(sec, t)
            }
        }
        while ((getline f < checkfile) > 0)
            if (!(f in named))
                print "missing " f
        for (s in stale)
            print "stale " s
    }'
}

# the matcher itself: in a synthetic map, a name in one folder's section
# does not name a file of the same name in another folder, a path names
# its file anywhere, and a name whose file is gone is found
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cat >"$tmp/map" <<'MAP'
# A map
### src/a/
- `x.c`, `gone.c`: x
### src/b/
- `y.c`: y
```
### src/a/
y.c here is inside a code block: no heading, and not src/a/ either
```
## Elsewhere
src/b/z.c and x.c.
MAP
printf 'src/a/x.c\nsrc/a/y.c\nsrc/b/y.c\nsrc/b/z.c\n' >"$tmp/files"
got=$(check "$tmp/map" "$tmp/files" "$tmp/files" | sort | tr '\n' '|')
want="missing src/a/y.c|stale gone.c (in src/a/)|"
if [ "$got" = "$want" ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
    echo "FAIL the matcher on a synthetic map: got \"$got\", want \"$want\""
fi

if [ ! -f "$map" ]; then
    echo "FAIL $map is missing"
    echo "summary: $passed passed, 1 failed"
    exit 1
fi
{ find src tools -type f \( -name '*.c' -o -name '*.h' \); find tools/weft-train -type f; } |
    sort -u >"$tmp/checked"
find src tools include tests bench python torch docs -type f 2>/dev/null | sort >"$tmp/all"
out=$(check "$map" "$tmp/checked" "$tmp/all" | sort)
nchecked=$(grep -c . "$tmp/checked")
nmissing=$(echo "$out" | grep -c '^missing ')
nstale=$(echo "$out" | grep -c '^stale ')
passed=$((passed + nchecked - nmissing))
failed=$((failed + nmissing + nstale))
if [ "$nmissing" -gt 0 ]; then
    echo "FAIL files not named in $map (a line in their folder's section):"
    echo "$out" | sed -n 's/^missing /    /p'
fi
if [ "$nstale" -gt 0 ]; then
    echo "FAIL names in $map of files that do not exist:"
    echo "$out" | sed -n 's/^stale /    /p'
fi

echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
