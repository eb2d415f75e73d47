#!/bin/sh
# Data-parallel training throughput: weft-train under weftrun against
# PyTorch DistributedDataParallel (gloo backend), same model, global batch,
# optimiser, rank count and one compute thread per rank.
#
#   MLP 784-512-512-10, global batch 256 (64 per rank at 4 ranks), SGD lr 0.1
#   momentum 0.9, STEPS steps after 5 warm-up steps; weft reads its built-in
#   generated images (generation included in its time), PyTorch cycles four
#   pre-made random batches.
#
#   sh bench/ddp_vs_torch.sh          (BUILD=build RANKS="2 4" STEPS=200 ROUNDS=3)
# Needs Debian's python3-torch (/usr/bin/python3).
set -e
BUILD=${BUILD:-build}
RANKS=${RANKS:-2 4}
STEPS=${STEPS:-200}
ROUNDS=${ROUNDS:-3}
PY=${PY:-/usr/bin/python3}
cd "$(dirname "$0")/.."
make -s -j2 BUILD="$BUILD" "$BUILD/weftrun" "$BUILD/weft-train" >/dev/null
"$PY" -c 'import torch' 2>/dev/null || { echo "needs python3-torch" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/ddp.py" <<'PYEOF'
import os, sys, time, torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

def run(rank, world, steps, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    B = 256 // world
    xs = [torch.rand(B, 784) for _ in range(4)]
    ys = [torch.randint(0, 10, (B,)) for _ in range(4)]
    for s in range(5 + steps):
        if s == 5:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(ddp(xs[s % 4]), ys[s % 4])
        loss.backward()
        opt.step()
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        print("torch-ddp %d ranks: %d steps in %.3f s, %.1f samples/s" % (world, steps, dt, steps * 256 / dt))
    dist.destroy_process_group()

if __name__ == "__main__":
    world, steps, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    mp.spawn(run, args=(world, steps, port), nprocs=world)
PYEOF
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "| ranks | weft samples/s | PyTorch DDP samples/s | weft / PyTorch |"
echo "| ---: | ---: | ---: | ---: |"
for n in $RANKS; do
    : > "$tmp/w"; : > "$tmp/t"
    r=1
    while [ $r -le "$ROUNDS" ]; do
        # weft: time of the steps after 5 warm-up ones, from two runs' totals
        a=$("$BUILD/weftrun" -n $n "$BUILD/weft-train" --model mlp --data builtin --batch 256 \
              --steps 5 --no-eval --log-every 100000 2>/dev/null | sed -n 's/.*training took \([0-9.]*\) s.*/\1/p')
        b=$("$BUILD/weftrun" -n $n "$BUILD/weft-train" --model mlp --data builtin --batch 256 \
              --steps $((STEPS + 5)) --no-eval --log-every 100000 2>/dev/null | sed -n 's/.*training took \([0-9.]*\) s.*/\1/p')
        awk -v a="$a" -v b="$b" -v s="$STEPS" 'BEGIN { printf "%.1f\n", s * 256 / (b - a) }' >> "$tmp/w"
        "$PY" "$tmp/ddp.py" $n "$STEPS" $((29000 + r + 10 * n)) | sed -n 's/.* \([0-9.]*\) samples\/s/\1/p' >> "$tmp/t"
        r=$((r + 1))
    done
    w=$(median < "$tmp/w"); t=$(median < "$tmp/t")
    awk -v n=$n -v w="$w" -v t="$t" 'BEGIN { printf "| %d | %.0f | %.0f | %.2f |\n", n, w, t, w / t }'
done
echo "(median of $ROUNDS rounds, $STEPS steps each)"
