#!/bin/sh
# libweft.so exports only the public API: every function or object in its
# dynamic symbol table starts with weft_ (the library is built with
# -fvisibility=hidden and include/weft.h marks what leaves). Prints the
# offenders otherwise.
B=${BUILD:-build}
lib=$B/libweft.so
if ! command -v nm >/dev/null 2>&1; then
    echo "skip: needs nm (binutils)"
    echo "summary: 0 passed, 0 failed"
    exit 0
fi
passed=0; failed=0
if [ ! -f "$lib" ]; then
    echo "FAIL $lib not built"
    echo "summary: 0 passed, 1 failed"
    exit 1
fi

# defined symbols, absolute ones (linker markers) aside
syms=$(nm -D --defined-only "$lib" | awk 'NF == 3 && $2 != "A" { print $3 }')
if [ -n "$syms" ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1)); echo "FAIL no defined symbols in $lib"
fi
bad=$(echo "$syms" | grep -v '^weft_' | sed 's/@.*//')
if [ -z "$bad" ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
    echo "FAIL $(echo "$bad" | wc -l) symbols of $lib do not start with weft_:"
    echo "$bad" | sed 's/^/    /'
fi
# the public API is still there
for s in weft_comm_init weft_allreduce weft_strerror weft_model_create; do
    if echo "$syms" | grep -qx "$s"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1)); echo "FAIL $s is not exported"
    fi
done
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
