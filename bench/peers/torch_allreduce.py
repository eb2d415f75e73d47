"""torch_allreduce: torch.distributed.all_reduce (gloo backend, f32 sum) timed
the way weft-bench times weft_allreduce, so the rows can be compared line by
line.

    RANK=r WORLD_SIZE=n TORCH_STORE=/tmp/dir/store \
        /usr/bin/python3 torch_allreduce.py -b 8 -e 64M -f 4 -w 5 -n 20

Start WORLD_SIZE processes with RANK 0..WORLD_SIZE-1 and the same TORCH_STORE,
a file path that does not exist yet (init_method file://, so no port is
needed). all_reduce works in place; the out-of-place column is what a caller
does to keep its input: copy into the output tensor, then all_reduce it. Per
size and mode: warm-up calls, a barrier, the timed calls, and the mean time
per call taken as the maximum over ranks. Inputs are small integers, so the
sum is exact in any order.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def parse_size(s):
    mult = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
    if s and s[-1].lower() in mult:
        return int(float(s[:-1]) * mult[s[-1].lower()])
    return int(float(s))


def sizes(lo, hi, factor):
    size = lo
    while size <= hi:
        yield size
        nxt = int(size * factor)
        size = nxt + 1 if nxt == size else nxt


def measure(inp, out, want, warmup, iters, inplace, check):
    def call():
        if not inplace:
            out.copy_(inp)
        dist.all_reduce(out, op=dist.ReduceOp.SUM)

    out.copy_(inp)
    for _ in range(warmup):
        call()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    bad = torch.zeros(1, dtype=torch.int64)
    if check:
        out.copy_(inp)
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        bad[0] = int((out != want).sum())
    dist.all_reduce(bad, op=dist.ReduceOp.SUM)
    return float(dt[0]), int(bad[0]) if check else -1


def main():
    ap = argparse.ArgumentParser(description="the options of weft-bench allreduce (f32 sum only)")
    ap.add_argument("-b", default="8")
    ap.add_argument("-e", default="32M")
    ap.add_argument("-f", type=float, default=2)
    ap.add_argument("-w", type=int, default=5)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-c", type=int, default=1)
    a = ap.parse_args()
    lo, hi = parse_size(a.b), parse_size(a.e)
    if a.n < 1 or a.f <= 1 or lo > hi:
        ap.error("bad sizes or iterations")
    # N ranks share 2 cores: one compute thread each, as with the other peers.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + os.environ["TORCH_STORE"],
                            rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
    r, n = dist.get_rank(), dist.get_world_size()
    if r == 0:
        print("# torch_allreduce: %d ranks, torch %s gloo backend, warm-up %d, iterations %d\n#"
              % (n, torch.__version__, a.w, a.n))
        print("# %10s %12s %8s %6s %6s %32s %32s" % ("", "", "", "", "", "out-of-place", "in-place"))
        print("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s"
              % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                 "time", "algbw", "busbw", "#wrong"))
        print("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s"
              % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                 "(GB/s)", "(GB/s)", ""))
        sys.stdout.flush()
    total = 0
    for size in sizes(lo, hi, a.f):
        count = size // 4
        idx = torch.arange(count, dtype=torch.int64)
        inp = ((r * 3 + idx * 7) % 5).to(torch.float32)
        want = torch.zeros(count, dtype=torch.float32)
        for k in range(n):
            want += ((k * 3 + idx * 7) % 5).to(torch.float32)
        out = torch.empty(count, dtype=torch.float32)
        row = []
        for inplace in (False, True):
            t, bad = measure(inp, out, want, a.w, a.n, inplace, a.c)
            algbw = count * 4 / t / 1e9 if t > 0 else 0
            row += [t * 1e6, algbw, algbw * 2 * (n - 1) / n, bad]
            total += max(bad, 0)
        if r == 0:
            print("  %10d %12d %8s %6s %6d %9.2f %7.3f %7.3f %6d %9.2f %7.3f %7.3f %6d"
                  % tuple([count * 4, count, "float", "sum", -1] + row))
            sys.stdout.flush()
    if r == 0:
        print("# Out of bounds values : %d %s" % (total, "FAILED" if total else "OK"))
    dist.destroy_process_group()
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
