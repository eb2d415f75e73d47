#!/bin/sh
# Runs the test programs: every binary in $BUILD/tests (built from
# tests/unit/, tests/mp/ and tests/hostile/) and every tests/*/test_*.sh, JOBS at a time,
# adds up their "summary:" lines and prints the total as "N passed, N failed".
# Exit status: 0 only if all pass.
#
# TEST_SKIP="PATTERN ..." leaves out, when no program is named, those whose
# name (test_x or test_x.sh) matches a shell pattern; the list of them is
# printed. CI runs the sanitizer builds so, without the end-to-end scripts
# that only start weft-train and the tools many times over.
#
#   sh tests/run.sh [-j JOBS] [PROGRAM ...]    e.g. tests/run.sh -j 2 test_coll test_netns
#
# A program may run as long as its source declares with TEST_TIMEOUT(seconds)
# (a C macro from test.h, or a "# TEST_TIMEOUT(seconds)" line in a script),
# else $TEST_TIMEOUT (default 300 s), times $TEST_SCALE (default 1; make
# check sets 10 for sanitizer builds, which run that much slower); past that
# it and its ranks are killed and it fails. Each program's result is printed
# as one block when it ends, with the tail of its log if it failed.
BUILD=${BUILD:-build}
export BUILD
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
TEST_SCALE=${TEST_SCALE:-1}

# run.sh --one DIR LIMIT PATH: run one program (what the parallel runs call)
if [ "$1" = "--one" ]; then
    dir=$2 limit=$3 t=$4
    name=$(basename "$t")
    log="$dir/$name.log"
    start=$(date +%s)
    case "$t" in
    *.sh) timeout -k 10 "$limit" sh "$t" >"$log" 2>&1 ;;
    *) timeout -k 10 "$limit" "$t" >"$log" 2>&1 ;;
    esac
    rc=$?
    end=$(date +%s)
    line=$(grep '^summary:' "$log" | tail -n 1)
    p=$(echo "$line" | sed -n 's/^summary: \([0-9]*\) passed, \([0-9]*\) failed.*/\1/p')
    f=$(echo "$line" | sed -n 's/^summary: \([0-9]*\) passed, \([0-9]*\) failed.*/\2/p')
    [ -n "$p" ] || p=0
    [ -n "$f" ] || f=0
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    why="exit $rc"
    # timeout's status for a killed program: 124 (TERM), 137 (KILL after -k)
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="timed out after ${limit}s"; fi
    {
        if [ "$f" -ne 0 ]; then
            echo "FAIL $name ($why, $p passed, $f failed, $((end - start))s)"
            grep '^failed cases:' "$log" | sed 's/^/    /'
            tail -n 40 "$log" | sed 's/^/    /'
        else
            echo "ok   $name ($p checks, $((end - start))s)"
        fi
    } >"$dir/$name.out"
    cat "$dir/$name.out"
    echo "$p $f $name" >>"$dir/results"
    exit 0
fi

jobs=1
if [ "$1" = "-j" ]; then jobs=$2; shift 2; fi
case "$jobs" in ''|*[!0-9]*|0) echo "run.sh: -j wants a positive number" >&2; exit 2;; esac

# The declared limit of program $1 (a binary or a script).
limit_of() {
    case "$1" in
    *.sh) src=$1 ;;
    *) src=$(ls tests/unit/"$(basename "$1")".c tests/mp/"$(basename "$1")".c \
               tests/hostile/"$(basename "$1")".c 2>/dev/null | head -n 1) ;;
    esac
    l=
    [ -n "$src" ] && l=$(sed -n 's/^\(# \)\{0,1\}TEST_TIMEOUT(\([0-9][0-9]*\)).*/\2/p' "$src" | head -n 1)
    echo $(( ${l:-$TEST_TIMEOUT} * TEST_SCALE ))
}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
: >"$dir/results"
if [ $# -gt 0 ]; then
    for n in "$@"; do
        found=
        for t in "$BUILD/tests/$n" tests/*/"$n" tests/*/"$n".sh; do
            [ -f "$t" ] && { found=$t; break; }
        done
        if [ -z "$found" ]; then
            echo "FAIL $n (no such test program)"
            echo "0 1 $n" >>"$dir/results"
        else
            echo "$found"
        fi
    done >"$dir/list"
    grep '^FAIL ' "$dir/list"
    grep -v '^FAIL ' "$dir/list" >"$dir/list.ok"
    mv "$dir/list.ok" "$dir/list"
else
    for t in "$BUILD"/tests/test_* tests/*/test_*.sh; do
        [ -f "$t" ] || continue
        case "$t" in *.d) continue;; esac
        skip=
        set -f # the patterns are for case, not for the files here
        for pat in ${TEST_SKIP:-}; do
            case "$(basename "$t")" in $pat) skip=1 ;; esac
        done
        set +f
        if [ -n "$skip" ]; then
            echo "$(basename "$t")" >>"$dir/skipped"
            continue
        fi
        echo "$t"
    done >"$dir/list"
    [ -f "$dir/skipped" ] && echo "skipped (TEST_SKIP): $(tr '\n' ' ' <"$dir/skipped")"
    # a test left at the top of tests/ is neither built nor run: say so
    for t in tests/test_*.c tests/test_*.sh; do
        [ -f "$t" ] || continue
        echo "FAIL $(basename "$t") (in tests/, not in tests/unit, tests/mp or tests/netns: not run)"
        echo "0 1 $(basename "$t")" >>"$dir/results"
    done
fi

# the longest-allowed programs start first, so two lanes finish together
while read -r t; do
    echo "$(limit_of "$t") $t"
done <"$dir/list" | sort -k1,1nr -k2 | while read -r limit t; do
    echo "$dir $limit $t"
done | xargs -n 3 -P "$jobs" sh "$0" --one

passed=0; failed=0; broken=""
while read -r p f name; do
    passed=$((passed + p)); failed=$((failed + f))
    [ "$f" -ne 0 ] && broken="$broken $name"
done <"$dir/results"
[ -n "$broken" ] && echo "failed:$broken"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
