#!/bin/sh
# weft-sim plan, calibrated on this machine, against measured weft-train
# steps: for N ranks (4; RANKS="4 8" or a second argument adds 8) every
# tp x pp x dp layout the model allows is run with weft-train's defaults
# (1f1b, m = pp, ZeRO 0, no sp) REPS times, the layouts taking turns (one
# run of each, then the next round), and its median step set beside the
# plan's prediction for the same layout; then both rankings, the pairs
# they order differently beyond the noise, and the plan's choice among
# these layouts against the measured best. The noise is the measured
# repeat spread, not a fixed percentage: two layouts are within it when
# the ranges of their REPS runs (lowest to highest step, the runs taken in
# turns) overlap, and a pair the plan orders against the medians counts
# as off only when the ranges are apart. A run's step is its mean after
# the first 2 steps (weft-train's clock has millisecond steps; a mean over
# STEPS-2 of them resolves less than that). REPS=0 calibrates and prints
# the predictions only (two such runs a minute apart show how far the
# calibration alone moves them).
#
# Self-contained: the calibration is made fresh in a temporary folder
# (weft-tune's constants by `weftrun -n 2xCORES weft-tune`, each the
# median of three runs, what a synchronisation waits on the shared
# cores, what a pipeline message's end
# costs their CPU, a tensor group's rank's slice of each block and (more
# ranks than cores) each rank's whole blocks and a rank's CPU in the
# gradients' all-reduce by `weftrun -n N weft-sim sync --model`, then
# `weft-sim plan --calibrate`: the cores, a step's work after backward
# and the engine probed for every block shape the plan needs), so
# nothing of an earlier run is used.
# No figure is fitted to the measured runs.
#
#   bench/plan_vs_measured.sh [BUILD [RANKS]]     e.g. build 8, or build "4 8"
#   env: RANKS="4" MODEL=gpt:vocab=256,ctx=32,layers=4,heads=4,dim=64
#        BATCH=16 STEPS=12 REPS=3
# About 3 minutes at 4 ranks on an idle 2-core machine; 8 ranks as much
# again. Timing runs hold /tmp/weft-bench.lock.
set -eu
cd "$(dirname "$0")/.."
B=${1:-${BUILD:-build}}
RANKS=${2:-${RANKS:-4}}
MODEL=${MODEL:-gpt:vocab=256,ctx=32,layers=4,heads=4,dim=64}
BATCH=${BATCH:-16}
STEPS=${STEPS:-12}
REPS=${REPS:-3}
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-train" "$B/weft-sim" "$B/weft-tune" >/dev/null
SEQ=$(echo "$MODEL" | sed 's/.*ctx=\([0-9]*\).*/\1/')
LAYERS=$(echo "$MODEL" | sed 's/.*layers=\([0-9]*\).*/\1/')
HEADS=$(echo "$MODEL" | sed 's/.*heads=\([0-9]*\).*/\1/')
TMP=$(mktemp -d /tmp/weft-planbench.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
LOCK=/tmp/weft-bench.lock
CORES=$(nproc)

# mean seconds a step from a metrics CSV, leaving out the first 2 steps
mean_step() {
    awk -F, '$3 == "train" { n++; if (n == 2) t0 = $9; if (n > 2) t1 = $9 }
        END { print (n > 2 ? (t1 - t0) / (n - 2) : "nan") }' "$1"
}

one_run() { # ranks tp pp rep: one run, its step appended to the layout's list
    f="$TMP/m_$1_$2_$3_$4.csv"
    flock "$LOCK" "$B/weftrun" -n "$1" "$B/weft-train" --model "$MODEL" --data builtin \
        --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" --no-eval --tp "$2" --pp "$3" \
        --metrics "$f" </dev/null >/dev/null 2>&1
    mean_step "$f" >>"$TMP/reps_$1_$2_$3"
}

summary() { # ranks tp pp -> "median min max" ms a step over its runs
    sort -g "$TMP/reps_$1_$2_$3" |
        awk '{ v[NR] = 1e3 * $1 } END { print v[int((NR + 1) / 2)], v[1], v[NR] }'
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ), $CORES cores ($(lscpu | sed -n 's/^Model name: *//p')), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $MODEL batch $BATCH, $STEPS steps, median of $REPS runs"
# weft-tune's constants for this host, measured now: three runs, each
# constant the median of its three (one run's beta moved 1.0-2.6e-10 s/B
# between runs a minute apart, loaded)
export WEFT_TUNE_FILE="$TMP/tune"
for k in 1 2 3; do
    # its progress lines kept apart, shown only if it fails
    flock "$LOCK" "$B/weftrun" -n $((2 * CORES)) "$B/weft-tune" -t 5 -o "$TMP/tune$k" \
        >"$TMP/tune$k.log" 2>&1 || { tail -n 20 "$TMP/tune$k.log" >&2; exit 1; }
done
cat "$TMP/tune1" "$TMP/tune2" "$TMP/tune3" | grep -v '^#' | tr ',' '\n' | awk -F= '
    NF == 2 { v[$1] = v[$1] " " $2; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    END {
        for (i = 1; i <= n; i++) {
            k = split(substr(v[order[i]], 2), x, " ")
            # sort the k values, keep the middle one
            for (a = 1; a <= k; a++) for (b = a + 1; b <= k; b++) if (x[b] + 0 < x[a] + 0) { t = x[a]; x[a] = x[b]; x[b] = t }
            printf "%s%s=%s", (i > 1 ? "," : ""), order[i], x[int((k + 1) / 2)]
        }
        print ""
    }' >"$WEFT_TUNE_FILE"
echo "# weft-tune, the median of 3 runs: $(cat "$WEFT_TUNE_FILE")"

CAL="$TMP/calib"
for N in $RANKS; do
    # what a synchronisation waits on the shared cores at N ranks, the
    # cores a chain of them handing work on gets and the CPU each of its
    # messages' ends costs, and a tensor group's rank's CPU for its slice
    # of each block, every group at once (and each rank's whole blocks)
    flock "$LOCK" "$B/weftrun" -n "$N" "$B/weft-sim" sync --model "$MODEL" --batch "$BATCH" \
        --seq "$SEQ" </dev/null 2>/dev/null |
        sed -n 's/^\[0\] //; /^sync /p; /^chain /p; /^msgcpu /p; /^tpblock /p; /^arcpu /p' >>"$CAL"
    # the layouts weft-train runs here: tp x pp x dp (no context or expert
    # parallelism)
    flock "$LOCK" "$B/weft-sim" plan --model "$MODEL" --batch "$BATCH" --ranks "$N" --topo host \
        --calib "$CAL" --calibrate --cp 0 --ep 0 >"$TMP/plan$N"
    echo
    echo "## $N ranks"
    grep '^# inputs:' "$TMP/plan$N"
    grep '^best ' "$TMP/plan$N" | sed 's/^/# plan, every schedule: /'
    : >"$TMP/layouts"
    for tp in 1 2 4 8; do
        [ $((N % tp)) = 0 ] && [ $((HEADS % tp)) = 0 ] || continue
        for pp in 1 2 4 8; do
            [ $((N % (tp * pp))) = 0 ] && [ "$pp" -le $((LAYERS + 2)) ] || continue
            dp=$((N / (tp * pp)))
            [ "$dp" -le "$BATCH" ] || continue
            pred=$(awk -v tp="$tp" -v pp="$pp" -v dp="$dp" '
                $1 == tp && $2 == pp && $3 == dp && $4 == 0 && $5 == "1f1b" && $6 == pp &&
                $7 == 0 && $17 == 1 && $18 == 1 { print $8; exit }' "$TMP/plan$N")
            [ -n "$pred" ] || continue
            echo "$tp $pp $dp $pred" >>"$TMP/layouts"
            : >"$TMP/reps_${N}_${tp}_$pp"
        done
    done
    if [ "$REPS" = 0 ]; then
        echo "#  tp pp dp predicted_ms"
        awk '{ printf "  %3d %2d %2d %12.2f\n", $1, $2, $3, $4 }' "$TMP/layouts"
        echo "# the plan picks $(sort -k4 -g "$TMP/layouts" | awk 'NR == 1 { printf "tp %s pp %s dp %s", $1, $2, $3 }')"
        continue
    fi
    echo "#  tp pp dp predicted_ms measured_ms (min..max) error"
    # the layouts take turns, so that a change of load falls on all of them
    r=0
    while [ $r -lt "$REPS" ]; do
        while read -r tp pp dp pred; do
            one_run "$N" "$tp" "$pp" "$r"
        done <"$TMP/layouts"
        r=$((r + 1))
    done
    : >"$TMP/rows"
    while read -r tp pp dp pred; do
        set -- $(summary "$N" "$tp" "$pp")
        echo "$tp $pp $dp $pred $1 $2 $3" >>"$TMP/rows"
        awk -v tp="$tp" -v pp="$pp" -v dp="$dp" -v p="$pred" -v m="$1" -v lo="$2" -v hi="$3" 'BEGIN {
            printf "  %3d %2d %2d %12.2f %11.2f (%.2f..%.2f) %+6.1f%%\n", tp, pp, dp, p, m, lo, hi,
                   100 * (p - m) / m }'
    done <"$TMP/layouts"
    echo "# ranking, predicted: $(sort -k4 -g "$TMP/rows" | awk '{ printf "%s%sx%sx%s", (NR > 1 ? " " : ""), $1, $2, $3 }')"
    echo "# ranking, measured:  $(sort -k5 -g "$TMP/rows" | awk '{ printf "%s%sx%sx%s", (NR > 1 ? " " : ""), $1, $2, $3 }')"
    awk '{ tp[NR] = $1; pp[NR] = $2; dp[NR] = $3; p[NR] = $4; m[NR] = $5; lo[NR] = $6; hi[NR] = $7 }
        END {
            for (i = 1; i <= NR; i++) for (j = i + 1; j <= NR; j++) {
                pairs++
                if ((p[i] - p[j]) * (m[i] - m[j]) >= 0) continue
                # apart beyond the noise: the two layouts ranges over their
                # REPS runs (lowest..highest, taken in turns) do not overlap;
                # overlapping, their order is within the repeat spread measured
                if (lo[i] > hi[j] || lo[j] > hi[i]) {
                    bad++
                    list = list sprintf(" %sx%sx%s/%sx%sx%s", tp[i], pp[i], dp[i], tp[j], pp[j], dp[j])
                } else near++
            }
            printf "# pairs ordered differently: %d of %d beyond the noise%s, %d within it\n",
                   bad, pairs, bad ? " (" substr(list, 2) ")" : "", near
        }' "$TMP/rows"
    best_pred=$(sort -k4 -g "$TMP/rows" | head -1)
    best_meas=$(sort -k5 -g "$TMP/rows" | head -1)
    echo "$best_pred $best_meas" | awk '{ printf "# the plan picks tp %s pp %s dp %s: measured %.2f ms; the measured best tp %s pp %s dp %s %.2f ms (%+.1f%%)\n", $1, $2, $3, $5, $8, $9, $10, $12, 100 * ($5 - $12) / $12 }'
done
