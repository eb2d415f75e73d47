#!/bin/sh
# ZeRO-3 layer by layer and activation recomputation (docs/BENCHMARKS.md,
# "ZeRO-3 layer by layer"): a GPT trained data-parallel at RANKS ranks with
# ZeRO 0, ZeRO 3, and ZeRO 3 with --recompute; for each, rank 0's training
# state resident between steps against the ZeRO formula, the most its
# parameter and gradient buffers (plus optimiser state) held resident
# during a step, the activations kept for backward, and samples/s.
#
#   sh bench/zero3_layers.sh       RANKS=4 STEPS=6 MODEL=gpt:vocab=256,ctx=64,layers=8,heads=4,dim=256
set -e
BUILD=${BUILD:-build}
RANKS=${RANKS:-4}
STEPS=${STEPS:-6}
MODEL=${MODEL:-gpt:vocab=256,ctx=64,layers=8,heads=4,dim=256}
BATCH=${BATCH:-16}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
make -s -C "$ROOT" -j2 BUILD="$BUILD" "$BUILD/weftrun" "$BUILD/weft-train" >/dev/null
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
export WEFT_THREADS=1
echo "# $MODEL, $RANKS ranks, batch $BATCH, $STEPS steps; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-16s %12s %12s %12s %12s %12s %10s\n" run between_B formula_B peak_B peak_bound_B act_B samples/s
for run in "0" "3" "3 --recompute"; do
    set -- $run
    z=$1; shift
    "$B/weftrun" -n "$RANKS" "$B/weft-train" --model "$MODEL" --data builtin --batch "$BATCH" \
        --steps "$STEPS" --no-eval --zero "$z" "$@" >"$tmp" 2>&1 || { echo "run failed: zero $run"; tail -3 "$tmp"; continue; }
    between=$(sed -n 's/.*optimiser resident \([0-9]*\) B; ZeRO formula \([0-9]*\) B.*/\1/p' "$tmp")
    formula=$(sed -n 's/.*optimiser resident \([0-9]*\) B; ZeRO formula \([0-9]*\) B.*/\2/p' "$tmp")
    peak=$(sed -n 's/.*at most \([0-9]*\) B resident.*/\1/p' "$tmp")
    extra=$(sed -n 's/.*the shards + \([0-9]*\) B.*/\1/p' "$tmp")
    shards=$(sed -n 's/.*grads \([0-9]*\) B, optimiser \([0-9]*\) B = \([0-9]*\) B;.*/\3/p' "$tmp")
    act=$(sed -n 's/.*activations kept for backward: \([0-9]*\) B.*/\1/p' "$tmp")
    sps=$(sed -n 's/.*step [0-9]*\/[0-9]* loss [0-9.]* samples\/s \([0-9.]*\).*/\1/p' "$tmp" | tail -n 1)
    # ZeRO 0 holds both whole buffers throughout a step
    [ -n "$peak" ] || peak=$between
    bound=$([ -n "$extra" ] && echo $((shards + extra)) || echo -)
    printf "%-16s %12s %12s %12s %12s %12s %10s\n" "zero $run" "$between" "$formula" "$peak" "$bound" "$act" "$sps"
done
