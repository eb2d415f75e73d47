#!/bin/sh
# The cost objective against the time objective (docs/CPN.md, "The plan's
# model"): the two clusters of bench/cpn.sh (speeds 1 and 0.5, one core
# each, 100 Mbit/s and 40 ms between them), each declaring a price a
# core-hour (PRICE_A, PRICE_B; 0.05 both by default: the slow cluster
# costs as much a core-hour and gives half the work). The same job is
# planned twice: qos.objective time (the fastest plan), then
# qos.objective cost with qos.deadline_s = DEADLINE (default: twice the
# fastest plan's predicted seconds). Both plans run through weft-cpn run
# (local launcher, WEFT_WAN=delay=20ms,rate=100mbit). Prints each plan's
# choice, its predicted seconds and cost, its measured seconds (rank 0's
# training seconds, and weft-cpn run's wall from start to end, start-up
# included) and its measured cost (each part's price x ranks x the wall
# in hours), then the cost plan's saving against the fastest (target at
# least 20%) and whether its measured wall met the deadline.
#
#   BUILD=build sh bench/cpn_cost.sh [STEPS [DEADLINE]]   (300 steps: ~30 s idle)
set -u
B=${BUILD:-build}
steps=${1:-300}
dir=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
. "$(dirname "$0")/cpn_lib.sh"
PRICE_A=${PRICE_A:-0.05}
PRICE_B=${PRICE_B:-0.05}
model="gpt:vocab=256,ctx=32,layers=2,heads=4,dim=128"
job() { # qos-members
    echo "{\"schema\": \"weft-cpn-job/1\", \"model\": \"$model\", \"data\": \"builtin\",
         \"steps\": $steps, \"global_batch\": 24, \"seq\": 32, \"qos\": {\"H\": 20$1},
         \"train_args\": [\"--log-every\", \"1000\", \"--eval-prompts\", \"200\", \"--threads\", \"1\"]}"
}
field() { # plan-file python-expression-of-p
    /usr/bin/python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
        "$1" "$2"
}

job "" >"$dir/job.json"
cpn_two_clusters || exit 1
mv "$dir/plan.json" "$dir/time.json"
deadline=${2:-$(field "$dir/time.json" '"%.1f" % (2 * p["predicted"]["total_s"])')}
job ", \"objective\": \"cost\", \"deadline_s\": $deadline" >"$dir/job.json"
if ! "$B/weft-cpn" plan --clusters "$dir/clusters.json" --job "$dir/job.json" \
    --links "$dir/links.json" >"$dir/cost.json"; then
    echo "cpn_cost.sh: no cost plan within a deadline of $deadline s" >&2
    exit 1
fi

run() { # name: training seconds and wall seconds
    r=$(cpn_run cpn_cost.sh "$1") || return 1
    echo "${r% *}"
}
tm=$(run time) || exit 1
cm=$(run cost) || exit 1

echo "cpn_cost.sh: $steps steps, batch 24, $model; a speed 1 at $PRICE_A, b speed 0.5 at" \
    "$PRICE_B a core-hour; WAN delay 20 ms + 100 Mbit/s; deadline $deadline s"
echo "$(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1 /proc/loadavg)"
row() { # name plan-file "train wall"
    /usr/bin/python3 - "$1" "$2" $3 "$PRICE_A" "$PRICE_B" <<'EOF'
import json, sys
name, f, train, wall = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
price = {"a": float(sys.argv[5]), "b": float(sys.argv[6])}
p = json.load(open(f))
s = p["sync"]
choice = "%s%s %s" % (s["mode"], ":%s" % s["H"] if "H" in s else "",
                      "+".join("%s:%dr/%d" % (x["cluster"], x["ranks"], x["batch"]) for x in p["parts"]))
cost = sum(price[x["cluster"]] * x["ranks"] for x in p["parts"]) * wall / 3600
pr = p["predicted"]
print("%-5s %-28s predicted %7.2f s %9.3g   measured %7.2f s (wall %7.2f s) %9.3g" %
      (name, choice, pr["total_s"], pr["cost"], train, wall, cost))
print("%s %.9g %.9g %.9g %.9g" % (name, pr["cost"], cost, wall, train), file=sys.stderr)
EOF
}
echo "plan  choice                       predicted seconds   cost     measured seconds                cost"
{ row time "$dir/time.json" "$tm"; row cost "$dir/cost.json" "$cm"; } 2>"$dir/costs"
awk -v d="$deadline" '$1 == "time" { pt = $2; mt = $3 }
    $1 == "cost" { pc = $2; mc = $3; w = $4; tr = $5 }
    END { printf "cost plan against the fastest: predicted %.0f%% cheaper, measured %.0f%% cheaper\n",
                 100 * (1 - pc / pt), 100 * (1 - mc / mt)
          printf "cost plan against the deadline of %s s: training %.2f s (%s), wall %.2f s (%s)\n",
                 d, tr, tr <= d ? "within" : "PAST", w, w <= d ? "within" : "PAST" }' "$dir/costs"
