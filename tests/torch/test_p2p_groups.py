"""Point-to-point through backend "weft": tags, isend/irecv posted in any
order, batch_isend_irecv, a refused receive from any source; subgroups
whose backends only their members construct; file:// and tcp:// init."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def body(rank, size, check):
    import torch
    import torch.distributed as dist
    import weft.torch  # noqa: F401
    port = int(os.environ["MASTER_PORT"])
    if size % 2:
        dist.init_process_group("weft", init_method=f"file:///tmp/weft-torch-{port}",
                                rank=rank, world_size=size)
    else:
        dist.init_process_group("weft", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=size)
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    # receives posted in the reverse order of the sends, tags telling them apart
    got = {t: torch.zeros(5) for t in (1, 2, 3)}
    rq = [dist.irecv(got[t], src=prv, tag=t) for t in (3, 2, 1)]
    sq = [dist.isend(torch.full((5,), float(100 * rank + t)), dst=nxt, tag=t) for t in (1, 2, 3)]
    for w in sq + rq:
        w.wait()
    check("irecv any order by tag", all(torch.equal(got[t], torch.full((5,), float(100 * prv + t))) for t in (1, 2, 3)))
    # blocking send/recv, even ranks first
    a = torch.zeros(3, dtype=torch.int64)
    if rank % 2 == 0:
        dist.send(torch.full((3,), rank, dtype=torch.int64), dst=nxt)
        dist.recv(a, src=prv)
    else:
        dist.recv(a, src=prv)
        dist.send(torch.full((3,), rank, dtype=torch.int64), dst=nxt)
    check("send/recv", torch.equal(a, torch.full((3,), prv, dtype=torch.int64)))
    # batch_isend_irecv around the ring, both directions
    l, r = torch.zeros(4), torch.zeros(4)
    ops = [dist.P2POp(dist.irecv, l, prv), dist.P2POp(dist.irecv, r, nxt),
           dist.P2POp(dist.isend, torch.full((4,), float(rank)), nxt),
           dist.P2POp(dist.isend, torch.full((4,), float(rank)), prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check("batch_isend_irecv", torch.equal(l, torch.full((4,), float(prv))) and torch.equal(r, torch.full((4,), float(nxt))))
    try:
        dist.recv(torch.zeros(1))
        check("recv from any source refused", False)
    except RuntimeError as e:
        check("recv from any source refused", "not supported" in str(e), str(e))
    # subgroups: evens and odds; every rank calls new_group, only members build it
    evens = [r for r in range(size) if r % 2 == 0]
    odds = [r for r in range(size) if r % 2 == 1]
    ge = dist.new_group(evens)
    go = dist.new_group(odds) if odds else None
    mine, members = (ge, evens) if rank % 2 == 0 else (go, odds)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=mine)
    check("subgroup all_reduce", t.item() == float(sum(members)))
    b = torch.tensor([float(rank)])
    dist.broadcast(b, src=members[-1], group=mine)
    check("subgroup broadcast (global src)", b.item() == float(members[-1]))
    if len(members) > 1:
        x = torch.zeros(2)
        me = members.index(rank)
        if me == 0:
            dist.send(torch.ones(2) * 7, dst=members[1], group=mine)
        elif me == 1:
            dist.recv(x, src=members[0], group=mine)
            check("subgroup send/recv", torch.equal(x, torch.ones(2) * 7))
    # the world still works after the groups
    t = torch.ones(1)
    dist.all_reduce(t)
    check("world after subgroups", t.item() == size)
    # Work.wait(timeout): a receive whose message is not sent yet raises
    # after the timeout; its future returns at once and completes later
    import datetime
    import time
    buf = torch.zeros(2)
    w = dist.irecv(buf, src=prv, tag=9)
    f = w.get_future()
    check("a message's future returns before the message", not f.done())
    try:
        w.wait(datetime.timedelta(milliseconds=200))
        check("irecv wait(timeout) raises", False)
    except RuntimeError as e:
        check("irecv wait(timeout) raises", "did not complete within 200 ms" in str(e), str(e))
    dist.barrier()
    dist.send(torch.full((2,), float(rank)), dst=nxt, tag=9)
    f.wait()
    check("the future completes with the message", torch.equal(buf, torch.full((2,), float(prv))))
    # a collective's wait(timeout) while rank 0 is late, then a full wait
    if rank == 0:
        time.sleep(1.0)
    t = torch.ones(1)
    w = dist.all_reduce(t, async_op=True)
    if rank != 0:
        try:
            w.wait(datetime.timedelta(milliseconds=100))
            check("all_reduce wait(timeout) raises", False)
        except RuntimeError as e:
            check("all_reduce wait(timeout) raises", "did not complete within 100 ms" in str(e),
                  str(e))
    w.wait()
    check("all_reduce after a timed-out wait", t.item() == size)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    harness.main(body, sizes=(2, 3, 4))
