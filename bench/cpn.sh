#!/bin/sh
# Two clusters of speed 1 and 0.5 against the fast one alone
# (docs/CPN.md, "Heterogeneous training"). weft-cpn run starts each plan's
# parts with the local launcher, one rank a cluster; the WAN between the
# clusters is weft's emulation (WEFT_WAN=delay=20ms,rate=100mbit on every
# connection between clusters); the slow cluster's speed is the training's
# emulation (--speed 0.5: its compute sleeps as long again). The same
# GPT, data, steps and global batch of 24 in every row:
#   alone     cluster a, all 24 samples of a batch
#   even      a and b, 12 samples each: the fast one waits for the slow
#   shares    a 16 and b 8: both take as long a step (full sync: the
#             same mathematics as "alone", so the same losses)
# under full sync and under diloco:10 (where b also takes 5 inner steps
# per outer step). Prints one table: rank 0's training seconds (the
# metrics' elapsed_s at the last step: no start-up or evaluation) and the speed-up over alone,
# weft-cpn run's wall seconds (start-up and evaluation included), final
# train loss (rank 0's: under DiLoCo cluster a's own before the last outer
# step), and the job's last evaluation loss.
#
#   BUILD=build sh bench/cpn.sh [STEPS]        (60 steps: about 2 minutes)
set -u
B=${BUILD:-build}
steps=${1:-60}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model="gpt:vocab=256,ctx=32,layers=2,heads=4,dim=128"

plan() { # file sync parts-json
    cat >"$1" <<EOF
{"schema": "weft-cpn-plan/1",
 "job": {"schema": "weft-cpn-job/1", "model": "$model", "data": "builtin", "steps": $steps,
         "global_batch": 24, "seq": 32,
         "train_args": ["--log-every", "1000", "--eval-prompts", "200", "--threads", "1"]},
 "sync": $2,
 "parts": [$3]}
EOF
}
part() { # cluster batch speed
    echo "{\"cluster\": \"$1\", \"launcher\": \"local\", \"hosts\": [\"localhost\"], \"ranks\": 1,
           \"batch\": $2, \"speed\": $3}"
}

row() { # name sync parts
    plan "$dir/$1.json" "$2" "$3"
    t0=$(date +%s.%N)
    if ! "$B/weft-cpn" run --plan "$dir/$1.json" --dir "$dir/$1" --wan delay=20ms,rate=100mbit \
        --train "$B/weft-train" >"$dir/$1.out" 2>&1; then
        echo "cpn.sh: $1 failed:" >&2
        tail -n 20 "$dir/$1/part-a.out" >&2
        return 1
    fi
    t1=$(date +%s.%N)
    train=$(awk -F, '$3 == "train" { t = $9 } END { print t }' "$dir/$1/metrics.csv")
    loss=$(awk -F, '$3 == "train" { l = $4 } END { print l }' "$dir/$1/metrics.csv")
    evl=$(awk -F, '$3 != "train" && $3 != "split" && $4 != "" { l = $4 } END { print l }' \
        "$dir/$1/metrics.csv")
    secs=$(echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }')
    echo "$1 $train $secs $loss $evl"
}

full='{"mode": "full"}'
dl='{"mode": "diloco", "H": 10}'
{
    for s in full dl; do
        eval sync=\$$s
        row "${s}_alone" "$sync" "$(part a 24 1)"
        row "${s}_even" "$sync" "$(part a 12 1), $(part b 12 0.5)"
        row "${s}_shares" "$sync" "$(part a 16 1), $(part b 8 0.5)"
    done
} >"$dir/rows"
echo "cpn.sh: $steps steps, batch 24, $model, WAN delay 20 ms + 100 Mbit/s"
echo "$(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1 /proc/loadavg)"
echo "run            training (x alone)  weft-cpn run wall  train loss  eval loss"
awk '{ split($1, a, "_"); if (a[2] == "alone") base[a[1]] = $2
       printf "%-14s %7s s (x%4.2f)  %9s s  %10s  %9s\n", $1, $2, base[a[1]] / $2, $3, $4,
              $5 }' "$dir/rows"
