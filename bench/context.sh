#!/bin/sh
# Context parallelism against one process at the same sequence length: a
# Llama with grouped-query attention (4 heads, 2 kv heads) on sequences of
# SEQ tokens, batch 2, fp32, one matmul thread a rank. For cp 1 (one
# process) and cp 2 (two ranks on this host, one group): the activations
# a rank keeps for backward (the model's arena, weft-train's "activations
# kept" line, plus the ring's K/V and dK/dV buffers from its counters
# line), each rank's peak resident set (GNU time), the seconds a step
# (the metrics' elapsed time over the steps after the first), the CPU
# seconds of the largest rank's whole run (set-up included: on a loaded
# machine the fairer comparison), and at cp 2 the ring's steps and bytes
# a step. About a minute at the defaults. With TP > 1 both runs add
# --tp TP (TP ranks against cp 2 x tp TP, 2 TP ranks): the ring on each
# tensor rank's heads, the activations of the fullest rank.
#
#   sh bench/context.sh [SEQ] [STEPS] [TP]      (1024, 12, 1)
# BUILD=dir picks the build directory [build].
B=${BUILD:-build}
SEQ=${1:-1024}
STEPS=${2:-12}
TP=${3:-1}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model="llama:vocab=256,ctx=$SEQ,layers=2,heads=4,kv_heads=2,dim=64,ffn=128"
args="--model $model --data builtin --seq $SEQ --batch 2 --steps $STEPS --no-eval"
args="$args --optim sgd --lr 0.01 --threads 1 --log-every $STEPS"
echo "# $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $model, batch 2, $STEPS steps, tp $TP"
[ "$TP" -gt 1 ] && args="$args --tp $TP"
one() { # cp: one run; prints its figures, sets act (activation bytes of rank 0)
    cp=$1 n=$(($1 * TP)) more=
    [ "$cp" -gt 1 ] && more="--cp $cp"
    if [ "$n" = 1 ]; then
        /usr/bin/time -f "rss %M %U %S" -o "$dir/rss.0" "$B/weft-train" $args \
            --metrics "$dir/m$cp.csv" >"$dir/cp$cp.out" 2>&1
    else
        "$B/weftrun" -n "$n" sh -c "exec /usr/bin/time -f 'rss %M %U %S' -o $dir/rss.\$WEFT_RANK \
            $B/weft-train $args $more --metrics $dir/m$cp.csv" >"$dir/cp$cp.out" 2>&1
    fi || { echo "cp $cp: failed"; tail -n 5 "$dir/cp$cp.out"; return 1; }
    # with --tp the pipeline's summary line (the fullest rank's, one micro-batch: the batch)
    arena=$(sed -n -e 's/.*activations kept for backward: \([0-9]*\) B.*/\1/p' \
        -e 's/.*activations of a micro-batch \([0-9]*\) B.*/\1/p' "$dir/cp$cp.out")
    ring=$(sed -n 's/.*ring buffers \([0-9]*\) B.*/\1/p' "$dir/cp$cp.out" | tail -n 1)
    act=$((arena + ${ring:-0}))
    rss=$(cat "$dir"/rss.* | awk '{ if ($2 > m) m = $2 } END { print m }')
    cpu=$(cat "$dir"/rss.* | awk '{ c = $3 + $4; if (c > m) m = c } END { print m }')
    rm -f "$dir"/rss.*
    step=$(awk -F, -v n="$STEPS" '$3 == "train" && $1 == 1 { a = $9 } $3 == "train" { e = $9 }
        END { printf "%.3f", (e - a) / (n - 1) }' "$dir/m$cp.csv")
    printf "cp %d: activations %8.2f MB (arena %.2f + ring %.2f)  peak RSS %7.1f MB  %s s a step  %s CPU s (largest rank)\n" \
        "$cp" "$(echo "$act" | awk '{ print $1 / 1e6 }')" "$(echo "$arena" | awk '{ print $1 / 1e6 }')" \
        "$(echo "${ring:-0}" | awk '{ print $1 / 1e6 }')" "$(echo "$rss" | awk '{ print $1 / 1024 }')" "$step" "$cpu"
    grep -m 1 "context ring" "$dir/cp$cp.out" | sed 's/^\[[0-9]*\] */    /'
}
one 1 && a1=$act
one 2 && a2=$act
[ -n "$a1" ] && [ -n "$a2" ] &&
    echo "cp 2 / cp 1 activations: $(echo "$a2 $a1" | awk '{ printf "%.3f", $1 / $2 }') (target <= 0.6)"
