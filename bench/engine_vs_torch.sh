#!/bin/sh
# Training throughput and model-FLOPs utilisation (MFU) of weft's engine
# against PyTorch, one thread each, on synthetic data. A step is zero_grad
# + forward + backward + optimiser step, timed over the given number of
# steps after 3 warm-up steps.
#
#   mlp     MLP 784-512-512-10, batch 256, SGD (momentum 0.9, lr 0.01)
#   gpt128  GPT vocab 256, ctx 64, 4 layers, 4 heads, width 128, batch 8 x 64, AdamW
#   gpt512  GPT vocab 256, ctx 128, 4 layers, 8 heads, width 512, batch 4 x 128, AdamW
#   gpt768  GPT vocab 256, ctx 128, 12 layers, 12 heads, width 768 (GPT-2 small's
#           blocks), batch 2 x 128, AdamW
#   gpt512bf16, gpt1024bf16  bf16 against fp32 (not in the default CASES): the
#           GPT at width 512 or 1024 (ctx 128, 4 layers, 8 heads, batch 4 x 128,
#           AdamW), weft --prec fp32 and --prec bf16 against torch fp32 and torch
#           autocast bf16 (torch.autocast("cpu", dtype=torch.bfloat16) around the
#           forward and the loss), at each thread count in THREADS (default
#           "1 2"); its own table, samples/s and bf16 / fp32 ratios
#
# The torch GPT is the reference script's module (tools/ref/make_ref.py).
# Both link the same OpenBLAS (Debian's torch uses libblas.so.3, which is
# OpenBLAS), so OPENBLAS_CORETYPE, when set, forces one kernel for both;
# unset, both use what OpenBLAS detects. weft runs with WEFT_MATMUL=auto
# (the faster of its portable kernel and OpenBLAS, measured once per host),
# and, for comparison, each backend forced. MFU is model FLOPs (6 N per
# token plus 12 L T d for attention, src/train/flops.c) per second over one
# thread's measured sgemm peak (the best kernel's, src/train/peak.c), the
# same denominator for weft and torch. Rounds run interleaved and the best
# of each is kept: other processes only ever slow a run down.
#
#   sh bench/engine_vs_torch.sh  (BUILD=build ROUNDS=3 STEPS=10 CASES="mlp gpt128 gpt512 gpt768"
#                                 OPENBLAS_CORETYPE=...)
#   ROUNDS=1 STEPS=4 CASES="gpt512bf16 gpt1024bf16" sh bench/engine_vs_torch.sh
#                                 (the bf16 table, about 3 minutes on 2 Zen 5 cores)
#
# Needs Debian's python3-torch (it installs into /usr/bin/python3).
set -e
BUILD=${BUILD:-build}
STEPS=${STEPS:-10}
ROUNDS=${ROUNDS:-3}
CASES=${CASES:-mlp gpt128 gpt512 gpt768}
THREADS=${THREADS:-1 2}
PY=${PY:-/usr/bin/python3}
LOCK=${LOCK:-/tmp/weft-bench.lock}
cd "$(dirname "$0")/.."

make -s -j2 BUILD="$BUILD" "$BUILD/weft-enginebench" >/dev/null
if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "needs python3-torch for $PY (Debian: apt-get install python3-torch)" >&2
    exit 1
fi

# case -> model spec, batch, seq, optimiser, steps
args() {
    case $1 in
    mlp) echo "mlp:784-512-512-10 256 1 sgd $((STEPS * 10))" ;;
    gpt128) echo "gpt:vocab=256,ctx=64,layers=4,heads=4,dim=128 8 64 adamw $((STEPS * 2))" ;;
    gpt512) echo "gpt:vocab=256,ctx=128,layers=4,heads=8,dim=512 4 128 adamw $STEPS" ;;
    gpt768) echo "gpt:vocab=256,ctx=128,layers=12,heads=12,dim=768 2 128 adamw $(((STEPS + 1) / 2))" ;;
    gpt512bf16) echo "gpt:vocab=256,ctx=128,layers=4,heads=8,dim=512 4 128 adamw $STEPS" ;;
    gpt1024bf16) echo "gpt:vocab=256,ctx=128,layers=4,heads=8,dim=1024 4 128 adamw $(((STEPS + 1) / 2))" ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
    esac
}

torch_run() {   # spec batch seq optim steps (PREC=fp32|bf16 NT=threads)
    # OpenBLAS keeps its own thread count (one a core) whatever torch sets
    SPEC=$1 B=$2 T=$3 OPT=$4 STEPS=$5 PREC=${PREC:-fp32} NT=${NT:-1} OPENBLAS_NUM_THREADS=${NT:-1} \
        flock "$LOCK" "$PY" - <<'PYEOF'
import contextlib, os, sys, time, torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, "tools/ref")
from make_ref import GPT
prec, nt = os.environ["PREC"], int(os.environ["NT"])
torch.set_num_threads(nt)
def cast():
    if prec == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()
torch.manual_seed(0)
spec, B, T, steps = os.environ["SPEC"], int(os.environ["B"]), int(os.environ["T"]), int(os.environ["STEPS"])
if spec.startswith("mlp:"):
    w = [int(x) for x in spec[4:].split("-")]
    layers = []
    for i in range(len(w) - 1):
        layers.append(nn.Linear(w[i], w[i + 1]))
        if i + 2 < len(w):
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    xs = [torch.rand(B, w[0]) for _ in range(4)]
    ys = [torch.randint(0, w[-1], (B,)) for _ in range(4)]
    flops = 6 * sum(p.numel() for p in model.parameters()) * B
else:
    kv = dict(x.split("=") for x in spec[4:].split(","))
    V, ctx, L, H, C = (int(kv[k]) for k in ("vocab", "ctx", "layers", "heads", "dim"))
    model = GPT(V, ctx, L, H, C)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    xs = [torch.randint(0, V, (B, T)) for _ in range(4)]
    ys = [torch.randint(0, V, (B, T)) for _ in range(4)]
    n = sum(p.numel() for p in model.parameters())
    flops = B * T * (6 * n + 12 * L * T * C)
warmup = 3
for s in range(warmup + steps):
    if s == warmup:
        t0 = time.perf_counter()
    opt.zero_grad()
    with cast():
        logits = model(xs[s % 4])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), ys[s % 4].reshape(-1))
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
print("torch %s %s batch %d %s threads %d: %d steps in %.3f s, loss %.4f, %.2f GFLOP/step, "
      "%.1f GFLOP/s, %.1f samples/s" % (torch.__version__, spec, B, prec, nt, steps, dt,
                                       loss.item(), flops / 1e9, flops * steps / dt / 1e9,
                                       steps * B / dt))
PYEOF
}

weft_run() {   # matmul spec batch seq optim steps
    mm=$1; shift
    WEFT_MATMUL=$mm WEFT_THREADS=1 flock "$LOCK" "$BUILD/weft-enginebench" --threads 1 \
        --model "$1" --batch "$2" --seq "$3" --optim "$4" --steps "$5" --warmup 3
}

weft_prec() {   # prec threads spec batch seq optim steps
    p=$1 t=$2; shift 2
    WEFT_THREADS=$t flock "$LOCK" "$BUILD/weft-enginebench" --threads "$t" --prec "$p" \
        --model "$1" --batch "$2" --seq "$3" --optim "$4" --steps "$5" --warmup 3
}

# A bf16 case, one round: torch fp32 and autocast bf16, weft fp32 and bf16,
# at each thread count; results in $tmp/CASE.{torch,weft}.{fp32,bf16}.THREADS
bf16_round() {   # case spec batch seq optim steps
    c=$1; shift
    for t in $THREADS; do
        for p in fp32 bf16; do
            PREC=$p NT=$t torch_run "$@" | tee -a "$tmp/$c.torch.$p.$t"
            if weft_prec $p "$t" "$@" >"$tmp/line" 2>&1; then
                grep -E 'samples/s$|^bf16 products' "$tmp/line"
                grep '^bf16 products' "$tmp/line" >>"$tmp/kernel" || true # none in fp32
                grep 'samples/s$' "$tmp/line" >>"$tmp/$c.weft.$p.$t"
            else
                echo "weft $p: $(cat "$tmp/line")"
            fi
        done
    done
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(detected)}; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
r=1
while [ $r -le "$ROUNDS" ]; do
    for c in $CASES; do
        set -- $(args "$c")
        case $c in *bf16) bf16_round "$c" "$@"; continue ;; esac
        torch_run "$@" | tee -a "$tmp/$c.torch"
        for mm in auto portable openblas; do
            if weft_run $mm "$@" >"$tmp/line" 2>&1; then
                # auto also says which kernel it chose; only results are kept
                cat "$tmp/line"
                grep 'samples/s$' "$tmp/line" >>"$tmp/$c.$mm"
            else
                echo "weft $mm: $(cat "$tmp/line")"
            fi
        done
    done
    r=$((r + 1))
done

best() {   # samples/s of the best run in file $1
    [ -s "$1" ] || { echo 0; return; }
    awk '{print $(NF-1)}' "$1" | sort -g | tail -1
}
# one thread's peak, as weft measured it (the first weft line says)
peak=$(cat "$tmp"/*.auto 2>/dev/null | sed -n 's/.* of 1 x \([0-9.]*\) GFLOP\/s.*/\1/p' | head -1)
gflop() {   # GFLOP per step from file $1
    sed -n 's/.* \([0-9.]*\) GFLOP\/step.*/\1/p' "$1" | head -1
}
echo
echo "CPU: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(nproc) cores;" \
    "bf16 kernel: $(sed -n 's/^bf16 products on \([^:]*\):.*/\1/p' "$tmp/kernel" 2>/dev/null | head -1)"
echo "best of $ROUNDS rounds; fp32 table: one thread, MFU against one thread's sgemm peak of ${peak:-?} GFLOP/s;"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
bf16_rows=0
for c in $CASES; do
    case $c in *bf16) ;; *) continue ;; esac
    if [ $bf16_rows = 0 ]; then
        echo
        echo "| case | threads | torch fp32 | torch autocast bf16 | weft fp32 | weft bf16 | weft bf16 / fp32 | weft bf16 / torch bf16 | weft bf16 MFU (bf16 peak) |"
        echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        bf16_rows=1
    fi
    for t in $THREADS; do
        tf=$(best "$tmp/$c.torch.fp32.$t"); tb=$(best "$tmp/$c.torch.bf16.$t")
        wf=$(best "$tmp/$c.weft.fp32.$t"); wb=$(best "$tmp/$c.weft.bf16.$t")
        mfu=$(sed -n 's/.* MFU \([0-9.]*%\) of.*/\1/p' "$tmp/$c.weft.bf16.$t" 2>/dev/null | sort -g | tail -1)
        echo "| $c | $t | $tf | $tb | $wf | $wb | $(awk -v a="$wb" -v b="$wf" 'BEGIN { if (b > 0) printf "%.2f", a / b }') |" \
            "$(awk -v a="$wb" -v b="$tb" 'BEGIN { if (b > 0) printf "%.2f", a / b }') | ${mfu:-?} |"
    done
done
fp32_rows=0
for c in $CASES; do
    case $c in *bf16) continue ;; esac
    if [ $fp32_rows = 0 ]; then
        echo
        echo "| case | torch samples/s (MFU) | weft auto samples/s (MFU) | weft / torch | weft portable | weft OpenBLAS |"
        echo "| --- | --- | --- | --- | --- | --- |"
        fp32_rows=1
    fi
    t=$(best "$tmp/$c.torch")
    f=$(gflop "$tmp/$c.torch")
    set -- $(args "$c")
    row="| $c |"
    for k in torch auto; do
        v=$(best "$tmp/$c.$k")
        row="$row $(awk -v s="$v" -v f="$f" -v p="$peak" -v b="$2" 'BEGIN {
            if (p > 0 && f > 0) printf "%.1f (%.0f%%)", s, 100 * s / b * f / p; else printf "%.1f", s }') |"
    done
    a=$(best "$tmp/$c.auto")
    row="$row $(awk -v a="$a" -v b="$t" 'BEGIN { if (b > 0) printf "%.2f", a / b }') |"
    for k in portable openblas; do
        row="$row $(best "$tmp/$c.$k") |"
    done
    echo "$row"
done
