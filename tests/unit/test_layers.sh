#!/bin/sh
# The folders of src/ are layers that only look down (docs/ARCHITECTURE.md):
#   core < transport < bootstrap < coll < ps, train < sim < run < cpn
# A file of one folder that includes a header of another folder is an edge
# of the folder graph. Fails on a cycle in that graph (printed with a file
# that makes each edge) and on any edge that points up or sideways.
#
# Files too: a module is a .c with the .h of its name beside it (a header
# with no .c of its name, such as an *_int.h, is a module alone); module A
# uses module B when A's .c or .h includes B's .h. Fails on a cycle in
# that graph (printed with the file that makes each edge), so that every
# part of a folder can be understood, and tested, from the parts it uses.
#
# And tools/ are programs on include/weft.h alone: fails on a file there
# that includes a header of src/, unless tools_allow lists it.
cd "$(dirname "$0")/../.." || exit 1
passed=0; failed=0

# level of each folder; an edge must go to a lower level
levels="core=0 transport=1 bootstrap=2 coll=3 ps=4 train=4 sim=5 run=6 cpn=7"

# Modules in include cycles between files that are known and being taken
# apart; a cycle all of whose modules are listed is reported, not failed.
# The list only shrinks: a cycle with any module not listed fails.
known_file_cycles=""

# Includes of src/ headers from tools/ that are being removed, one
# "file header" a line (tools/x.c core/y.h); the list only shrinks, and
# is empty now that every tool builds on include/weft.h alone.
tools_allow=""

# "file header" for every include in src/ of a header of src/, both as
# paths from the top (include/weft.h and system headers left out)
includes() {
    find src -name '*.[ch]' | sort | while read -r f; do
        dir=$(dirname "$f")
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
        while read -r inc; do
            if [ -f "src/$inc" ]; then
                p="src/$inc"
            elif [ -f "$dir/$inc" ]; then
                p="$dir/$inc"
            else
                continue
            fi
            case "$p" in *./*) p=$(realpath --relative-to=. "$p") ;; esac
            echo "$f $p"
        done
    done
}
incs=$(includes)

# "from to file" for every include that leaves its folder
edges() {
    echo "$incs" | awk '{ split($1, a, "/"); split($2, b, "/"); if (a[2] != b[2]) print a[2], b[2], $1 }'
}

# reads "from to file" lines; prints one cycle per line as
# "a -> b (file) -> a (file)", nothing when the graph has none
cycles() {
    awk '
    { if (!(($1, $2) in via)) { via[$1, $2] = $3; out[$1] = out[$1] " " $2 } node[$1]; node[$2] }
    function dfs(n,    k, m, succ, i, s) {
        state[n] = 1; stack[++depth] = n
        m = split(out[n], succ, " ")
        for (k = 1; k <= m; k++) {
            if (state[succ[k]] == 1) {
                for (i = 1; stack[i] != succ[k]; i++) ;
                s = stack[i]
                for (; i < depth; i++) s = s " -> " stack[i + 1] " (" via[stack[i], stack[i + 1]] ")"
                s = s " -> " succ[k] " (" via[n, succ[k]] ")"
                print s
            } else if (state[succ[k]] == 0) {
                dfs(succ[k])
            }
        }
        depth--; state[n] = 2
    }
    END { for (n in node) if (state[n] == 0) dfs(n) }'
}

# the cycle finder itself finds a cycle it is shown
if [ -n "$(printf 'a b x.c\nb c y.c\nc a z.c\nc d w.c\n' | cycles)" ] &&
   [ -z "$(printf 'a b x.c\nb c y.c\na c z.c\n' | cycles)" ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1)); echo "FAIL the cycle finder misreads a known graph"
fi

all=$(edges)
if [ -n "$all" ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1)); echo "FAIL found no include between folders of src/"
fi

found=$(echo "$all" | cycles)
if [ -z "$found" ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
    echo "FAIL include cycle between folders of src/ (each folder may include only the folders below it, docs/ARCHITECTURE.md):"
    echo "$found" | sed 's/^/    /'
fi

level() {
    for kv in $levels; do
        [ "${kv%=*}" = "$1" ] && { echo "${kv#*=}"; return; }
    done
}
# one line per folder pair, with the first file that makes it
pairs=$(echo "$all" | awk '!seen[$1, $2]++')
tmp=$(mktemp)
for from in $(echo "$all" | awk '{ print $1; print $2 }' | sort -u); do
    if [ -z "$(level "$from")" ]; then
        failed=$((failed + 1))
        echo "FAIL src/$from/ has no place in the layer order of tests/unit/test_layers.sh ($levels)"
    fi
done
echo "$pairs" | while read -r from to file; do
    lf=$(level "$from"); lt=$(level "$to")
    [ -n "$lf" ] && [ -n "$lt" ] || continue
    if [ "$lt" -lt "$lf" ]; then
        echo pass
    else
        echo "FAIL $from includes $to, which is not below it ($file)"
    fi
done >"$tmp"
p=$(grep -c '^pass$' "$tmp")
f=$(grep -c '^FAIL' "$tmp")
grep '^FAIL' "$tmp"
rm -f "$tmp"
passed=$((passed + p)); failed=$((failed + f))

# ---- files ---------------------------------------------------------------

# "from to file" for every include between modules of src/ (paths without
# their .c or .h)
module_edges() {
    echo "$incs" | awk '{ f = $1; t = $2; sub(/\.[ch]$/, "", f); sub(/\.[ch]$/, "", t); if (f != t) print f, t, $1 }'
}

# reads "from to file" lines; prints, per strongly connected set of
# modules (each a cycle or several), one line: "known" or "new", then one
# cycle through a module of it (through one not in $1 when there is one)
# as "a -> b (file) -> a (file)"
module_cycles() {
    awk -v known="$1" '
    BEGIN { n = split(known, k, /[ \n]+/); for (i = 1; i <= n; i++) if (k[i] != "") ok[k[i]] = 1 }
    { if (!(($1, $2) in via)) { via[$1, $2] = $3; out[$1] = out[$1] " " $2 } node[$1]; node[$2] }
    function tarjan(v,    m, succ, j, w) {
        idx[v] = low[v] = ++counter; stack[++sp] = v; on[v] = 1
        m = split(out[v], succ, " ")
        for (j = 1; j <= m; j++) {
            w = succ[j]
            if (!(w in idx)) {
                tarjan(w)
                if (low[w] < low[v]) low[v] = low[w]
            } else if (on[w] && idx[w] < low[v]) {
                low[v] = idx[w]
            }
        }
        if (low[v] == idx[v]) {
            ncomp++
            do { w = stack[sp--]; on[w] = 0; comp[w] = ncomp; csize[ncomp]++ } while (w != v)
        }
    }
    # the shortest cycle through u inside its set
    function cycle_through(u,    q, prev, seen, head, tail, x, m, succ, j, w, y, path, np, s, last) {
        head = 1; tail = 1; q[1] = u; seen[u] = 1
        while (head <= tail) {
            x = q[head++]
            m = split(out[x], succ, " ")
            for (j = 1; j <= m; j++) {
                w = succ[j]
                if (comp[w] != comp[u])
                    continue
                if (w == u) {
                    np = 0
                    for (y = x; y != u; y = prev[y]) path[++np] = y
                    s = u; last = u
                    for (; np >= 1; np--) { s = s " -> " path[np] " (" via[last, path[np]] ")"; last = path[np] }
                    return s " -> " u " (" via[last, u] ")"
                }
                if (!(w in seen)) { seen[w] = 1; prev[w] = x; q[++tail] = w }
            }
        }
        return ""
    }
    END {
        for (v in node) if (!(v in idx)) tarjan(v)
        for (c = 1; c <= ncomp; c++) {
            if (csize[c] < 2) continue
            pick = ""; any = ""
            for (v in comp) if (comp[v] == c) { if (any == "" || v < any) any = v; if (!(v in ok) && (pick == "" || v < pick)) pick = v }
            if (pick != "") print "new " cycle_through(pick)
            else print "known " cycle_through(any)
        }
    }'
}

# the finder itself finds what it is shown: a cycle that a depth-first
# walk meets only through an edge to a finished module (c -> a below),
# and none where there is none
if [ "$(printf 'a b x.c\nb a y.c\na c z.c\nc b w.c\nd a v.c\n' | module_cycles "" | cut -d' ' -f1)" = new ] &&
   [ "$(printf 'a b x.c\nb a y.c\n' | module_cycles "a b" | cut -d' ' -f1)" = known ] &&
   [ "$(printf 'a b x.c\nb a y.c\nb c u.c\nc b w.c\n' | module_cycles "a b" | cut -d' ' -f2)" = c ] &&
   [ -z "$(printf 'a b x.c\nb c y.c\na c z.c\n' | module_cycles "")" ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1)); echo "FAIL the module cycle finder misreads a known graph"
fi

medges=$(module_edges)
if [ "$(echo "$medges" | grep -c .)" -gt 100 ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1)); echo "FAIL found almost no include between files of src/"
fi
mfound=$(echo "$medges" | module_cycles "$known_file_cycles")
echo "$mfound" | sed -n 's/^known /note: known include cycle between files (being taken apart): /p'
newc=$(echo "$mfound" | grep -c '^new ')
if [ "$newc" = 0 ]; then
    passed=$((passed + 1))
else
    failed=$((failed + newc))
    echo "FAIL include cycle between files of src/ (a module, X.c with X.h, may include only modules that do not include it back, however indirectly):"
    echo "$mfound" | sed -n 's/^new /    /p'
fi

# ---- tools ---------------------------------------------------------------

# "file header" for every include of a src/ header from tools/
tool_includes() {
    find tools -name '*.[ch]' | sort | while read -r f; do
        dir=$(dirname "$f")
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
        while read -r inc; do
            if [ -f "$dir/$inc" ]; then
                p=$(realpath --relative-to=. "$dir/$inc")
            elif [ -f "src/$inc" ]; then
                p="src/$inc"
            else
                continue
            fi
            case "$p" in src/*) echo "$f ${p#src/}" ;; esac
        done
    done
}
tinc=$(tool_includes)
bad=$(echo "$tinc" | grep . | while read -r f h; do
    echo "$tools_allow" | grep -qx "$f $h" || echo "$f $h"
done)
if [ -z "$bad" ]; then
    passed=$((passed + 1))
else
    failed=$((failed + $(echo "$bad" | grep -c .)))
    echo "FAIL tools/ build on include/weft.h alone; these include a header of src/:"
    echo "$bad" | sed 's/^\([^ ]*\) \(.*\)/    \1 includes src\/\2/'
fi
[ -n "$tools_allow" ] && echo "$tools_allow" | grep . | while read -r f h; do
    echo "$tinc" | grep -qx "$f $h" || echo "note: tools_allow lists \"$f $h\", which is gone: drop it"
done

echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
