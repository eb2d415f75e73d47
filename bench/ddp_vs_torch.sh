#!/bin/sh
# Data-parallel training: weft-train under weftrun against PyTorch
# DistributedDataParallel (gloo backend), same model, global batch,
# optimiser, rank count and one compute thread per rank. Three parts:
#
# 1. Throughput: MLP 784-512-512-10, global batch 256 (64 per rank at 4
#    ranks), SGD lr 0.1 momentum 0.9, STEPS steps after 5 warm-up steps;
#    weft reads its built-in generated images (generation included in its
#    time), PyTorch cycles four pre-made random batches. Also weft's rank-0
#    step time split (data, forward+backward, waiting for the gradient
#    all-reduce) from the longer run of the last round.
# 2. Synchronisation cost at 2 ranks: the same weft run with full sync and
#    with gradient sync switched off (--sync local:1000000: each rank steps
#    on its own half of every batch and nothing is exchanged within the
#    run), interleaved CEIL_ROUNDS times; median times and their ratio.
# 3. Accuracy (ACC=1, Fashion-MNIST from Debian's dataset-fashion-mnist):
#    one epoch on ACC_RANKS ranks, cosine lr 0.1 -> 0.01 on both sides,
#    pixels standardised with the training set's mean and std; test
#    accuracy of the final model on the 10,000 test images.
#
#   sh bench/ddp_vs_torch.sh    (BUILD=build RANKS="2 4" STEPS=200 ROUNDS=3
#                                CEIL_ROUNDS=5 ACC=1 ACC_RANKS=4)
# Needs Debian's python3-torch (/usr/bin/python3).
set -e
BUILD=${BUILD:-build}
RANKS=${RANKS:-2 4}
STEPS=${STEPS:-200}
ROUNDS=${ROUNDS:-3}
CEIL_ROUNDS=${CEIL_ROUNDS:-5}
ACC=${ACC:-1}
ACC_RANKS=${ACC_RANKS:-4}
FMNIST=${WEFT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
PY=${PY:-/usr/bin/python3}
cd "$(dirname "$0")/.."
make -s -j2 BUILD="$BUILD" "$BUILD/weftrun" "$BUILD/weft-train" >/dev/null
"$PY" -c 'import torch' 2>/dev/null || { echo "needs python3-torch" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/ddp.py" <<'PYEOF'
import gzip, math, os, sys, time
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

def idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)

def run(rank, world, steps, port, data):
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
    if data:
        # one epoch (the last batch runs into the next shuffle), as weft-train --epochs 1
        x = idx(data + "/train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32)
        y = idx(data + "/train-labels-idx1-ubyte.gz").astype(np.int64)
        mean, std = x[:10000].mean(), x[:10000].std()
        x = torch.from_numpy((x - mean) / std)
        y = torch.from_numpy(y)
        steps = math.ceil(len(x) / 256)
        g = torch.Generator().manual_seed(1)
        order = torch.cat([torch.randperm(len(x), generator=g) for _ in range(2)])
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=0.01)
        warm = 0
    else:
        xs = [torch.rand(B, 784) for _ in range(4)]
        ys = [torch.randint(0, 10, (B,)) for _ in range(4)]
        warm = 5
    for s in range(warm + steps):
        if s == warm:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad()
        if data:
            i = order[s * 256 + rank * B:s * 256 + (rank + 1) * B]
            loss = F.cross_entropy(ddp(x[i]), y[i])
        else:
            loss = F.cross_entropy(ddp(xs[s % 4]), ys[s % 4])
        loss.backward()
        opt.step()
        if data:
            sched.step()
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        line = "torch-ddp %d ranks: %d steps in %.3f s, %.1f samples/s" % (
            world, steps, dt, steps * 256 / dt)
        if data:
            tx = idx(data + "/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32)
            ty = torch.from_numpy(idx(data + "/t10k-labels-idx1-ubyte.gz").astype(np.int64))
            with torch.no_grad():
                pred = model(torch.from_numpy((tx - mean) / std)).argmax(1)
            line += ", test accuracy %.4f" % (pred == ty).float().mean().item()
        print(line)
    dist.destroy_process_group()

if __name__ == "__main__":
    world, steps, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    data = sys.argv[4] if len(sys.argv) > 4 else ""
    mp.spawn(run, args=(world, steps, port, data), nprocs=world)
PYEOF
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
took() { sed -n 's/.*training took \([0-9.]*\) s.*/\1/p' "$1"; }
train() { # ranks out args...
    n=$1; out=$2; shift 2
    "$BUILD/weftrun" -n $n "$BUILD/weft-train" --model mlp --batch 256 --no-eval \
        --log-every 100000 "$@" > "$out" 2>/dev/null
}
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| ranks | weft samples/s | PyTorch DDP samples/s | weft / PyTorch | weft rank 0 ms/step: data, fwd+bwd, all-reduce wait |"
echo "| ---: | ---: | ---: | ---: | --- |"
for n in $RANKS; do
    : > "$tmp/w"; : > "$tmp/t"
    r=1
    while [ $r -le "$ROUNDS" ]; do
        # weft: time of the steps after 5 warm-up ones, from two runs' totals
        train $n "$tmp/a" --data builtin --steps 5
        train $n "$tmp/b" --data builtin --steps $((STEPS + 5))
        awk -v a="$(took "$tmp/a")" -v b="$(took "$tmp/b")" -v s="$STEPS" \
            'BEGIN { printf "%.1f\n", s * 256 / (b - a) }' >> "$tmp/w"
        "$PY" "$tmp/ddp.py" $n "$STEPS" $((29000 + r + 10 * n)) | sed -n 's/.* \([0-9.]*\) samples\/s/\1/p' >> "$tmp/t"
        r=$((r + 1))
    done
    split=$(sed -n 's/.*per step: \([0-9.]*\) ms data, \([0-9.]*\) ms forward+backward, \([0-9.]*\) ms waiting.*/\1, \2, \3/p' "$tmp/b")
    w=$(median < "$tmp/w"); t=$(median < "$tmp/t")
    awk -v n=$n -v w="$w" -v t="$t" -v s="$split" \
        'BEGIN { printf "| %d | %.0f | %.0f | %.2f | %s |\n", n, w, t, w / t, s }'
done
echo "(median of $ROUNDS rounds, $STEPS steps each)"

echo
echo "2 ranks, 205 steps: full sync against no gradient sync (the compute-only ceiling)"
: > "$tmp/f"; : > "$tmp/c"; : > "$tmp/cpu"
r=1
while [ $r -le "$CEIL_ROUNDS" ]; do
    train 2 "$tmp/o" --data builtin --steps 205 --sync full
    took "$tmp/o" >> "$tmp/f"
    sed -n 's/.*CPU per step: \([0-9.]*\) ms training thread, \([0-9.]*\) ms comm.*/\1 \2/p' "$tmp/o" >> "$tmp/cpu"
    train 2 "$tmp/o" --data builtin --steps 205 --sync local:1000000
    took "$tmp/o" >> "$tmp/c"
    r=$((r + 1))
done
f=$(median < "$tmp/f"); c=$(median < "$tmp/c")
echo "full sync s:    $(tr '\n' ' ' < "$tmp/f")(median $f)"
echo "compute only s: $(tr '\n' ' ' < "$tmp/c")(median $c)"
awk -v f="$f" -v c="$c" 'BEGIN { printf "full sync reaches %.0f%% of the compute-only ceiling (medians)\n", 100 * c / f }'
# the least disturbed run of each (other jobs only ever add time)
fm=$(sort -g "$tmp/f" | head -n 1); cm=$(sort -g "$tmp/c" | head -n 1)
awk -v f="$fm" -v c="$cm" 'BEGIN { printf "fastest runs: full sync %s s, compute only %s s: %.0f%%\n", f, c, 100 * c / f }'
echo "full sync, rank 0 CPU ms/step (training thread, communication threads): $(cut -d' ' -f1 "$tmp/cpu" | median), $(cut -d' ' -f2 "$tmp/cpu" | median)"

if [ "$ACC" = 1 ]; then
    echo
    if [ ! -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
        echo "accuracy: skipped, no Fashion-MNIST in $FMNIST (apt-get install dataset-fashion-mnist)"
    else
        n=$ACC_RANKS
        "$BUILD/weftrun" -n $n "$BUILD/weft-train" --model mlp --data fashion-mnist --batch 256 \
            --epochs 1 --log-every 100000 > "$tmp/acc" 2>/dev/null
        wa=$(sed -n 's/.*test: .* accuracy \([0-9.]*\) .*/\1/p' "$tmp/acc")
        ws=$(took "$tmp/acc")
        tl=$("$PY" "$tmp/ddp.py" $n 0 29500 "$FMNIST")
        ta=$(echo "$tl" | sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p')
        ts=$(echo "$tl" | sed -n 's/.* \([0-9.]*\) s, .*/\1/p')
        echo "Fashion-MNIST, one epoch (235 steps of 256), $n ranks:"
        echo "| | test accuracy | training s |"
        echo "| --- | ---: | ---: |"
        echo "| weft | $wa | $ws |"
        echo "| PyTorch DDP | $ta | $ts |"
        awk -v a="$wa" -v b="$ta" 'BEGIN { d = 100 * (a - b); printf "difference weft - PyTorch: %+.2f points\n", d }'
    fi
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
