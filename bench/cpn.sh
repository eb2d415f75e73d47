#!/bin/sh
# Two clusters of speed 1 and 0.5 against the fast one alone
# (docs/CPN.md, "Heterogeneous training"). weft-cpn run starts each plan's
# parts with the local launcher, one rank a cluster; the WAN between the
# clusters is weft's emulation (WEFT_WAN=delay=20ms,rate=100mbit on every
# connection between clusters); the slow cluster's speed is the training's
# emulation (--speed 0.5: its compute sleeps as long again). The same GPT
# (gpt:vocab=256,ctx=32,layers=2,heads=4,dim=128: 1.6 MB of fp32
# parameters, so an outer step moves 1.6 MB each way), data, steps and
# global batch of 24 in every row, so the same tokens:
#   alone     cluster a, all 24 samples of a batch (full sync of one rank)
#   diloco    a 16 and b 8 samples (in proportion to speed: both take H
#             steps a period), diloco:20, the loop blocked on each outer
#             reduction
#   overlap   the same shares, streaming:20:1:20: the outer reduction runs
#             beside the next 20 inner steps and lands one period late
#   plan      what weft-cpn plan chooses for the two clusters (this host
#             probed with the job's model, declared speed, the link as
#             the emulation makes it: 100 Mbit/s, 40 ms RTT) with the job's
#             H fixed at 20, run as planned
# Prints one table: rank 0's training seconds (the metrics' elapsed_s at
# the last step: no start-up or evaluation) and the speed-up over alone,
# weft-cpn run's wall seconds, the job's last evaluation loss and its ratio
# to alone's; then the plan's choice and its predicted step time against
# the measured (training seconds / steps).
#
#   BUILD=build sh bench/cpn.sh [STEPS]        (120 steps: about a minute)
set -u
B=${BUILD:-build}
steps=${1:-120}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/cpn_lib.sh"
model="gpt:vocab=256,ctx=32,layers=2,heads=4,dim=128"
job="{\"schema\": \"weft-cpn-job/1\", \"model\": \"$model\", \"data\": \"builtin\",
         \"steps\": $steps, \"global_batch\": 24, \"seq\": 32, \"qos\": {\"H\": 20},
         \"train_args\": [\"--log-every\", \"1000\", \"--eval-prompts\", \"200\", \"--threads\", \"1\"]}"

plan() { # file sync parts-json
    cat >"$1" <<EOF
{"schema": "weft-cpn-plan/1", "job": $job, "sync": $2, "parts": [$3]}
EOF
}
part() { # cluster batch speed
    echo "{\"cluster\": \"$1\", \"launcher\": \"local\", \"hosts\": [\"localhost\"], \"ranks\": 1,
           \"batch\": $2, \"speed\": $3}"
}

run() { # name (the plan in $dir/NAME.json): "name train wall loss"
    r=$(cpn_run cpn.sh "$1") || return 1
    echo "$1 $r"
}

# the planner's view of the two clusters: one core each, this machine
# probed with the job (its model's forward, backward and update timed on
# one thread: train_sample_s, train_fixed_s, train_update_s), the speed
# declared, the link as the emulation makes it
echo "$job" >"$dir/job.json"
cpn_two_clusters || exit 1

plan "$dir/alone.json" '{"mode": "full"}' "$(part a 24 1)"
plan "$dir/diloco.json" '{"mode": "diloco", "H": 20}' "$(part a 16 1), $(part b 8 0.5)"
plan "$dir/overlap.json" '{"mode": "streaming", "H": 20, "fragments": 1, "overlap": 20}' \
    "$(part a 16 1), $(part b 8 0.5)"
{
    for r in alone diloco overlap plan; do
        run $r || exit 1
    done
} >"$dir/rows" || exit 1
echo "cpn.sh: $steps steps, batch 24, $model, WAN delay 20 ms + 100 Mbit/s"
echo "$(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1 /proc/loadavg)"
echo "run       training (x alone)  weft-cpn run wall  eval loss (x alone)"
awk '$1 == "alone" { base = $2; bl = $4 }
     { printf "%-9s %7s s (x%4.2f)  %9s s  %9s (x%5.3f)\n", $1, $2, base / $2, $3, $4, $4 / bl }' \
    "$dir/rows"
choice=$(/usr/bin/python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))
s=p["sync"]; print(s["mode"], "H=%s" % s.get("H", "-"), "T=%s" % s.get("overlap", "-"),
  " ".join("%s:%d" % (x["cluster"], x["batch"]) for x in p["parts"]), p["predicted"]["step_s"])' \
    "$dir/plan.json" 2>/dev/null || echo "? ? ? ? 0")
echo "plan's choice: ${choice% *}"
awk -v p="${choice##* }" -v n="$steps" '$1 == "plan" { m = $2 / n
    printf "planned step: predicted %.4f s, measured %.4f s (predicted/measured %.2f)\n", p, m,
           p / m }' "$dir/rows"
