#!/bin/sh
# The torch backend's tests: each tests/torch/test_*.py on 1-4 ranks of
# Debian's python3 with the package built in $BUILD/python. Prints
# "summary: N passed, N failed" as the C tests do.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
passed=0; failed=0
for t in tests/torch/test_*.py; do
    log=$(mktemp)
    timeout -k 10 600 "$PYTHON" "$t" >"$log" 2>&1
    rc=$?
    line=$(grep '^checks: ' "$log" | tail -n 1)
    p=$(echo "$line" | awk '{print $2}'); f=$(echo "$line" | awk '{print $4}')
    [ -n "$p" ] || p=0
    [ -n "$f" ] || f=0
    [ $rc -ne 0 ] && [ "$f" -eq 0 ] && f=1
    if [ "$f" -ne 0 ]; then echo "FAIL $t (exit $rc)"; tail -n 40 "$log" | sed 's/^/    /'
    else echo "ok   $t ($p checks)"; fi
    passed=$((passed + p)); failed=$((failed + f))
    rm -f "$log"
done
echo "summary: $passed passed, $failed failed"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
