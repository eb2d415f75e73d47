#!/bin/sh
# Where a training step's time goes, by kind of work: weft-enginebench
# under `perf record` (CPU samples of every thread), each sample put in a
# bucket by the function it was taken in:
#
#   products     the GEMM kernels and their packing (portable, bf16, OpenBLAS)
#   attention    the blockwise attention's softmax rows and bookkeeping
#                (its matrix products count as products)
#   norms        LayerNorm / RMSNorm forward and backward
#   elementwise  GELU / SwiGLU, bias, residual, embedding, rope, loss
#   rounding     a bf16 run's rounding of the products' operands
#   optimiser    AdamW / SGD and the gradient norm
#   setup        weight initialisation and the kernel choice (outside the steps)
#   other        the rest: memset/memcpy (zero_grad), the pool's waits, the kernel
#
# Only the timed steps are sampled (weft-enginebench --perf-ctl starts
# and stops perf), so the warm-up's first-touch page faults and the
# weights' initialisation are left out; shares are of the samples outside
# setup (what is left of it: the kernel choice's timing, if any). weft-enginebench --phases 1
# gives the same run's wall time per phase (forward, backward, optimiser,
# and attention's part of forward and backward); this gives what within
# them. Gradient reduction: none on one process; weft-enginebench --dp 1
# --phases 1 under weftrun times it as a phase of its own.
#
#   sh bench/engine_phases.sh [weft-enginebench arguments]
#   (BUILD=build; default: the GPT at width 512, batch 4 x 128, AdamW, 10 steps,
#    one thread; add --prec bf16 for a bf16 run)
set -e
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "needs perf (linux-perf)" >&2; exit 1; }
make -s -j2 BUILD="$BUILD" "$BUILD/weft-enginebench" >/dev/null
[ $# -gt 0 ] || set -- --model gpt:vocab=256,ctx=128,layers=4,heads=8,dim=512 --batch 4 \
    --seq 128 --optim adamw --steps 10 --threads 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# only the timed steps: weft-enginebench enables the events as they start
mkfifo "$tmp/ctl"
perf record -q -F 2000 -D -1 --control "fifo:$tmp/ctl" -o "$tmp/perf.data" \
    "$BUILD/weft-enginebench" "$@" --phases 1 --perf-ctl "$tmp/ctl" \
    >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
grep -E "^(phases|step|weft|bf16)" "$tmp/out"
perf report -q -i "$tmp/perf.data" --no-children --sort symbol --stdio 2>/dev/null |
awk '
    function bucket(s) {
        if (s ~ /^(kern_|train_mmb_|train_mma_|pack_|tr16|gemm_|sgemm|dgemm|train_mmp_gemm|block_tiles|add_block|tiles_)/) return "products"
        if (s ~ /^(att_|row_exp|row_max|vexp_row|block_scores|round_rows|hsum8)/) return "attention"
        if (s ~ /^(ln_|rms|train_layernorm|train_rmsnorm)/) return "norms"
        if (s ~ /^(adamw|sgd_|opt_|weft_optim|weft_sumsq|sumsq)/) return "optimiser"
        if (s ~ /^(narrow_bf16|round_cvt|round_range|round_rows|half_f32_to_bf16)/) return "rounding"
        if (s ~ /^(gelu|bias_|train_gelu|train_bias|swiglu|train_swiglu|train_residual|train_embedding|train_softmax|train_rope|rope|train_linear|train_relu)/) return "elementwise"
        if (s ~ /^(train_model_init|weft_rng|__cos|__sin|__log|__ieee754|train_peak|train_mm_settle|mm_)/) return "setup"
        return "other"
    }
    $1 ~ /%$/ && $2 == "[.]" || $2 == "[k]" {
        pct = $1; sub(/%/, "", pct); sym = $3
        b = $2 == "[k]" ? "other" : bucket(sym)
        share[b] += pct; if (b != "setup") total += pct
        if (b == "other" && pct >= 0.5) top = top sprintf(" %s %.1f%%", sym, pct)
    }
    END {
        n = split("products attention norms elementwise rounding optimiser other", order, " ")
        printf "share of the steps'"'"' CPU samples:"
        for (i = 1; i <= n; i++)
            printf " %s %.1f%%%s", order[i], total ? 100 * share[order[i]] / total : 0, i < n ? "," : "\n"
        printf "(setup %.1f%% of all samples left out; other'"'"'s largest:%s)\n", share["setup"], top
    }'
