#!/bin/sh
# The folders of src/ are layers that only look down (DESIGN.md section 2):
#   core < transport < bootstrap < coll < ps, train < sim < run
# A file of one folder that includes a header of another folder is an edge
# of the folder graph. Fails on a cycle in that graph (printed with a file
# that makes each edge) and on any edge that points up or sideways.
cd "$(dirname "$0")/../.." || exit 1
passed=0; failed=0

# level of each folder; an edge must go to a lower level
levels="core=0 transport=1 bootstrap=2 coll=3 ps=4 train=4 sim=5 run=6"

# "from to file" for every include that leaves its folder
edges() {
    find src -name '*.[ch]' | sort | while read -r f; do
        from=$(echo "$f" | cut -d/ -f2)
        dir=$(dirname "$f")
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
        while read -r inc; do
            if [ -f "src/$inc" ]; then
                p="src/$inc"
            elif [ -f "$dir/$inc" ]; then
                p="$dir/$inc"
            else
                continue        # include/weft.h or a system header
            fi
            to=$(realpath --relative-to=src "$p" | cut -d/ -f1)
            [ "$to" != "$from" ] && echo "$from $to $f"
        done
    done
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
    echo "FAIL include cycle between folders of src/ (each folder may include only the folders below it, DESIGN.md section 2):"
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
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
