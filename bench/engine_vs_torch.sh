#!/bin/sh
# Training throughput of weft's engine against PyTorch, one thread each, on
# synthetic data. A step is zero_grad + forward + backward + optimiser
# step, timed over the given number of steps after 5 warm-up steps.
#
#   mlp: MLP 784-512-512-10, batch 256, SGD (momentum 0.9, lr 0.01), STEPS steps
#   gpt: GPT vocab 256, ctx 64, 4 layers, 4 heads, width 128, batch 8 x 64
#        tokens, AdamW (lr 1e-3), GPT_STEPS steps; the same module as the
#        reference script (tools/ref/make_ref.py)
#
# Torch, weft with OpenBLAS and weft with the portable kernel run
# interleaved ROUNDS times and the median of each is reported, so that load
# from other processes hits all of them alike; then the ratios weft/torch.
#
#   sh bench/engine_vs_torch.sh    (BUILD=build STEPS=100 GPT_STEPS=20 ROUNDS=3 CASES="mlp gpt")
#
# Needs Debian's python3-torch (it installs into /usr/bin/python3) and, for
# the OpenBLAS rows, libopenblas-dev when the library was built.
set -e
BUILD=${BUILD:-build}
STEPS=${STEPS:-100}
GPT_STEPS=${GPT_STEPS:-20}
ROUNDS=${ROUNDS:-3}
CASES=${CASES:-mlp gpt}
PY=${PY:-/usr/bin/python3}
cd "$(dirname "$0")/.."

make -s -j2 BUILD="$BUILD" "$BUILD/weft-enginebench" >/dev/null
if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "installing python3-torch" >&2
    apt-get install -y python3-torch >/dev/null
fi

torch_run() {   # $1: mlp or gpt
    CASE=$1 STEPS=$STEPS GPT_STEPS=$GPT_STEPS "$PY" - <<'PYEOF'
import os, sys, time, torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, "tools/ref")
from make_ref import GPT
torch.set_num_threads(1)
torch.manual_seed(0)
case = os.environ["CASE"]
if case == "mlp":
    steps, B, T = int(os.environ["STEPS"]), 256, 1
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    xs = [torch.rand(B, 784) for _ in range(4)]
    ys = [torch.randint(0, 10, (B,)) for _ in range(4)]
    spec, what = "mlp:784-512-512-10", "sgd"
else:
    steps, B, T = int(os.environ["GPT_STEPS"]), 8, 64
    model = GPT(256, 64, 4, 4, 128)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    xs = [torch.randint(0, 256, (B, T)) for _ in range(4)]
    ys = [torch.randint(0, 256, (B, T)) for _ in range(4)]
    spec, what = "gpt:vocab=256,ctx=64,layers=4,heads=4,dim=128", "adamw"
warmup = 5
for s in range(warmup + steps):
    if s == warmup:
        t0 = time.perf_counter()
    opt.zero_grad()
    logits = model(xs[s % 4])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ys[s % 4].reshape(-1))
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
print("torch %s %s batch %d %s fp32 threads 1: %d steps in %.3f s, loss %.4f, %.1f samples/s"
      % (torch.__version__, spec, B, what, steps, dt, loss.item(), steps * B / dt))
PYEOF
}

weft_run() {   # $1: case, $2: matmul
    if [ "$1" = mlp ]; then
        set -- --steps "$STEPS" --matmul "$2"
    else
        set -- --model gpt:vocab=256,ctx=64,layers=4,heads=4,dim=128 --batch 8 --optim adamw \
            --steps "$GPT_STEPS" --matmul "$2"
    fi
    WEFT_THREADS=1 "$BUILD/weft-enginebench" --threads 1 "$@"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
r=1
while [ $r -le "$ROUNDS" ]; do
    for c in $CASES; do
        torch_run "$c" | tee -a "$tmp/$c.torch"
        for mm in openblas portable; do
            if weft_run "$c" $mm >"$tmp/line" 2>&1; then
                tee -a "$tmp/$c.$mm" <"$tmp/line"
            else
                echo "weft $mm: $(cat "$tmp/line")"
            fi
        done
    done
    r=$((r + 1))
done

median() {   # samples/s of the median run in file $1
    [ -s "$1" ] || { echo 0; return; }
    awk '{print $(NF-1)}' "$1" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
}
echo "median of $ROUNDS rounds (samples/s; a gpt sample is 64 tokens):"
for c in $CASES; do
    t=$(median "$tmp/$c.torch")
    printf "%s  torch          (1 thread): %10s\n" "$c" "$t"
    for mm in openblas portable; do
        w=$(median "$tmp/$c.$mm")
        [ "$w" = 0 ] && continue
        printf "%s  weft %-9s (1 thread): %10s  ratio weft/torch %s\n" "$c" "$mm" "$w" \
            "$(awk -v a="$w" -v b="$t" 'BEGIN { printf "%.2f", a / b }')"
    done
done
