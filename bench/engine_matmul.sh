#!/bin/sh
# Where a GPT training step's time goes, weft against PyTorch, one thread:
#  1. the step's linear-layer products alone, shape by shape: weft's
#     portable kernel and OpenBLAS (weft-enginebench --gemm) against
#     torch.mm on the same shapes and transposes (what autograd runs);
#  2. torch's own step under torch.profiler: the FLOPs it counts for its
#     matrix products (to check that both do the same work) and its time
#     per operator, so the matmul and the rest can be told apart.
# Best of ROUNDS runs per shape, other processes only ever slow one down.
#
#   sh bench/engine_matmul.sh  (BUILD=build ROUNDS=20 MODEL=gpt:... BATCH=4 SEQ=128)
set -e
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-20}
MODEL=${MODEL:-gpt:vocab=256,ctx=128,layers=4,heads=8,dim=512}
BATCH=${BATCH:-4}
SEQ=${SEQ:-128}
PY=${PY:-/usr/bin/python3}
cd "$(dirname "$0")/.."

make -s -j2 BUILD="$BUILD" "$BUILD/weft-enginebench" >/dev/null
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
WEFT_THREADS=1 "$BUILD/weft-enginebench" --probe 1
WEFT_THREADS=1 "$BUILD/weft-enginebench" --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --gemm "$ROUNDS"
MODEL=$MODEL B=$BATCH T=$SEQ ROUNDS=$ROUNDS "$PY" - <<'PYEOF'
import os, sys, time, torch
import torch.nn.functional as F
sys.path.insert(0, "tools/ref")
from make_ref import GPT
torch.set_num_threads(1)
kv = dict(x.split("=") for x in os.environ["MODEL"][4:].split(","))
V, ctx, L, H, C = (int(kv[k]) for k in ("vocab", "ctx", "layers", "heads", "dim"))
B, T, R = int(os.environ["B"]), int(os.environ["T"]), int(os.environ["ROUNDS"])
BT = B * T
print("torch %s, oneDNN %s, MKL %s" % (torch.__version__, torch.backends.mkldnn.is_available(),
                                        torch.backends.mkl.is_available()))
lin = [("qkv", C, 3 * C, L), ("proj", C, C, L), ("fc", C, 4 * C, L), ("fcproj", 4 * C, C, L),
       ("logits", C, V, 1)]
total = flops = 0.0
print("%-7s %-2s %5s %5s %5s %3s %9s" % ("layer", "op", "M", "N", "K", "x", "torch.mm"))
for name, i, o, n in lin:
    x, w, dy = torch.rand(BT, i), torch.rand(o, i), torch.rand(BT, o)
    # forward x W^T, input gradient dy W, weight gradient dy^T x: torch.mm
    # on transposed views, as autograd's addmm/mm backward calls it
    for op, (a, b) in (("NT", (x, w.t())), ("NN", (dy, w)), ("TN", (dy.t(), x))):
        best = 1e30
        for r in range(R):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
        f = 2.0 * a.shape[0] * b.shape[1] * a.shape[1]
        total += best * n
        flops += f * n
        print("%-7s %-2s %5d %5d %5d %3d %9.1f" % (name, op, a.shape[0], b.shape[1], a.shape[1],
                                                 n, f / best / 1e9))
print("step's linear layers: %.2f GFLOP; torch.mm %.1f ms (%.1f GFLOP/s)"
      % (flops / 1e9, 1e3 * total, flops / total / 1e9))

torch.manual_seed(0)
model = GPT(V, ctx, L, H, C)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
xs, ys = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
def step():
    opt.zero_grad()
    logits = model(xs)
    F.cross_entropy(logits.reshape(-1, V), ys.reshape(-1)).backward()
    opt.step()
for _ in range(3):
    step()
best = 1e30
for _ in range(max(3, R // 4)):
    t0 = time.perf_counter()
    step()
    best = min(best, time.perf_counter() - t0)
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
    step()
ev = prof.key_averages()
mm_ops = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")
fl = sum(e.flops for e in ev if e.key in mm_ops)
mm_us = sum(e.self_cpu_time_total for e in ev if e.key in ("aten::mm", "aten::addmm", "aten::bmm"))
all_us = sum(e.self_cpu_time_total for e in ev)
print("torch step: best %.1f ms unprofiled; profiled: %.1f ms in all operators, %.1f ms in "
      "mm/addmm/bmm (%.0f%%), which the profiler counts %.2f GFLOP for"
      % (1e3 * best, all_us / 1e3, mm_us / 1e3, 100.0 * mm_us / all_us, fl / 1e9))
print("torch's operators by self time:")
for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:14]:
    print("  %-40s %8.2f ms %5d calls" % (e.key, e.self_cpu_time_total / 1e3, e.count))
PYEOF
