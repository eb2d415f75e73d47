#!/bin/sh
# ZeRO stages 0-3 on N local ranks (default 4): training time of the demo's
# MLP (784-512-512-10, builtin images, batch 256, SGD momentum 0.9 and AdamW)
# for STEPS steps, final loss, and the bytes per rank that rank 0 reports
# (owned params + grads + optimiser state; the ZeRO formula; the engine's
# extra full-buffer work memory; what is resident between steps after the
# last one: params + grads pages by mincore, plus the optimiser state).
#
#   sh bench/zero_stages.sh          (BUILD=build, N=4, STEPS=100)
set -e
B=${BUILD:-build}
N=${N:-4}
STEPS=${STEPS:-100}
[ -x "$B/weft-train" ] || make -s BUILD="$B" "$B/weft-train" "$B/weftrun"
echo "# $N ranks, mlp:784-512-512-10, builtin, batch 256, $STEPS steps"
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-5s %8s %8s %12s %12s %12s %12s\n' optim zero/MB train_s loss owned_B formula_B work_B resident_B
for opt in sgd adamw; do
    for z in 0 1 2 3 2/0.5 3/0.5; do
        # Z/MB: stage Z with MB-megabyte buckets (the default, 25, holds the
        # whole model in one; smaller ones overlap backward)
        mb=25
        case $z in */*) mb=${z#*/}; z=${z%/*} ;; esac
        out=$("$B/weftrun" -n $N "$B/weft-train" --model mlp --data builtin --batch 256 \
              --steps $STEPS --optim $opt --zero $z --bucket-mb $mb --no-eval --log-every $STEPS 2>&1)
        t=$(echo "$out" | sed -n 's/.*training took \([0-9.]*\) s.*/\1/p')
        loss=$(echo "$out" | sed -n "s/.*step $STEPS\/$STEPS loss \([0-9.]*\).*/\1/p")
        own=$(echo "$out" | sed -n 's/.* = \([0-9]*\) B; ZeRO formula \([0-9]*\) B; engine work buffers +\([0-9]*\) B.*/\1 \2 \3/p')
        res=$(echo "$out" | sed -n 's/.*optimiser resident \([0-9]*\) B.*/\1/p')
        printf '%-6s %-5s %8s %8s %12s %12s %12s %12s\n' $opt "$z/$mb" "$t" "$loss" $own "$res"
    done
done
