#!/bin/sh
# A mixture-of-experts Llama against the dense one of the same FLOPs per
# token, one process: 8 experts of width 64 with 2 picked a token (plus the
# router) against a dense MLP of width 128; steps a second of each, and
# the balancing bias's effect: max/mean tokens per expert of the least
# balanced block (weft-train prints it every step), without the bias,
# with bias=1 (DeepSeek-V3's sign step) and with bias=2 (the step
# proportional to the load's deviation), sigmoid router, no balancing
# loss, on the builtin data and on real text (the project's own docs as
# byte tokens). Three figures a row: the last step's, and over the last
# 10% of the steps the mean and the largest of each step's figure. One
# step is one batch's sample (16 x 64 tokens, 2 picks each over 8
# experts): even loads balanced on average read 1.1-1.2 in a single step
# on real text, so the mean over the last tenth is the fairer figure.
# Beside them, what one batch allows (bench/moe_balance.c): the figure for
# the ideal router (each token's picks uniform: sampling alone), once; and
# for each real-text run with a bias, its trained model with the bias
# frozen at its last value over the training stream's next tenth of
# batches (each batch's figure, and the loads summed over them: how well
# the bias balances on average), and with a bias set anew for the
# trained weights (the proportional step over 600 further batches,
# averaged over the latter half: the balance a constant bias reaches),
# frozen, over 300 more: the per-step figure no bias stepped once a step
# can beat on this data.
# Then expert parallelism on this host,
# ep ranks at --ep 2 and --ep 4: the dispatch + combine all-to-all-v's
# bytes and milliseconds a step (weft-train's counters, mean of the ranks:
# the data's movement and the wait for the group's slowest rank, both);
# the movement alone, measured in the same run by weft-bench (all-to-all-v
# of one call's bytes, each call after a barrier and timed alone: from
# weft_mem_alloc's memory, as the training sends, and from plain memory
# under auto and under single copy); one
# memcpy of the same bytes, measured by the same weft-bench, twice: from a
# buffer in the copying core's own cache (copy) and from one another rank
# has just written (xcopy: the lines come from the other core, as a
# peer's block does); the mean, median and fastest call against each;
# and the waiting, the counters' time less the movement. The movement from
# weft_mem_alloc's memory runs twice: placed by the kernel, and with
# rank r bound to core r mod the cores (weftrun --bind-to core): where the kernel keeps
# two ranks on one core (the "one CPU" share weft-bench prints), they take
# turns at their copies and a call takes about twice the copying, which
# is what made the unbound figure bimodal from run to run. Last, a rank's parameter,
# gradient and optimiser bytes (AdamW) at ep 1, 2 and 4 (each rank holds
# its own experts only). About six minutes.
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
args="$args --log-every 1 --threads 1"
libs="-lpthread -lm"
for p in openblas libfabric libssl libcrypto; do
    pkg-config --exists $p 2>/dev/null && libs="$libs $(pkg-config --libs $p)"
done
${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -I"$(dirname "$0")/../include" "$(dirname "$0")/moe_balance.c" \
    "$B/libweft.a" $libs -o "$dir/moe_balance" || echo "moe_balance did not build"
one() { # name model data: one run; prints steps/s, final loss, max/mean
    "$B/weft-train" --model "$2" --data "$3" $args --metrics "$dir/$1.csv" \
        --save "$dir/$1.ckpt" >"$dir/$1.out" 2>&1 ||
        { echo "$1: weft-train failed"; tail -n 5 "$dir/$1.out"; return 1; }
    awk -F, -v name="$1" -v steps="$STEPS" 'NR > 1 && $3 == "train" { l = $4; e = $9 }
        END { printf "%-12s %8.1f steps/s  loss %.4f", name, steps / e, l }' "$dir/$1.csv"
    # each step's max/mean: the last, then the mean and the largest of
    # the last tenth of the steps
    sed -n 's/.*tokens per expert max\/mean \([0-9.]*\).*/\1/p' "$dir/$1.out" |
        awk -v steps="$STEPS" '{ v[NR] = $1 } END {
            if (!NR) { print "  max/mean -"; exit }
            t = int(steps / 10); if (t < 1) t = 1; if (t > NR) t = NR
            s = 0; mx = 0
            for (i = NR - t + 1; i <= NR; i++) { s += v[i]; if (v[i] > mx) mx = v[i] }
            printf "  max/mean last step %.3f, last %d steps mean %.3f largest %.3f\n", v[NR], t, s / t, mx }'
    # a run with a bias on a token file: what its router does with the bias frozen
    case "$2" in *bias=*) ;; *) return 0 ;; esac
    [ -f "$3" ] && [ -x "$dir/moe_balance" ] || return 0
    tenth=$((STEPS / 10 > 0 ? STEPS / 10 : 1))
    "$dir/moe_balance" frozen "$dir/$1.ckpt" "$3" 16 64 $tenth train "$STEPS" |
        sed 's/^/  /; s/ the training stream.s next batches,/ the next batches,/'
    "$dir/moe_balance" frozen "$dir/$1.ckpt" "$3" 16 64 300 train "$STEPS" 600 |
        sed 's/^/  /; s/ the training stream.s next batches,/ the next batches,/'
}
echo "# $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
[ -x "$dir/moe_balance" ] &&
    "$dir/moe_balance" floor 8 2 1024 2 2000 $((STEPS / 10 > 0 ? STEPS / 10 : 1)) 1
one dense "$base,ffn=128" builtin
one moe "$base,ffn=64,experts=8,topk=2,router=sigmoid" builtin
one moe_bias "$base,ffn=64,experts=8,topk=2,router=sigmoid,bias=1" builtin
one moe_bias2 "$base,ffn=64,experts=8,topk=2,router=sigmoid,bias=2" builtin
here=$(dirname "$0")/..
"$B/weft-tokenize" -o "$dir/text.tok" "$here"/docs/*.md "$here"/README.md >/dev/null ||
    echo "weft-tokenize failed"
one text_moe "$base,ffn=64,experts=8,topk=2,router=sigmoid" "$dir/text.tok"
one text_bias "$base,ffn=64,experts=8,topk=2,router=sigmoid,bias=1" "$dir/text.tok"
one text_bias2 "$base,ffn=64,experts=8,topk=2,router=sigmoid,bias=2" "$dir/text.tok"

# expert parallelism on this host, ep ranks (ep 2: one a core), 8 experts
# of width 256 (dim 128), 8 samples of 64 tokens a rank
echo "# expert parallelism, ep ranks on this host ($EP_STEPS steps each)"
# rank r of a run on core r mod the cores, for the bound movement
ncores=$(nproc 2>/dev/null || echo 1)
epm="llama:vocab=256,ctx=64,layers=2,heads=4,dim=128,ffn=256,experts=8,topk=2"
for ep in 2 4; do
    "$B/weftrun" -n $ep "$B/weft-train" --model "$epm" --data builtin --batch $((8 * ep)) \
        --seq 64 --steps "$EP_STEPS" --log-every "$EP_STEPS" --no-eval --optim adamw \
        --lr 0.003 --threads 1 --ep $ep >"$dir/ep$ep.out" 2>&1 ||
        { echo "ep $ep: failed"; tail -n 5 "$dir/ep$ep.out"; continue; }
    # MB and ms a step, means over the ranks: the step's 8 all-to-all-v
    # calls (2 layers, dispatch and combine, forward and backward), timed
    # from each call's start, so with the wait for the group's slowest rank
    set -- $(sed -n 's/.*all-to-all \([0-9.]*\) MB and \([0-9.]*\) ms a step.*/\1 \2/p' \
        "$dir/ep$ep.out" | awk '{ b += $1; t += $2; n++ } END { printf "%f %f", b / n, t / n }')
    mb=$1 ms=$2
    printf "ep %d: dispatch + combine %.3f MB a step a rank, %.2f ms a step in the counters (the data's movement and the wait for the slowest rank)\n" \
        "$ep" "$mb" "$ms"
    # what a rank copies in memory around those calls (the rows' gather,
    # any staging or regrouping): bytes, not time, so load does not move it
    sed -n 's/.*copied in memory around it \([0-9.]*\) MB a step.*/\1/p' "$dir/ep$ep.out" |
        awk -v ep="$ep" '{ c += $1; n++ } END { if (n) printf "  copied in memory around them: %.3f MB a step a rank (mean)\n", c / n }'
    grep "tokens per expert max/mean" "$dir/ep$ep.out" | grep "group" | head -n 1 |
        sed 's/.*group/  the group/; s/; copied.*//'
    # The movement alone, in the same run: weft_alltoallv over ep ranks at
    # one call's bytes (the counters' bytes are what a rank sends others:
    # its own block added back, ep/(ep-1)), equal blocks, every call
    # started after a barrier of its own and timed alone (-S: the barrier's
    # wait printed apart, and the fastest call); against one memcpy of a
    # rank's receive buffer (-M, the fastest of as many), rank 0 alone and
    # all ranks at once.
    per=$(awk -v mb="$mb" -v ep="$ep" 'BEGIN { b = mb * 1e6 / 8 * ep / (ep - 1)
        q = 4 * ep; printf "%d", int(b / q + 0.5) * q }')
    # The training's path (its send buffers are weft_mem_alloc's: single
    # copy out of the senders' regions), then plain memory under auto (the
    # schedule over shared memory) and WEFT_ALGO=direct (process_vm_readv)
    # for comparison; the waiting from the first.
    # "fresh" is the bound run with each rank's send buffer written again
    # before every call (-F, untimed), as a dispatch's rows are just
    # computed: its peers then read lines last written on the other core.
    for algo in registered bound fresh auto direct; do
        reg= a=$algo label="plain memory, WEFT_ALGO=$algo" wrap=
        [ $algo = registered ] && reg=-R a=auto label="weft_mem_alloc's memory, WEFT_ALGO=auto"
        [ $algo = bound ] && reg=-R a=auto wrap="--bind-to core" \
            label="weft_mem_alloc's memory, WEFT_ALGO=auto, rank r bound to core r mod $ncores"
        [ $algo = fresh ] && reg="-R -F" a=auto wrap="--bind-to core" \
            label="weft_mem_alloc's memory written before each call, WEFT_ALGO=auto, bound"
        WEFT_ALGO=$a "$B/weftrun" -n "$ep" $wrap "$B/weft-bench" alltoall -V -S -M $reg -l "$per" \
            -w 20 -n 200 -c 1 2>&1 | awk -v b="$per" '$2 == b' >"$dir/mv$ep$algo"
        [ -s "$dir/mv$ep$algo" ] || { echo "  weft-bench alltoall -V $reg, WEFT_ALGO=$a: failed"; continue; }
        awk -v ep="$ep" -v b="$per" -v ms="$ms" -v algo="$algo" -v label="$label" '{
            for (i = 1; i <= NF; i++) {
                if ($i == "wait") w = $(i + 1)
                if ($i == "least") lt = $(i + 1)
                if ($i == "copy") k = i
                if ($i == "median") md = $(i + 1)
                if ($i == "xcopy") { xa = $(i + 1); xp = $(i + 2) }
                if ($i == "onecpu") { one = $(i + 1); t1 = $(i + 2); t2 = $(i + 3) }
            }
            us = $7; c1 = $(k + 1); cp = $(k + 2); wrong = $10
            printf "  movement alone, %s (weft-bench alltoall -V -S -M%s, %d ranks, %d B a call, %s wrong): %.2f us a call (median %.2f, fastest %.2f), %.3f ms for 8\n", label, (algo == "fresh" ? " -R -F" : (algo == "registered" || algo == "bound" ? " -R" : "")), ep, b, wrong, us, md, lt, 8 * us / 1e3
            printf "    calls with two ranks on one CPU: %.0f%% (mean %.2f us), with every rank on its own: %.0f%% (mean %.2f us)\n", 100 * one, t1, 100 - 100 * one, t2
            printf "    one memcpy of a rank'"'"'s receive buffer (the fastest): %.2f us (rank 0 alone), %.2f us (all ranks at once); the movement: %.2fx and %.2fx that (the median call: %.2fx and %.2fx; the fastest: %.2fx and %.2fx)\n", c1, cp, (c1 > 0 ? us / c1 : 0), (cp > 0 ? us / cp : 0), (c1 > 0 ? md / c1 : 0), (cp > 0 ? md / cp : 0), (c1 > 0 ? lt / c1 : 0), (cp > 0 ? lt / cp : 0)
            if (xa != "" && xa != "N/A")
                printf "    the same memcpy from a source another rank has just written (xcopy, the fastest): %.2f us (rank 0 alone), %.2f us (all ranks at once); the movement: %.2fx and %.2fx that (the median call: %.2fx and %.2fx; the fastest: %.2fx and %.2fx)\n", xa, xp, us / xa, (xp > 0 ? us / xp : 0), md / xa, (xp > 0 ? md / xp : 0), lt / xa, (xp > 0 ? lt / xp : 0)
            if (algo == "registered")
                printf "    waiting: the counters'"'"' %.2f ms a step less the movement'"'"'s %.3f ms = %.2f ms (%.0f%%); in weft-bench a call'"'"'s barrier waited %.2f us\n", ms, 8 * us / 1e3, ms - 8 * us / 1e3, (ms > 0 ? 100 * (ms - 8 * us / 1e3) / ms : 0), w }' \
            "$dir/mv$ep$algo"
    done
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
