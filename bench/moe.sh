#!/bin/sh
# A mixture-of-experts Llama against the dense one of the same FLOPs per
# token, one process: 8 experts of width 64 with 2 picked a token (plus the
# router) against a dense MLP of width 128; steps a second of each, and
# the balancing bias's effect: max/mean tokens per expert of the least
# balanced block at the last step, with and without bias=1 (sigmoid
# router, no balancing loss), on the builtin data and on real text (the
# project's own docs as byte tokens). Then expert parallelism on this host:
# 4 ranks at --ep 2 and --ep 4, the dispatch + combine all-to-all's bytes
# and seconds a step (weft-train's counters, mean of the ranks) against the
# time one memory copy of those bytes takes here; and a rank's parameter,
# gradient and optimiser bytes (AdamW) at ep 1, 2 and 4 (each rank holds
# its own experts only). The exchange alone, without the waits the
# step's counters include: weft-bench alltoall at one call's bytes over ep
# ranks, against the same memory copy. About three minutes.
#
#   sh bench/moe.sh [STEPS] [EP_STEPS]     (600, 40)
# BUILD=dir picks the build directory [build].
B=${BUILD:-build}
STEPS=${1:-600}
EP_STEPS=${2:-40}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
base="llama:vocab=256,ctx=64,layers=2,heads=4,dim=64"
args="--batch 16 --seq 64 --steps $STEPS --no-eval --optim adamw --lr 0.003"
args="$args --log-every $STEPS --threads 1"
one() { # name model data: one run; prints steps/s, final loss, max/mean
    "$B/weft-train" --model "$2" --data "$3" $args --metrics "$dir/$1.csv" >"$dir/$1.out" 2>&1 ||
        { echo "$1: weft-train failed"; tail -n 5 "$dir/$1.out"; return 1; }
    awk -F, -v name="$1" -v steps="$STEPS" 'NR > 1 && $3 == "train" { l = $4; e = $9 }
        END { printf "%-12s %8.1f steps/s  loss %.4f", name, steps / e, l }' "$dir/$1.csv"
    bal=$(sed -n 's/.*max\/mean \([0-9.]*\).*/\1/p' "$dir/$1.out" | tail -n 1)
    echo "  max/mean ${bal:--}"
}
echo "# $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
one dense "$base,ffn=128" builtin
one moe "$base,ffn=64,experts=8,topk=2,router=sigmoid" builtin
one moe_bias "$base,ffn=64,experts=8,topk=2,router=sigmoid,bias=1" builtin
here=$(dirname "$0")/..
"$B/weft-tokenize" -o "$dir/text.tok" "$here"/docs/*.md "$here"/README.md >/dev/null ||
    echo "weft-tokenize failed"
one text_moe "$base,ffn=64,experts=8,topk=2,router=sigmoid" "$dir/text.tok"
one text_bias "$base,ffn=64,experts=8,topk=2,router=sigmoid,bias=1" "$dir/text.tok"

# expert parallelism: 4 ranks, 8 experts of width 256 (dim 128), 8
# samples of 64 tokens a rank; the counters' line of every rank
echo "# expert parallelism, 4 ranks on this host ($EP_STEPS steps each)"
epm="llama:vocab=256,ctx=64,layers=2,heads=4,dim=128,ffn=256,experts=8,topk=2"
for ep in 2 4; do
    "$B/weftrun" -n 4 "$B/weft-train" --model "$epm" --data builtin --batch 32 --seq 64 \
        --steps "$EP_STEPS" --log-every "$EP_STEPS" --no-eval --optim adamw --lr 0.003 \
        --threads 1 --ep $ep >"$dir/ep$ep.out" 2>&1 ||
        { echo "ep $ep: failed"; tail -n 5 "$dir/ep$ep.out"; continue; }
    # MB and ms a step, means over the ranks
    set -- $(sed -n 's/.*all-to-all \([0-9.]*\) MB and \([0-9.]*\) ms a step.*/\1 \2/p' \
        "$dir/ep$ep.out" | awk '{ b += $1; t += $2; n++ } END { printf "%f %f", b / n, t / n }')
    # the same bytes copied once in memory here (a buffer of that size,
    # copied over and over, the mean)
    copy=$(python3 -c "
import time
n = max(1, int($1 * 1e6)); a = bytearray(n); b = bytearray(n); k = max(20, int(2e9 / n))
t = time.perf_counter()
for _ in range(k):
    b[:] = a
print('%.4f' % ((time.perf_counter() - t) / k * 1e3))")
    awk -v ep="$ep" -v mb="$1" -v ms="$2" -v cp="$copy" 'BEGIN {
        printf "ep %d: dispatch + combine %.3f MB and %.2f ms a step a rank; one memory copy of those bytes %.3f ms: %.1fx\n",
               ep, mb, ms, cp, (cp > 0 ? ms / cp : 0) }'
    grep "tokens per expert max/mean" "$dir/ep$ep.out" | grep "group" | head -n 1 |
        sed 's/.*group/  the group/'
    # the exchange alone, without the wait for the group's slowest rank
    # that the step's counters include: weft-bench's alltoall over ep
    # ranks (each call timed from its own synchronised loop) at one call's
    # bytes (the step's over its 8 calls: 2 layers, dispatch and combine,
    # forward and backward), the rank's own block added back (ep/(ep-1))
    per=$(awk -v mb="$1" -v ep="$ep" 'BEGIN { b = mb * 1e6 / 8 * ep / (ep - 1)
        q = 4 * ep; printf "%d", int(b / q + 0.5) * q }')
    us=$("$B/weftrun" -n "$ep" "$B/weft-bench" alltoall -l "$per" -w 10 -n 100 -c 0 -I 1 2>&1 |
        awk -v b="$per" '$2 == b { print $7 }' | tail -n 1)
    awk -v ep="$ep" -v b="$per" -v us="$us" -v cp="$copy" 'BEGIN {
        printf "  the exchange alone (weft-bench alltoall, %d ranks, %d B a call): %s us a call, %.3f ms for 8: %.1fx the memory copy\n",
               ep, b, us, 8 * us / 1e3, (cp > 0 ? 8 * us / 1e3 / cp : 0) }'
done

# a rank's training state: without --ep every rank holds every expert
echo "# a rank's parameters + gradients + optimiser state (AdamW), 4 ranks, $epm"
for ep in 1 2 4; do
    "$B/weftrun" -n 4 "$B/weft-train" --model "$epm" --data builtin --batch 32 --seq 64 \
        --steps 2 --no-eval --optim adamw --lr 0.003 --threads 1 --ep $ep \
        >"$dir/mem$ep.out" 2>&1 || { echo "ep $ep: failed"; tail -n 5 "$dir/mem$ep.out"; continue; }
    sed -n 's/.*per rank (rank 0): params \([0-9]*\) B, grads \([0-9]*\) B, optimiser \([0-9]*\) B = \([0-9]*\) B.*/\1 \2 \3 \4/p' \
        "$dir/mem$ep.out" | awk -v ep="$ep" '{ printf "ep %d: params %.2f MB, grads %.2f MB, optimiser %.2f MB = %.2f MB a rank\n", ep, $1 / 1e6, $2 / 1e6, $3 / 1e6, $4 / 1e6 }'
done
