#!/bin/sh
# weft-train under weftrun: 1, 2 and 3 data-parallel ranks (3 does not divide
# the batch of 64) report the same per-step losses, to fp32 reduction-order
# tolerance, and the same final test accuracy within one sample in a thousand.
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0; failed=0
args="--model mlp:784-64-10 --data builtin --train-size 4096 --steps 20 --batch 64 --quiet"
for n in 1 2 3; do
    if ! "$B/weftrun" -n $n "$B/weft-train" $args --metrics "$dir/m$n.csv" >"$dir/out$n" 2>&1; then
        echo "FAIL weft-train on $n ranks"; sed 's/^/    /' "$dir/out$n"
        failed=$((failed + 1))
        continue
    fi
    passed=$((passed + 1))
done
for n in 2 3; do
    [ -f "$dir/m$n.csv" ] || continue
    # columns: step,epoch,split,loss,...
    if paste -d, "$dir/m1.csv" "$dir/m$n.csv" | awk -F, -v n=$n '
        NR > 1 && $3 == "train" { d = $4 - $13; if (d < 0) d = -d;
                    if (d > 1e-4 * ($4 < 0 ? -$4 : $4) + 1e-5) { print "step " $1 ": " $4 " vs " $13 " at " n " ranks"; bad = 1 } }
        NR > 1 && $3 == "test" { d = $5 - $14; if (d < 0) d = -d;
                    if (d > 0.001) { print "test accuracy " $5 " vs " $14; bad = 1 } }
        END { exit bad }'; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1)); echo "FAIL losses differ between 1 and $n ranks"
    fi
done
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
