"""The two paths a collective takes through backend "weft": run on the
caller's thread by a wait (synchronous calls, and async ones waited on
without a timeout), or by the group's worker (a Future asked for, a
Work polled, a wait with a timeout, work queued behind). Mixed in every
order, each call's result must be its own and in issue order: a
synchronous call issued behind pending async work runs that work first."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def body(rank, size, check):
    import datetime
    import time
    import torch
    import torch.distributed as dist
    import weft.torch  # noqa: F401
    dist.init_process_group("weft", init_method="env://")
    S = size * (size + 1) // 2  # sum of rank + 1

    def t(v, n=5):
        return torch.full((n,), float(v))

    # async work left pending, then a synchronous call: it runs the pending
    # one first, on this thread, in issue order
    big = t(rank + 1, 1 << 16)
    w = dist.all_reduce(big, async_op=True)
    small = t(rank + 1)
    dist.all_reduce(small)
    check("sync behind async: its own sum", torch.all(small == S).item())
    check("sync behind async: the async one done first", w.is_completed())
    w.wait()
    check("the async result", torch.all(big == S).item())

    # several async, waited on in reverse: the last wait runs them all
    xs = [t((rank + 1) * (k + 1)) for k in range(4)]
    ws = [dist.all_reduce(x, async_op=True) for x in xs]
    for k in reversed(range(4)):
        ws[k].wait()
    check("reverse waits", all(torch.all(xs[k] == S * (k + 1)).item() for k in range(4)))

    # futures: the worker runs them and completes each future itself
    ys = [t(rank + 1 + k) for k in range(3)]
    futs = [dist.all_reduce(y, async_op=True).get_future() for y in ys]
    vals = [f.wait()[0] for f in futs]
    check("futures", all(torch.all(vals[k] == S + size * k).item() for k in range(3)))
    fut = dist.all_reduce(t(1), async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    check("a chained future", torch.all(fut.wait() == 2 * size).item())

    # a future asked for after its call ran on the caller's thread is made
    # completed, with the outputs; asked twice, it is the same one
    y = t(rank + 1)
    w = dist.all_reduce(y, async_op=True)
    w.wait()
    f1, f2 = w.get_future(), w.get_future()
    check("future after the wait: done at once", f1.done() and f2.done())
    check("future after the wait: its value",
          torch.all(f1.wait()[0] == S).item() and f2.wait()[0] is not None
          and torch.all(f2.wait()[0] == S).item())
    check("result() is the outputs", torch.all(w.result()[0] == S).item())

    # a stream of futures (the worker polls between them rather than
    # sleeping), and a wait on work the worker has taken
    ok = True
    for i in range(100):
        y = t(rank + i)
        w = dist.all_reduce(y, async_op=True)
        if i % 2:
            ok = ok and torch.all(w.get_future().wait()[0] == S - size + size * i).item()
        else:
            w.get_future()
            w.wait()
            ok = ok and torch.all(y == S - size + size * i).item()
    check("100 futures and waits on the worker's jobs", ok)

    # polled until done without a wait: the worker takes it at once
    z = t(rank + 1)
    w = dist.all_reduce(z, async_op=True)
    deadline = time.monotonic() + 60
    while not w.is_completed() and time.monotonic() < deadline:
        time.sleep(0.001)
    check("polled to completion", w.is_completed() and torch.all(z == S).item())

    # a wait with a timeout only waits; the worker runs it
    z = t(rank + 1)
    w = dist.all_reduce(z, async_op=True)
    check("wait(timeout)", w.wait(datetime.timedelta(seconds=60)) and torch.all(z == S).item())

    # an async call left alone (no wait, no future) still runs: the worker
    # takes it after its grace, and a later barrier finds it done
    z = t(rank + 1)
    w = dist.all_reduce(z, async_op=True)
    time.sleep(0.05)
    check("left alone, done", w.is_completed() and torch.all(z == S).item())

    # many small synchronous calls, alternating with async ones
    ok = True
    for i in range(200):
        a = t(rank + i)
        if i % 3 == 0:
            dist.all_reduce(a, async_op=True).wait()
        else:
            dist.all_reduce(a)
        ok = ok and torch.all(a == S - size + size * i).item()
    check("200 mixed calls", ok)

    # the bench's per-call probe from C++: weft's own call, then the
    # backend's, each really reducing (ones: size ** calls)
    from weft import _weft_torch
    pg = dist.distributed_c10d._get_default_group()
    one = torch.ones(2)
    us = [_weft_torch.call_cost(pg, one, 3, b) for b in (False, True)]
    check("call_cost times both", all(u > 0 for u in us), str(us))
    check("call_cost reduces", torch.all(one == float(size) ** 6).item(), str(one))
    try:
        _weft_torch.call_cost(pg, torch.ones(2, dtype=torch.int32), 1, True)
        check("call_cost refuses int32", False)
    except RuntimeError as e:
        check("call_cost refuses int32", "float32" in str(e), str(e))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    harness.main(body, sizes=(3,))
