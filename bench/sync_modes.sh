#!/bin/sh
# Sync modes side by side on 4 local ranks with slow ranks: wall time of
# training, rank 0's final test accuracy, and the parameter/gradient bytes
# each rank handed to the network.
#   straggler 1:MS   rank 1 sleeps MS ms every step (a slower device)
#   straggler any:MS one rank a step, a different one each time, sleeps MS ms
#                    (jitter: full sync pays it every step; modes that sync
#                    every H steps pay only the worst rank's sum over H steps;
#                    stale:2 lets a rank run up to 2 steps ahead; backup:1
#                    drops the last gradient to arrive each step)
# Then the DiLoCo target (DILOCO=1): no straggler, LONG steps, full sync
# (SGD as the rows above, and AdamW, DiLoCo's inner optimiser) against
# diloco:50 (inner AdamW, cosine lr as default, and constant lr): accuracy
# and bytes per rank. backup:1's bytes are rank 0's, which sends every
# step's result to the N - 1 others; another rank sends one gradient a step.
#
#   sh bench/sync_modes.sh   (BUILD=build, MS=20, STEPS=150, H=10, N=4, DILOCO=1, LONG=600)
set -e
B=${BUILD:-build}
MS=${MS:-20}
STEPS=${STEPS:-150}
H=${H:-10}
N=${N:-4}
DILOCO=${DILOCO:-1}
LONG=${LONG:-600}
[ -x "$B/weft-train" ] || make -s BUILD="$B" "$B/weft-train" "$B/weftrun"
base="--model mlp:784-128-10 --data builtin --train-size 38400 --batch 256 --threads 1"
args="$base --steps $STEPS"
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $N ranks, $STEPS steps of batch 256, mlp:784-128-10, builtin images; H=$H"
printf '%-12s %-10s %10s %10s %14s\n' mode straggler train_s accuracy MB_per_rank
row() { # mode straggle-args label [more args]
    out=$("$B/weftrun" -n $N "$B/weft-train" $args --sync $1 $2 $4 2>&1)
    t=$(echo "$out" | sed -n 's/.*training took \([0-9.]*\) s.*/\1/p')
    mb=$(echo "$out" | sed -n 's/.*per rank: \([0-9.]*\) MB.*/\1/p')
    acc=$(echo "$out" | sed -n 's/.*accuracy \([0-9.]*\) .*/\1/p' | tail -n 1)
    printf '%-12s %-10s %10s %10s %14s\n' "$1" "$3" "$t" "$acc" "$mb"
}
row full "" none
for s in 1:$MS any:$MS; do
    for mode in full local:$H diloco:$H gossip stale:2 backup:1; do
        row $mode "--straggle $s" "$s"
    done
done
[ "$DILOCO" = 1 ] || exit 0
echo
echo "# DiLoCo H=50 against full sync: $N ranks, $LONG steps, no straggler"
printf '%-12s %-22s %10s %10s %14s\n' mode inner train_s accuracy MB_per_rank
args="$base --steps $LONG"
drow() { # mode label args
    out=$("$B/weftrun" -n $N "$B/weft-train" $args --sync $1 $3 2>&1)
    t=$(echo "$out" | sed -n 's/.*training took \([0-9.]*\) s.*/\1/p')
    mb=$(echo "$out" | sed -n 's/.*per rank: \([0-9.]*\) MB.*/\1/p')
    acc=$(echo "$out" | sed -n 's/.*accuracy \([0-9.]*\) .*/\1/p' | tail -n 1)
    printf '%-12s %-22s %10s %10s %14s\n' "$1" "$2" "$t" "$acc" "$mb"
}
drow full "sgd 0.1 m0.9 cosine" ""
drow full "adamw 3e-3 cosine" "--optim adamw --lr 3e-3 --weight-decay 0.01"
drow diloco:50 "adamw 3e-3 cosine" ""
drow diloco:50 "adamw 3e-3 constant" "--schedule constant"
