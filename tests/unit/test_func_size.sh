#!/bin/sh
# No function in src/ is longer than FUNC_MAX lines, counted from the
# first line of its signature to its closing brace: a function that long
# does several jobs, each of which can have a name. Lists every one over.
cd "$(dirname "$0")/../.." || exit 1
passed=0; failed=0
FUNC_MAX=120

# "lines file:line name" for every function definition in the files given.
# A definition starts at column 0 with "... name(" and opens its body
# with "{" at column 0 (the project's style); "}" at column 0 closes it.
sizes() {
    awk '
    FNR == 1 { state = 0 }
    state == 0 {
        # attributes first ("__attribute__((target("avx2"))) static ...")
        line = $0
        while (sub(/^__attribute__\(\(([^()]|\([^()]*\))*\)\)[ \t]*/, "", line)) ;
        if (line ~ /^[A-Za-z_][A-Za-z0-9_ *]*[ *][A-Za-z_][A-Za-z0-9_]*\(/ && line !~ /^typedef/) {
            name = line
            sub(/\(.*/, "", name); sub(/.*[ *]/, "", name)
            start = FNR; state = 1
        }
    }
    state == 1 && /;[[:space:]]*$/ && !/^\{/ { state = 0; next }
    state == 1 && /^\{/ { state = 2; next }
    state == 2 && /^\}/ { print FNR - start + 1, FILENAME ":" start, name; state = 0 }
    ' "$@"
}

# the measure itself reads a known file right
t=$(mktemp -d)
{
    echo "static int small(int a,"
    echo "                 int b)"
    echo "{"
    echo "    return a + b;"
    echo "}"
    echo "int proto(int a);"
    echo "__attribute__((target(\"avx2\"))) static void attr(void)"
    echo "{"
    echo "}"
    echo "void big(void)"
    echo "{"
    i=0; while [ $i -lt 130 ]; do echo "    ;"; i=$((i + 1)); done
    echo "}"
} >"$t/x.c"
got=$(sizes "$t/x.c" | awk '{ print $1, $3 }' | tr '\n' ' ')
rm -rf "$t"
if [ "$got" = "5 small 3 attr 133 big " ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1)); echo "FAIL the measure misreads a known file: $got"
fi

all=$(sizes $(find src -name '*.[ch]' | sort))
n=$(echo "$all" | grep -c .)
if [ "$n" -gt 100 ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1)); echo "FAIL found only $n functions in src/"
fi
over=$(echo "$all" | awk -v max=$FUNC_MAX '$1 > max' | sort -rn)
if [ -z "$over" ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
    echo "FAIL functions in src/ over $FUNC_MAX lines (lines, where, name):"
    echo "$over" | sed 's/^/    /'
fi
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
