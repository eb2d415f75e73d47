"""The weft package without torch: a communicator from the environment,
collectives on NumPy arrays and bytearrays, unequal all-to-all, messages;
then a torch program under weftrun with init_process_group("weft") and no
other change."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

UNDER_WEFTRUN = r'''
import torch, torch.distributed as dist
import weft.torch
dist.init_process_group("weft")
t = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)
n = dist.get_world_size()
print("sum-ok" if t[0].item() == n * (n + 1) / 2 else "sum-bad", flush=True)
dist.destroy_process_group()
'''


def body(rank, size, check):
    import numpy as np
    import weft
    with weft.Comm() as c:
        check("rank and size", (c.rank, c.size) == (rank, size))
        x = np.arange(10, dtype=np.float32) + rank
        c.allreduce(x)
        check("allreduce f32", np.array_equal(x, np.arange(10) * size + sum(range(size))))
        y = np.full(3, rank + 1, dtype=np.int64)
        c.allreduce(y, op="max")
        check("allreduce i64 max", (y == size).all())
        b = bytearray(b"hello" if rank == 0 else b"\0" * 5)
        c.broadcast(b, root=0)
        check("broadcast bytearray", bytes(b) == b"hello")
        out = np.zeros(size * 2, dtype=np.float64)
        c.allgather(np.array([rank, -rank], dtype=np.float64), out)
        check("allgather", np.array_equal(out, np.array([[r, -r] for r in range(size)]).ravel()))
        sc = [(rank + j) % 3 for j in range(size)]
        rc = [(i + rank) % 3 for i in range(size)]
        send = np.concatenate([np.full(sc[j], 10 * rank + j, dtype=np.int32) for j in range(size)])
        recv = np.zeros(sum(rc), dtype=np.int32)
        c.alltoall(send, recv, send_counts=sc, recv_counts=rc)
        want = np.concatenate([np.full(rc[i], 10 * i + rank, dtype=np.int32) for i in range(size)])
        check("alltoallv", np.array_equal(recv, want))
        if size > 1:
            m = np.zeros(4, dtype=np.float32)
            if rank == 0:
                c.send(np.ones(4, dtype=np.float32), 1, tag=5)
            elif rank == 1:
                c.recv(m, 0, tag=5)
                check("send/recv tag", (m == 1).all())
        try:
            c.allreduce(np.zeros(2, dtype=np.complex64))
            check("unknown format refused", False)
        except TypeError:
            check("unknown format refused", True)


if __name__ == "__main__":
    if os.environ.get("WEFT_TEST_CHILD"):
        harness.main(body)
    tp = tf = 0
    for n in (1, 3):
        p, f = harness.launch(sys.argv[0], n)
        print(f"{'ok  ' if not f else 'FAIL'} package at {n} ranks: {p} passed, {f} failed")
        tp, tf = tp + p, tf + f
    weftrun = os.path.join(os.environ.get("BUILD", "build"), "weftrun")
    r = subprocess.run([weftrun, "-n", "3", sys.executable, "-c", UNDER_WEFTRUN],
                       capture_output=True, text=True, timeout=120)
    ok = r.returncode == 0 and r.stdout.count("sum-ok") == 3
    print(f"{'ok  ' if ok else 'FAIL'} torch under weftrun -n 3" + ("" if ok else f": {r.stdout}{r.stderr}"))
    tp, tf = tp + ok, tf + (not ok)
    print(f"checks: {tp} passed, {tf} failed")
    sys.exit(1 if tf else 0)
