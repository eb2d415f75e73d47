#!/bin/sh
# weft-sim plan against measured weft-train steps on this machine: the
# compute rate is fitted to the pure data-parallel run of N ranks (the
# same sharing of the cores as every other layout), then every tp x pp
# layout of N ranks (1f1b, m = pp, ZeRO 0, no sp: weft-train's
# defaults) is run and its median step compared with the plan's
# prediction, and the two rankings are printed side by side.
#
#   bench/plan_vs_measured.sh [BUILD] [N] [MODEL] [BATCH] [STEPS]
set -eu
B=${1:-build}
N=${2:-4}
MODEL=${3:-gpt:vocab=256,ctx=32,layers=4,heads=4,dim=64}
BATCH=${4:-16}
STEPS=${5:-8}
SEQ=$(echo "$MODEL" | sed 's/.*ctx=\([0-9]*\).*/\1/')
LAYERS=$(echo "$MODEL" | sed 's/.*layers=\([0-9]*\).*/\1/')
HEADS=$(echo "$MODEL" | sed 's/.*heads=\([0-9]*\).*/\1/')
TMP=$(mktemp -d /tmp/weft-planbench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
LOCK=/tmp/weft-bench.lock

# median seconds a step from a metrics CSV, leaving out the first 2 steps
median_step() {
    awk -F, '$3 == "train" { if (n++ >= 2) print $9 - prev; prev = $9 }' "$1" | sort -g |
        awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "nan" }'
}

run() { # ranks tp pp -> seconds a step
    f="$TMP/m_$1_$2_$3.csv"
    if [ "$1" = 1 ]; then
        flock "$LOCK" "$B/weft-train" --model "$MODEL" --data builtin --batch "$BATCH" \
            --seq "$SEQ" --steps "$STEPS" --no-eval --metrics "$f" >/dev/null 2>&1
    else
        flock "$LOCK" "$B/weftrun" -n "$1" "$B/weft-train" --model "$MODEL" --data builtin \
            --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" --no-eval --tp "$2" --pp "$3" \
            --metrics "$f" >/dev/null 2>&1
    fi
    median_step "$f"
}

plan_ms() { # ranks gflops tp pp -> predicted ms of weft-train's default at that layout
    "$B/weft-sim" plan --model "$MODEL" --batch "$BATCH" --ranks "$1" --topo host \
        --gflops "$2" | awk -v tp="$3" -v pp="$4" '
        $1 == tp && $2 == pp && $4 == 0 && ($5 == "1f1b") && $6 == pp && $7 == 0 { print $8; exit }'
}

one=$(run 1 1 1)
dp_meas=$(run "$N" 1 1)
pN=$(plan_ms "$N" 1 1 1)
G=$(awk -v p="$pN" -v m="$dp_meas" 'BEGIN { printf "%.4g", p / (1e3 * m) }')
echo "# $MODEL batch $BATCH, $STEPS steps; one process $(awk -v m="$one" 'BEGIN { printf "%.1f", 1e3 * m }') ms a step; --gflops $G (a core) fitted to 1x1x$N"
echo "# ranks tp pp dp predicted_ms measured_ms error"
: >"$TMP/rows"
for tp in 1 2 4 8; do
    [ $((N % tp)) = 0 ] && [ $((HEADS % tp)) = 0 ] || continue
    for pp in 1 2 4 8; do
        [ $((N % (tp * pp))) = 0 ] && [ "$pp" -le $((LAYERS + 2)) ] || continue
        dp=$((N / (tp * pp)))
        pred=$(plan_ms "$N" "$G" "$tp" "$pp")
        if [ "$tp$pp" = 11 ]; then meas=$dp_meas; else meas=$(run "$N" "$tp" "$pp"); fi
        awk -v n="$N" -v tp="$tp" -v pp="$pp" -v dp="$dp" -v p="$pred" -v m="$meas" 'BEGIN {
            printf "  %5d %2d %2d %2d %12.1f %11.1f %+6.1f%%\n", n, tp, pp, dp, p, 1e3 * m,
                   100 * (p - 1e3 * m) / (1e3 * m) }' | tee -a "$TMP/rows"
    done
done
echo "# ranking, predicted:  $(sort -k5 -g "$TMP/rows" | awk '{ printf "%sx%sx%s ", $2, $3, $4 }')"
echo "# ranking, measured:   $(sort -k6 -g "$TMP/rows" | awk '{ printf "%sx%sx%s ", $2, $3, $4 }')"
best_pred=$(sort -k5 -g "$TMP/rows" | head -1)
best_meas=$(sort -k6 -g "$TMP/rows" | head -1 | awk '{ print $6 }')
echo "$best_pred" | awk -v b="$best_meas" '{ printf "# the plan picks tp %s pp %s dp %s: measured %.1f ms, the measured best %.1f ms (%+.1f%%)\n", $2, $3, $4, $6, b, 100 * ($6 - b) / b }'
