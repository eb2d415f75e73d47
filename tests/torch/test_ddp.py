"""DistributedDataParallel over backend "weft" trains a small MLP to the
same losses as over gloo (same seed, same batches), and a communication
hook that reads the all-reduce's future works. Three runs of the same job
over weft give the same losses and weights, bit for bit (each run is a new
process group, whose buckets go through auto's trials afresh)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS = 30


def train(backend, rank, size, hook=False, run=0):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    port = int(os.environ["MASTER_PORT"])
    init = f"file:///tmp/weft-ddp-{port}-{backend}-{hook}-{run}"
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=size)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 5))
    ddp = DDP(model, bucket_cap_mb=0.01)  # several buckets: overlapped all-reduces
    if hook:
        def avg_hook(state, bucket):
            t = bucket.buffer()
            t.div_(size)
            return dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0])
        ddp.register_comm_hook(None, avg_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1000 + rank)
    teacher = torch.randn(20, 5, generator=torch.Generator().manual_seed(7))
    losses = []
    for _ in range(STEPS):
        x = torch.randn(32, 20, generator=g)
        y = (x @ teacher).argmax(1)  # learnable: the loss must fall
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(t.item() / size)
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    dist.destroy_process_group()
    return losses, params


def body(rank, size, check):
    import torch
    import weft.torch  # noqa: F401
    torch.set_num_threads(1)
    lw, pw = train("weft", rank, size)
    again = [train("weft", rank, size, run=i) for i in (1, 2)]
    lg, pg = train("gloo", rank, size)
    lh, ph = train("weft", rank, size, hook=True)
    close = lambda a, b: all(abs(x - y) <= 1e-4 * max(1.0, abs(y)) for x, y in zip(a, b))  # noqa: E731
    check("losses equal gloo's", close(lw, lg), f"{lw[-3:]} vs {lg[-3:]}")
    check("loss falls", lw[-1] < lw[0], f"{lw[0]} -> {lw[-1]}")
    check("weights equal gloo's", torch.allclose(pw, pg, atol=1e-5))
    check("comm hook on the future", close(lh, lg) and torch.allclose(ph, pg, atol=1e-5))
    for i, (la, pa) in enumerate(again):
        step = next((k for k, (x, y) in enumerate(zip(la, lw)) if x != y), None)
        check(f"run {i + 2} gives run 1's losses bit for bit", la == lw,
              f"first difference at step {step}")
        check(f"run {i + 2} gives run 1's weights bit for bit", torch.equal(pa, pw),
              f"largest difference {(pa - pw).abs().max().item()}")


if __name__ == "__main__":
    harness.main(body, sizes=(2, 4))
