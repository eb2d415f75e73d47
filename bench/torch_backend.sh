#!/bin/sh
# torch.distributed through backend "weft" against gloo, in the same run:
#
# 1. dist.all_reduce (float32, sum) latency and bandwidth from 8 B to
#    64 MiB at 2, 4 and 8 ranks: per size, WARM untimed calls, then ITERS
#    timed ones (fewer above 1 MiB); time is the slowest rank's mean per
#    call; algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests).
#    Columns: size, weft us, gloo us, gloo/weft, weft busbw, gloo busbw.
# 2. PyTorch DDP: the MLP 784-512-512-10 of bench/ddp_vs_torch.sh, global
#    batch 256, SGD lr 0.1 momentum 0.9, one thread per rank, random
#    batches; samples/s over STEPS steps after 5 warm-up steps, and the
#    final loss, weft against gloo at 2 and 4 ranks.
# 3. With PROFILE=1, where a DDP step's time goes, per backend: the same
#    steps with DDP's synchronisation off (the compute ceiling) and on,
#    forward, backward and optimiser ms, and for each gradient bucket when
#    its all_reduce was launched and when it completed (through a comm hook
#    that averages as DDP does), in ms after backward began: a bucket done
#    before backward ends overlapped it.
#
# 4. Per-call overhead: a synchronous dist.all_reduce (8 B, 4 KiB, 64 KiB)
#    against weft's own call (ctypes to weft_allreduce) on a communicator
#    of the same processes, alternating rounds (OVER_RANKS). Then where it
#    goes: the same two from C++ with no Python (weft_allreduce on the
#    group's communicator, and the backend's allreduce + Work::wait:
#    _weft_torch.call_cost), so "C above" is the backend's own share and
#    the rest is torch's Python and pybind; and the asynchronous path,
#    dist.all_reduce(async_op=True).get_future().wait(), with the
#    voluntary context switches per call of the whole process (the
#    slowest rank's; each is a thread put to sleep and woken).
#
#   sh bench/torch_backend.sh   (BUILD=build RANKS="2 4 8" DDP_RANKS="2 4"
#                                OVER_RANKS="2 4"
#                                STEPS=100 MAXBYTES=67108864 PROFILE=0
#                                BUCKET_MB=25: DDP's bucket_cap_mb)
# Ranks are processes of Debian's python3 with torch (/usr/bin/python3),
# started with torch's env:// variables. Run timing under
# flock /tmp/weft-bench.lock, and read the load average printed first.
set -e
BUILD=${BUILD:-build}
RANKS=${RANKS-2 4 8}
DDP_RANKS=${DDP_RANKS-2 4}
OVER_RANKS=${OVER_RANKS-2 4}
STEPS=${STEPS:-100}
MAXBYTES=${MAXBYTES:-67108864}
PY=${PY:-/usr/bin/python3}
cd "$(dirname "$0")/.."
make -s -j2 BUILD="$BUILD" python >/dev/null
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/b.py" <<'PYEOF'
import os, sys, time
import torch, torch.distributed as dist
import weft.torch
torch.set_num_threads(1)
mode, backend = sys.argv[1], sys.argv[2]
rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group(backend, init_method="file://" + os.environ["BENCH_FILE"] + backend,
                        rank=rank, world_size=n)
def slowest(x):
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()
if mode == "overhead":
    # Per-call cost of a synchronous all_reduce through torch against weft's
    # own call on a communicator of the same ranks (weft.Comm over the same
    # processes, ctypes straight to weft_allreduce with its arguments made
    # once), alternating rounds so that both see the same load; the
    # slowest rank's mean of each round, the median round reported.
    import resource
    import weft
    from weft import lib, _weft_torch
    c = weft.Comm()
    pg = dist.distributed_c10d._get_default_group()
    switches = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    for size in (8, 4096, 65536):
        t = torch.ones(size // 4)
        a = t.data_ptr()
        def native():
            rc = lib.weft_allreduce(c._c, a, a, size // 4, 0, 0)
            assert rc == 0
        def through():
            dist.all_reduce(t)
        def future():
            dist.all_reduce(t, async_op=True).get_future().wait()
        def timed(f):
            def run(k):
                t0 = time.perf_counter()
                for _ in range(k):
                    f()
                return (time.perf_counter() - t0) / k * 1e6
            return run
        ways = {"native": timed(native), "torch": timed(through),
                "cnative": lambda k: _weft_torch.call_cost(pg, t, k, False),
                "cbackend": lambda k: _weft_torch.call_cost(pg, t, k, True),
                "future": timed(future)}
        iters = 400 if size <= 4096 else 100
        res = {k: [] for k in ways}
        res["sw"] = []
        for f in ways.values():
            f(20)
        for rnd in range(5):
            for name, f in ways.items():
                dist.barrier()
                c.barrier()
                s0 = switches()
                us = f(iters)
                res[name].append(slowest(us))
                if name == "future":
                    res["sw"].append(slowest((switches() - s0) / iters))
        med = lambda v: sorted(v)[len(v) // 2]
        if rank == 0:
            print(size, " ".join(f"{med(res[k]):.2f}" for k in
                                 ("native", "torch", "cnative", "cbackend", "future", "sw")),
                  flush=True)
    c.close()
elif mode == "allreduce":
    size = 8
    while size <= int(os.environ["MAXBYTES"]):
        t = torch.ones(size // 4)
        iters = 200 if size <= 1 << 16 else 50 if size <= 1 << 20 else 8
        for _ in range(max(3, iters // 10)):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        us = slowest((time.perf_counter() - t0) / iters * 1e6)
        if rank == 0:
            print(f"{size} {us:.2f}", flush=True)
        size *= 4 if size < 1 << 20 else 2
else:
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    ddp = DDP(model, bucket_cap_mb=float(os.environ.get("BUCKET_MB", "25")))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    B = 256 // n
    g = torch.Generator().manual_seed(rank)
    xs = [torch.rand(B, 784, generator=g) for _ in range(4)]
    ys = [torch.randint(0, 10, (B,), generator=g) for _ in range(4)]
    steps = int(os.environ["STEPS"])
    def step(i, split=None):
        opt.zero_grad()
        a = time.perf_counter()
        loss = nn.functional.cross_entropy(ddp(xs[i % 4]), ys[i % 4])
        b = time.perf_counter()
        loss.backward()
        c = time.perf_counter()
        opt.step()
        if split is not None:
            split.append((b - a, c - b, time.perf_counter() - c))
        return loss, b
    def rate(steps, split=None):
        """samples/s of the slowest rank over steps steps after 5 warm-up ones"""
        for i in range(5 + steps):
            if i == 5:
                dist.barrier()
                t0 = time.perf_counter()
            loss, _ = step(i, split if i >= 5 else None)
        return 256 * steps / slowest(time.perf_counter() - t0), loss
    if mode == "ddp":
        sps, loss = rate(steps)
        if rank == 0:
            print(f"{sps:.1f} {loss.item():.4f}", flush=True)
    else:
        # Where a step's time goes. "compute": the same steps with DDP's
        # synchronisation off (no_sync: each rank steps on its own
        # gradients), the ceiling; "ddp": as above; then a communication
        # hook doing what DDP does by default (average each bucket with one
        # all_reduce) and noting, per bucket, when it was launched and when
        # its all_reduce completed, in ms after backward began.
        with ddp.no_sync():
            local, _ = rate(steps)
        sps, _ = rate(steps)
        marks = []
        nbytes = lambda t: t.numel() * t.element_size()
        def hook(state, bucket):
            buf = bucket.buffer()
            buf.div_(n)
            t = time.perf_counter()
            def done(f, i=bucket.index(), t=t):
                marks.append((i, nbytes(buf), t, time.perf_counter()))
                return f.value()[0]
            return dist.all_reduce(buf, async_op=True).get_future().then(done)
        ddp.register_comm_hook(None, hook)
        split, buckets = [], {}
        for i in range(5 + steps):
            k = len(marks)
            _, b = step(i, split if i >= 5 else None)
            for j, nb, t, e in marks[k:] if i >= 5 else ():
                buckets.setdefault(j, []).append((nb, t - b, e - b))
        mean = lambda v: sum(v) / len(v) * 1e3
        fwd, bwd, stp = (slowest(mean([s[k] for s in split])) for k in range(3))
        desc = []
        for i in sorted(buckets):
            v = buckets[i]
            desc.append(f"{i}:{v[0][0]}:{slowest(mean([x[1] for x in v])):.2f}:"
                        f"{slowest(mean([x[2] for x in v])):.2f}")
        if rank == 0:
            print(f"{local:.1f} {sps:.1f} {fwd:.2f} {bwd:.2f} {stp:.2f} {' '.join(desc)}",
                  flush=True)
dist.destroy_process_group()
PYEOF
job() { # job MODE BACKEND N: run N ranks, print rank 0's output
    port=$(( 20000 + $$ % 20000 ))
    pids=
    for r in $(seq 0 $(($3 - 1))); do
        RANK=$r WORLD_SIZE=$3 LOCAL_RANK=$r OMP_NUM_THREADS=1 BENCH_FILE="$tmp/store-$1-$3-" \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        MAXBYTES=$MAXBYTES STEPS=$STEPS "$PY" "$tmp/b.py" "$1" "$2" >"$tmp/out.$r" 2>"$tmp/err.$r" &
        pids="$pids $!"
    done
    for p in $pids; do wait "$p" || { cat "$tmp"/err.* >&2; exit 1; }; done
    rm -f "$tmp"/store-*
    cat "$tmp/out.0"
}
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; torch $("$PY" -c 'import torch; print(torch.__version__)')"
for n in $RANKS; do
    job allreduce weft "$n" >"$tmp/w"
    job allreduce gloo "$n" >"$tmp/g"
    echo
    echo "all_reduce float32 sum, $n ranks"
    printf "%10s %10s %10s %9s %11s %11s\n" bytes "weft us" "gloo us" gloo/weft "weft GB/s" "gloo GB/s"
    paste -d' ' "$tmp/w" "$tmp/g" | awk -v n="$n" '{
        f = 2 * (n - 1) / n; wb = $1 / $2 / 1e3 * f; gb = $1 / $4 / 1e3 * f
        printf "%10d %10.1f %10.1f %8.1fx %11.3f %11.3f\n", $1, $2, $4, $4 / $2, wb, gb }'
done
for n in $OVER_RANKS; do
    echo
    echo "per-call overhead, synchronous all_reduce float32 sum, $n ranks: weft's own call"
    echo "(ctypes to weft_allreduce) and dist.all_reduce through backend weft, same processes,"
    echo "alternating rounds; us per call, median of 5 rounds of the slowest rank's mean;"
    echo "C: the same two from C++ (no Python); future: async_op=True, get_future().wait(),"
    echo "and its voluntary context switches per call (the process's threads)"
    printf "%10s %10s %10s %10s %10s %10s %10s %10s %8s\n" bytes "native us" "torch us" "above us" \
        "C weft" "C backend" "C above" "future us" "sw/call"
    job overhead weft "$n" | awk '{ printf "%10d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %8.2f\n",
                                    $1, $2, $3, $3 - $2, $4, $5, $5 - $4, $6, $7 }'
done
[ -n "$DDP_RANKS" ] || exit 0
echo
echo "DDP MLP 784-512-512-10, global batch 256, 1 thread per rank, $STEPS steps"
printf "%6s %14s %14s %9s %12s %12s\n" ranks "weft samp/s" "gloo samp/s" weft/gloo "weft loss" "gloo loss"
for n in $DDP_RANKS; do
    w=$(job ddp weft "$n"); g=$(job ddp gloo "$n")
    echo "$n $w $g" | awk '{ printf "%6d %14.1f %14.1f %8.2fx %12.4f %12.4f\n", $1, $2, $4, $2 / $4, $3, $5 }'
done
[ "$PROFILE" = 1 ] || exit 0
echo
echo "Where a DDP step goes, $STEPS steps: samples/s with synchronisation off (compute) and on;"
echo "ms per step: exposed communication (on - off), forward, backward, optimiser;"
echo "per bucket (hooked run): bytes, launched .. all_reduce done, ms after backward began"
printf "%6s %7s %9s %9s %8s %7s %7s %7s  %s\n" ranks backend compute ddp "comm ms" fwd bwd opt buckets
for n in $DDP_RANKS; do
    for b in weft gloo; do echo "$n $b $(job prof "$b" "$n")"; done
done | awk '{ printf "%6d %7s %9.1f %9.1f %8.2f %7.2f %7.2f %7.2f ", $1, $2, $3, $4,
                     256e3 / $4 - 256e3 / $3, $5, $6, $7
              for (i = 8; i <= NF; i++) { split($i, f, ":"); printf " %d: %d B %.2f..%.2f", f[1], f[2], f[3], f[4] }
              printf "\n" }'
