#!/bin/sh
# A cluster lost mid-run (docs/CPN.md, "A lost cluster"): the two clusters
# of bench/cpn.sh (speeds 1 and 0.5, one rank each, shares 16 and 8 of 24,
# WEFT_WAN=delay=20ms,rate=100mbit between them), diloco:H with --elastic.
# One run goes to the end with both clusters; in the other weft-cpn run
# ends part b (--kill-at b:K, K in the middle of a period) and the job
# goes on with a alone. Prints:
#   - the job's step when b was ended and the step at which a dropped it
#     (the next outer step), so b's inner steps lost (those since its last
#     outer step) and that count in outer steps (at most 1 is the target);
#     a's own steps lost (steps it did not finish: 0 is the target);
#   - the seconds from the loss to the new plan running (weft-cpn run's
#     own measure: from the kill until the survivors' "shrink" row in the
#     job's metrics, written when they have dropped the lost cluster and
#     go on; target 30 s), and the survivor's own recovery (its log line);
#   - the last evaluation loss of both runs.
#
#   BUILD=build sh bench/cpn_loss.sh [STEPS [H [K]]]   (300, 20, 50: ~30 s idle)
set -u
B=${BUILD:-build}
steps=${1:-300}
H=${2:-20}
K=${3:-$((2 * H + H / 2))}
dir=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
model="gpt:vocab=256,ctx=32,layers=2,heads=4,dim=128"
job="{\"schema\": \"weft-cpn-job/1\", \"model\": \"$model\", \"data\": \"builtin\",
         \"steps\": $steps, \"global_batch\": 24, \"seq\": 32,
         \"train_args\": [\"--log-every\", \"1000\", \"--eval-prompts\", \"200\", \"--threads\", \"1\",
                        \"--elastic\"]}"
part() { # cluster batch speed
    echo "{\"cluster\": \"$1\", \"launcher\": \"local\", \"hosts\": [\"localhost\"], \"ranks\": 1,
           \"batch\": $2, \"speed\": $3}"
}
cat >"$dir/plan.json" <<EOF
{"schema": "weft-cpn-plan/1", "job": $job, "sync": {"mode": "diloco", "H": $H},
 "parts": [$(part a 16 1), $(part b 8 0.5)]}
EOF

run() { # name [weft-cpn run arguments]
    name=$1
    shift
    "$B/weft-cpn" run --plan "$dir/plan.json" --dir "$dir/$name" --wan delay=20ms,rate=100mbit \
        --train "$B/weft-train" "$@" >"$dir/$name.out" 2>&1
    if ! grep -q "part a done (exit 0)" "$dir/$name.out"; then
        echo "cpn_loss.sh: $name: part a did not finish:" >&2
        tail -n 20 "$dir/$name.out" "$dir/$name/part-a.out" >&2
        return 1
    fi
}
evloss() {
    awk -F, '$3 != "train" && $3 != "split" && $4 != "" { l = $4 } END { print l }' "$1"
}
last_step() {
    awk -F, '$3 == "train" { s = $1 } END { print s }' "$1"
}

run whole || exit 1
run lost --kill-at "b:$K" || exit 1

killed=$(sed -n 's/^weft-cpn run: ending part b at step \([0-9]*\).*/\1/p' "$dir/lost.out")
drop=$(sed -n 's/^elastic: step \([0-9]*\): .*cluster 1 dropped.*/\1/p' "$dir/lost/part-a.out" |
    head -n 1)
recov=$(sed -n 's/^elastic: step [0-9]*: .*cluster 1 dropped.* recovered in \([0-9.]*\) s.*/\1/p' \
    "$dir/lost/part-a.out" | head -n 1)
running=$(sed -n 's/^weft-cpn run: the re-plan runs from step \([0-9]*\), \([0-9.]*\) s after.*/\1 \2/p' \
    "$dir/lost.out")
echo "cpn_loss.sh: $steps steps, batch 24 (a 16, b 8 at speed 0.5), $model, diloco:$H --elastic,"
echo "WAN delay 20 ms + 100 Mbit/s; part b ended at the job's step ${K} or later"
echo "$(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1 /proc/loadavg)"
if [ -z "$killed" ] || [ -z "$drop" ]; then
    echo "cpn_loss.sh: no loss seen (ended at '${killed}', dropped at '${drop}')" >&2
    tail -n 20 "$dir/lost.out" "$dir/lost/part-a.out" >&2
    exit 1
fi
awk -v k="$killed" -v d="$drop" -v h="$H" -v n="$steps" -v sa="$(last_step "$dir/lost/metrics.csv")" \
    -v rec="$recov" -v run="$running" 'BEGIN {
    # b kept step with a (shares in proportion to speed): its last outer
    # step was the last multiple of H at or before the kill, and what it did
    # after that was never reduced
    last = int(k / h) * h
    printf "b ended at step %d; a dropped it at step %d (outer step %d)\n", k, d, d / h
    printf "b: last outer step in the model at step %d; inner steps lost %d-%d of %d a period " \
           "(%.2f-%.2f outer steps)\n", last, k - last, d - last, h, (k - last) / h, (d - last) / h
    printf "a: %d of %d steps done (steps lost: %d)\n", sa, n, n - sa
    split(run, r, " ")
    printf "loss to new plan running: %s s (from step %s); a recovered in %s s\n",
           r[2] == "" ? "?" : r[2], r[1] == "" ? "?" : r[1], rec == "" ? "?" : rec }'
echo "eval loss: both clusters $(evloss "$dir/whole/metrics.csv"), b lost $(evloss "$dir/lost/metrics.csv")"
