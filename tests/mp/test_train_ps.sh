#!/bin/sh
# weft-train --mode ps under weftrun --servers: 2 workers and 1 server with
# BSP complete 20 steps, the loss falls, and the final model is full sync's
# (BSP averages every worker's gradient of the step before the servers'
# SGD step, which is what data parallelism does): the same test accuracy as
# `weftrun -n 2 weft-train` within one sample in a thousand. SSP and ASP on
# 3 workers and 2 servers with a slow worker complete and learn.
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0; failed=0
args="--model mlp:784-64-10 --data builtin --train-size 4096 --steps 20 --batch 64 --quiet"

run() { # name: weftrun args ... -- weft-train args
    name=$1; shift
    if "$B/weftrun" "$@" >"$dir/$name.out" 2>&1; then
        passed=$((passed + 1)); return 0
    fi
    echo "FAIL $name: $*"; sed 's/^/    /' "$dir/$name.out"
    failed=$((failed + 1)); return 1
}

learns() { # name: first train loss > last, test accuracy above chance
    if awk -F, 'NR == 2 { first = $4 } $3 == "train" { last = $4 } $3 == "test" { acc = $5 }
                END { exit !(first != "" && last < first && acc > 0.3) }' "$dir/$1.csv"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1)); echo "FAIL $1 does not learn"; cat "$dir/$1.csv" | sed -n '2p;$p'
    fi
}

if run bsp -n 2 --servers 1 "$B/weft-train" $args --mode ps --consistency bsp \
       --metrics "$dir/bsp.csv"; then
    learns bsp
    if run dp -n 2 "$B/weft-train" $args --metrics "$dir/dp.csv"; then
        if awk -F, 'NR == FNR { if ($3 == "test") a = $5; next } $3 == "test" { b = $5 }
                    END { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 0.001) }' \
               "$dir/dp.csv" "$dir/bsp.csv"; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1)); echo "FAIL BSP's test accuracy is not full sync's"
            grep test "$dir/dp.csv" "$dir/bsp.csv"
        fi
    fi
fi
for c in ssp:1 asp; do
    name=$(echo $c | tr -d :)
    run $name -n 3 --servers 2 "$B/weft-train" $args --mode ps --consistency $c \
        --straggle 1:2 --metrics "$dir/$name.csv" && learns $name
done
# a lone process has no servers
if "$B/weft-train" $args --mode ps >"$dir/lone.out" 2>&1; then
    failed=$((failed + 1)); echo "FAIL --mode ps without servers was accepted"
elif grep -q -- "--servers" "$dir/lone.out"; then
    passed=$((passed + 1))
else
    failed=$((failed + 1)); echo "FAIL --mode ps without servers: unclear error"; cat "$dir/lone.out"
fi
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
