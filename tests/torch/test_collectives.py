"""Every collective torch.distributed offers on CPU through backend "weft",
every dtype and op, against a serial reference computed on each rank from
what every rank's input is known to be; blocking and async_op=True."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64"]


def body(rank, size, check):
    import torch
    import torch.distributed as dist
    import weft.torch  # noqa: F401
    dist.init_process_group("weft", init_method="env://")
    check("backend name", dist.get_backend() == "weft")
    R = dist.ReduceOp

    def inp(r, dt, n=37):
        # small values so sums and products stay exact in every dtype
        return ((torch.arange(n) + 2 * r) % 3 + 1).to(getattr(torch, dt))

    ops = {"sum": (R.SUM, lambda xs: sum(xs[1:], xs[0].clone())),
           "product": (R.PRODUCT, lambda xs: _prod(xs)),
           "min": (R.MIN, lambda xs: torch.stack(xs).min(0).values),
           "max": (R.MAX, lambda xs: torch.stack(xs).max(0).values),
           "avg": (R.AVG, lambda xs: _avg(xs))}

    def _prod(xs):
        out = xs[0].clone()
        for x in xs[1:]:
            out = out * x
        return out

    def _avg(xs):
        s = sum(x.double() for x in xs) / len(xs)
        if xs[0].is_floating_point():
            return s.to(xs[0].dtype)
        return torch.trunc(s).to(xs[0].dtype)

    for dt in DTYPES:
        for name, (op, ref) in ops.items():
            if name == "product" and dt in ("int8", "uint8") and size > 3:
                continue
            for async_op in (False, True):
                t = inp(rank, dt)
                w = dist.all_reduce(t, op=op, async_op=async_op)
                if async_op:
                    w.wait()
                want = ref([inp(r, dt) for r in range(size)])
                check(f"all_reduce {name} {dt} async={async_op}", torch.equal(t, want),
                      f"{t[:5]} vs {want[:5]}")
    # bool under min/max; unsupported ops raise a clear error
    b = torch.tensor([rank % 2 == 0, True])
    dist.all_reduce(b, op=R.MIN)
    check("all_reduce bool min", b.tolist() == [size == 1, True])
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=R.BAND)
        check("BAND refused", False)
    except RuntimeError as e:
        check("BAND refused", "not supported" in str(e), str(e))
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int16))
        check("int16 refused", False)
    except RuntimeError as e:
        check("int16 refused", "not supported" in str(e), str(e))
    # a reduction over a non-contiguous view writes back into it
    m = torch.arange(12, dtype=torch.float32).view(3, 4) * (rank + 1)
    col = m[:, 1]
    dist.all_reduce(col)
    check("non-contiguous all_reduce", torch.equal(m[:, 1], torch.tensor([1., 5., 9.]) * sum(range(1, size + 1))))

    for dt in ("float32", "bfloat16", "int64"):
        for root in range(size):
            t = inp(rank, dt) if rank == root else torch.zeros(37, dtype=getattr(torch, dt))
            dist.broadcast(t, src=root)
            check(f"broadcast {dt} root {root}", torch.equal(t, inp(root, dt)))
            t = inp(rank, dt)
            dist.reduce(t, dst=root, op=R.SUM)
            if rank == root:
                check(f"reduce {dt} root {root}", torch.equal(t, sum(inp(r, dt) for r in range(size))))
            t = inp(rank, dt)
            g = [torch.zeros_like(t) for _ in range(size)] if rank == root else None
            dist.gather(t, gather_list=g, dst=root)
            if rank == root:
                check(f"gather {dt} root {root}", all(torch.equal(g[r], inp(r, dt)) for r in range(size)))
            out = torch.zeros(37, dtype=getattr(torch, dt))
            sl = [inp(r + 10, dt) for r in range(size)] if rank == root else None
            dist.scatter(out, scatter_list=sl, src=root)
            check(f"scatter {dt} root {root}", torch.equal(out, inp(rank + 10, dt)))
        t = inp(rank, dt)
        outs = [torch.zeros_like(t) for _ in range(size)]
        dist.all_gather(outs, t)
        check(f"all_gather {dt}", all(torch.equal(outs[r], inp(r, dt)) for r in range(size)))
        flat = torch.zeros(size * 37, dtype=t.dtype)
        dist.all_gather_into_tensor(flat, t)
        check(f"all_gather_into_tensor {dt}", torch.equal(flat, torch.cat([inp(r, dt) for r in range(size)])))
        ins = [inp(rank + j, dt) for j in range(size)]
        out = torch.zeros_like(t)
        dist.reduce_scatter(out, ins, op=R.SUM)
        check(f"reduce_scatter {dt}", torch.equal(out, sum(inp(r + rank, dt) for r in range(size))))
        big = torch.cat([inp(rank + j, dt) for j in range(size)])
        out = torch.zeros_like(t)
        dist.reduce_scatter_tensor(out, big, op=R.MAX)
        want = torch.stack([inp(r + rank, dt) for r in range(size)]).max(0).values
        check(f"reduce_scatter_tensor {dt}", torch.equal(out, want))

    # all_to_all_single: equal, then unequal splits (rank i sends i+j+1 rows to j)
    x = torch.arange(size * 4, dtype=torch.float32) + 100 * rank
    y = torch.zeros_like(x)
    dist.all_to_all_single(y, x)
    want = torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) + 100 * r for r in range(size)])
    check("all_to_all_single equal", torch.equal(y, want))
    split = lambda i, j: (i + j + 1) % 3  # noqa: E731
    ins = [split(rank, j) for j in range(size)]
    outs = [split(i, rank) for i in range(size)]
    x = torch.cat([torch.full((ins[j], 2), float(1000 * rank + j)) for j in range(size)])
    y = torch.full((sum(outs), 2), -1.0)
    w = dist.all_to_all_single(y, x, output_split_sizes=outs, input_split_sizes=ins, async_op=True)
    w.wait()
    want = torch.cat([torch.full((outs[i], 2), float(1000 * i + rank)) for i in range(size)])
    check("all_to_all_single unequal", torch.equal(y, want), f"{y} vs {want}")
    xs = [torch.full((split(rank, j) + 1,), rank * 10 + j, dtype=torch.int64) for j in range(size)]
    ys = [torch.zeros(split(i, rank) + 1, dtype=torch.int64) for i in range(size)]
    dist.all_to_all(ys, xs)
    check("all_to_all lists unequal", all(torch.equal(ys[i], torch.full((split(i, rank) + 1,), i * 10 + rank)) for i in range(size)))

    # async everywhere, many in flight, completed in order, futures
    works, ts = [], []
    for k in range(6):
        t = torch.full((1000,), float(k + rank))
        ts.append(t)
        works.append(dist.all_reduce(t, async_op=True))
    fut = works[-1].get_future()
    dist.barrier()
    for w in works:
        w.wait()
    check("async all_reduce x6", all(torch.equal(ts[k], torch.full((1000,), float(k * size + sum(range(size))))) for k in range(6)))
    check("future value", torch.equal(fut.value()[0], ts[-1]))
    o = [torch.zeros(3) for _ in range(size)]
    dist.all_gather(o, torch.full((3,), float(rank)), async_op=True).wait()
    check("async all_gather", all(torch.equal(o[r], torch.full((3,), float(r))) for r in range(size)))

    # objects ride on the collectives above
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank})
    check("all_gather_object", objs == [{"rank": r} for r in range(size)])
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    harness.main(body)
