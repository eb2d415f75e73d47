#!/bin/sh
# The plan's quality (docs/CPN.md, "Targets"): on a search space small
# enough to run whole, the measured training time of weft-cpn plan's
# choice against the best measured over the space. Two clusters on this
# host as in bench/cpn.sh (one rank each, speeds 1 and 0.5 by the
# training's emulation, WEFT_WAN=delay=20ms,rate=100mbit between them),
# the same GPT, global batch 24, STEPS steps (default 40). The space:
#   alone a, alone b             one cluster with the whole batch
#   full  x {even, prop}         every step across the link
#   diloco:H, streaming:H:1:H    x H in {10, 20} x {even, prop}
# where even is 12:12 and prop 16:8 (in proportion to speed). With even
# shares the slow part's period is scaled to half the steps (docs/CPN.md),
# so it takes fewer samples than the job asks: every row's time is scaled
# to the job's samples (STEPS x 24) by the samples its parts took. Each is run
# REPEAT times (default 2) with weft-cpn run, the rounds one after the
# other over the whole space; its time is the least over the rounds of
# rank 0's training seconds (the metrics' elapsed_s at the last step: no
# start-up or evaluation). Then
# weft-cpn plan's choice (this host probed with the job, the link as the
# emulation makes it, no compression allowed so that its space is this
# one's, H its own choice) is run the same way. Prints every row with the
# planner's price of it (weft-cpn plan --price), the planner's predicted
# step against the measured, and the ratio of the
# choice's time to the best measured (target: at most 1.05).
#
#   BUILD=build [REPEAT=2] sh bench/cpn_quality.sh [STEPS]   (1-3 minutes)
set -u
B=${BUILD:-build}
steps=${1:-40}
repeat=${REPEAT:-2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/cpn_lib.sh"
model="gpt:vocab=256,ctx=32,layers=2,heads=4,dim=128"
job="{\"schema\": \"weft-cpn-job/1\", \"model\": \"$model\", \"data\": \"builtin\",
         \"steps\": $steps, \"global_batch\": 24, \"seq\": 32, \"qos\": {\"compress\": \"none\"},
         \"train_args\": [\"--log-every\", \"1000\", \"--eval-prompts\", \"20\", \"--threads\", \"1\"]}"
echo "$job" >"$dir/job.json"

plan() { # name sync parts-json
    cat >"$dir/$1.json" <<EOF2
{"schema": "weft-cpn-plan/1", "job": $job, "sync": $2, "parts": [$3]}
EOF2
}
part() { # cluster batch speed
    echo "{\"cluster\": \"$1\", \"launcher\": \"local\", \"hosts\": [\"localhost\"], \"ranks\": 1,
           \"batch\": $2, \"speed\": $3}"
}
run() { # name: prints "name training_seconds"
    rm -rf "${dir:?}/$1"
    if ! "$B/weft-cpn" run --plan "$dir/$1.json" --dir "$dir/$1" --wan delay=20ms,rate=100mbit \
        --train "$B/weft-train" >"$dir/$1.out" 2>&1; then
        echo "cpn_quality.sh: $1 failed:" >&2
        tail -n 20 "$dir/$1/part-a.out" >&2
        return 1
    fi
    t=$(awk -F, '$3 == "train" { t = $9 } END { print t }' "$dir/$1/metrics.csv")
    # the samples the parts took: a part whose period is scaled down
    # (even shares at uneven speeds) takes fewer steps
    n=$(/usr/bin/python3 -c 'import json,sys
p=json.load(open(sys.argv[1])); n=0
for k, x in enumerate(p["parts"]):
    n += x["batch"] * int(open("%s.%d" % (sys.argv[2], k)).read().split()[1])
print(n)' "$dir/$1.json" "$dir/$1/progress") || return 1
    echo "$1 $(echo "$t $n" | awk -v all=$((24 * steps)) '{ printf "%.4f", $1 * all / $2 }')"
}

cpn_two_clusters || exit 1

plan alone_a '{"mode": "full"}' "$(part a 24 1)"
plan alone_b '{"mode": "full"}' "$(part b 24 0.5)"
names="alone_a alone_b"
for sh in even prop; do
    if [ $sh = even ]; then pa=12; pb=12; else pa=16; pb=8; fi
    parts="$(part a $pa 1), $(part b $pb 0.5)"
    plan full_$sh '{"mode": "full"}' "$parts"
    names="$names full_$sh"
    for h in 10 20; do
        plan diloco${h}_$sh "{\"mode\": \"diloco\", \"H\": $h}" "$parts"
        plan stream${h}_$sh "{\"mode\": \"streaming\", \"H\": $h, \"fragments\": 1, \"overlap\": $h}" \
            "$parts"
        names="$names diloco${h}_$sh stream${h}_$sh"
    done
done
for k in $(seq "$repeat"); do
    for r in $names plan; do
        run $r || exit 1
    done
done >"$dir/all" || exit 1
awk '!($1 in t) || $2 < t[$1] { if (!($1 in t)) order[++n] = $1; t[$1] = $2 }
     END { for (i = 1; i <= n; i++) print order[i], t[order[i]] }' "$dir/all" >"$dir/rows"

echo "cpn_quality.sh: $steps steps, the least of $repeat runs each, batch 24, $model, WAN delay 20 ms + 100 Mbit/s"
echo "$(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1 /proc/loadavg)"
choice=$(/usr/bin/python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))
s=p["sync"]; print(s["mode"], "H=%s" % s.get("H", "-"), "T=%s" % s.get("overlap", "-"),
  s.get("compress", "none"),
  "+".join("%s:%d" % (x["cluster"], x["batch"]) for x in p["parts"]), p["predicted"]["step_s"])' \
    "$dir/plan.json" 2>/dev/null || echo "? ? ? ? ? 0")
echo "plan's choice: ${choice% *}"
# the planner's price of every row as it stands (weft-cpn plan --price:
# each step waiting for the slowest part, as full sync does; the even rows'
# scaled periods make them faster than that)
for r in $names plan; do
    "$B/weft-cpn" plan --clusters "$dir/clusters.json" --job "$dir/job.json" \
        --links "$dir/links.json" --price "$dir/$r.json" |
        sed -n "s/.*\"step_s\": *\([0-9.e+-]*\).*/$r \1/p"
done >"$dir/priced"
echo "row              measured          predicted (x measured)"
awk -v p="${choice##* }" -v n="$steps" '
    FNR == NR { pr[$1] = $2 * n; next }
    { t[FNR] = $2; name[FNR] = $1; if ($1 != "plan" && (best == "" || $2 < best)) { best = $2; bn = $1 } }
    END {
        for (i = 1; i <= FNR; i++)
            printf "%-14s %8.3f s (x%5.3f the best)  %7.3f s (x%4.2f)\n", name[i], t[i],
                   t[i] / best, pr[name[i]], pr[name[i]] / t[i]
        for (i = 1; i <= FNR; i++) if (name[i] == "plan") m = t[i]
        printf "planned step: predicted %.4f s, measured %.4f s (predicted/measured %.2f)\n",
               p, m / n, p / (m / n)
        printf "plan quality: the choice %.3f s, the best of the space %.3f s (%s): ratio %.3f\n",
               m, best, bn, m / best
    }' "$dir/priced" "$dir/rows"
