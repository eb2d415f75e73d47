#!/bin/sh
# Runs every test binary in $BUILD/tests and every tests/test_*.sh, adds up their "summary:" lines and
# prints the total as "N passed, N failed". Exit status: 0 only if all pass.
BUILD=${BUILD:-build}
passed=0; failed=0; broken=""
log=$(mktemp)
for t in "$BUILD"/tests/test_* tests/test_*.sh; do
    [ -f "$t" ] || continue
    case "$t" in *.d) continue;; esac
    name=$(basename "$t")
    start=$(date +%s)
    case "$t" in
    *.sh) BUILD="$BUILD" sh "$t" >"$log" 2>&1 ;;
    *) "$t" >"$log" 2>&1 ;;
    esac
    rc=$?
    line=$(grep '^summary:' "$log" | tail -n 1)
    p=$(echo "$line" | sed -n 's/^summary: \([0-9]*\) passed, \([0-9]*\) failed.*/\1/p')
    f=$(echo "$line" | sed -n 's/^summary: \([0-9]*\) passed, \([0-9]*\) failed.*/\2/p')
    [ -n "$p" ] || p=0
    [ -n "$f" ] || f=0
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    end=$(date +%s)
    if [ "$f" -ne 0 ]; then
        broken="$broken $name"
        echo "FAIL $name (exit $rc, $p passed, $f failed, $((end - start))s)"
        tail -n 40 "$log" | sed 's/^/    /'
    else
        echo "ok   $name ($p checks, $((end - start))s)"
    fi
done
rm -f "$log"
[ -n "$broken" ] && echo "failed:$broken"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
