#!/bin/sh
# Tensor, pipeline and data parallelism on this machine (docs/BENCHMARKS.md,
# "Tensor, sequence and 3D parallelism"): every tp x pp x dp layout of
# 2, 4 and 8 ranks that a GPT of 8 heads allows, at ZeRO 0 and 3, each
# trained for STEPS steps: its measured step time, the fullest rank's
# training state resident (mincore) against the ZeRO formula, and
# weft-sim plan's predicted step and memory for the same layout on the
# host topology; then the plan's ranking against the measured one.
#
#   sh bench/parallel3d.sh        STEPS=8 RANKS="2 4 8" MODEL=gpt:vocab=256,ctx=64,layers=4,heads=8,dim=128
#
# One matmul thread per rank; on a 2-core machine runs of 4 and 8 ranks
# share cores, which the plan models through the host topology's cpu line.
set -e
BUILD=${BUILD:-build}
STEPS=${STEPS:-8}
RANKS=${RANKS:-2 4 8}
MODEL=${MODEL:-gpt:vocab=256,ctx=64,layers=4,heads=8,dim=128}
BATCH=${BATCH:-16}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
make -s -C "$ROOT" -j2 BUILD="$BUILD" "$BUILD/weftrun" "$BUILD/weft-train" "$BUILD/weft-sim" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export WEFT_THREADS=1
echo "# $MODEL, batch $BATCH, $STEPS steps; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s %-3s %-3s %-3s %-4s %10s %10s %12s %12s %7s %12s\n" ranks tp pp dp zero step_ms plan_ms \
    state_B formula_B ratio plan_mem_B
for n in $RANKS; do
    "$B/weft-sim" plan --model "$MODEL" --batch "$BATCH" --ranks "$n" --topo host >"$tmp/plan" 2>&1 || true
    for tp in 1 2 4 8; do
        for pp in 1 2 4; do
            [ $((n % (tp * pp))) -eq 0 ] || continue
            [ $((tp * pp)) -gt 1 ] || continue
            dp=$((n / (tp * pp)))
            for z in 0 3; do
                [ $z -eq 3 ] && [ $dp -lt 2 ] && continue
                "$B/weftrun" -n "$n" "$B/weft-train" --model "$MODEL" --data builtin --batch "$BATCH" \
                    --steps "$STEPS" --no-eval --log-every 100000 --tp $tp --pp $pp --zero $z \
                    --micro-batches $pp >"$tmp/out" 2>&1 || { echo "run failed: n=$n tp=$tp pp=$pp z=$z"; tail -3 "$tmp/out"; continue; }
                step=$(sed -n 's/.*pipeline step: \([0-9.]*\) ms measured.*/\1/p' "$tmp/out")
                res=$(sed -n 's/.*training state \([0-9]*\) B resident, \([0-9]*\) B by.*/\1/p' "$tmp/out")
                form=$(sed -n 's/.*training state \([0-9]*\) B resident, \([0-9]*\) B by.*/\2/p' "$tmp/out")
                # the plan's row for this layout (sp 0, 1f1b at pp > 1, m = pp)
                row=$(awk -v tp=$tp -v pp=$pp -v dp=$dp -v z=$z '$1 == tp && $2 == pp && $3 == dp &&
                      $4 == 0 && $7 == z && $6 == (pp > 1 ? pp : 1) &&
                      ($5 == "1f1b" || pp == 1) { print; exit }' "$tmp/plan")
                pms=$(echo "$row" | awk '{ print $8 }')
                pmem=$(echo "$row" | awk '{ print $13 }')
                printf "%-6s %-3s %-3s %-3s %-4s %10s %10s %12s %12s %7s %12s\n" $n $tp $pp $dp $z "$step" \
                    "${pms:--}" "$res" "$form" \
                    "$(awk -v a="$res" -v b="$form" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }')" \
                    "${pmem:--}"
            done
        done
    done
done
