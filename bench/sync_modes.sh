#!/bin/sh
# Sync modes side by side on 4 local ranks with slow ranks: wall time of
# training, rank 0's final test accuracy, and the parameter/gradient bytes
# each rank handed to the network.
#   straggler 1:MS   rank 1 sleeps MS ms every step (a slower device)
#   straggler any:MS one rank a step, a different one each time, sleeps MS ms
#                    (jitter: full sync pays it every step; modes that sync
#                    every H steps pay only the worst rank's sum over H steps;
#                    stale:2 lets a rank run up to 2 steps ahead)
#
#   sh bench/sync_modes.sh           (BUILD=build, MS=20, STEPS=150, H=10, N=4)
set -e
B=${BUILD:-build}
MS=${MS:-20}
STEPS=${STEPS:-150}
H=${H:-10}
N=${N:-4}
[ -x "$B/weft-train" ] || make -s BUILD="$B" "$B/weft-train" "$B/weftrun"
args="--model mlp:784-128-10 --data builtin --train-size 38400 --batch 256 --steps $STEPS --threads 1"
echo "# $N ranks, $STEPS steps of batch 256, mlp:784-128-10, builtin images; H=$H"
printf '%-12s %-10s %10s %10s %14s\n' mode straggler train_s accuracy MB_per_rank
row() { # mode straggle-args label
    out=$("$B/weftrun" -n $N "$B/weft-train" $args --sync $1 $2 2>&1)
    t=$(echo "$out" | sed -n 's/.*training took \([0-9.]*\) s.*/\1/p')
    mb=$(echo "$out" | sed -n 's/.*per rank: \([0-9.]*\) MB.*/\1/p')
    acc=$(echo "$out" | sed -n 's/.*accuracy \([0-9.]*\) .*/\1/p' | tail -n 1)
    printf '%-12s %-10s %10s %10s %14s\n' "$1" "$3" "$t" "$acc" "$mb"
}
row full "" none
for s in 1:$MS any:$MS; do
    for mode in full local:$H diloco:$H gossip stale:2; do
        row $mode "--straggle $s" "$s"
    done
done
