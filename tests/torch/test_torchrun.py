"""torch's own launcher starts a 2-rank job whose ranks call
init_process_group("weft") with env:// alone: torch's TCPStore on the port
the launcher hands out, no WEFT_* variable anywhere. Each rank checks its
rank, the backend and an all_reduce.

Debian's torch 1.13 launcher, run by Python 3.11, fails while turning its
--redirects and --tee defaults ("0") into Std values: Std.from_str looks
the number up by iterating over the Std flag enum, and since Python 3.11
that iteration skips NONE (0) and ALL (3), so it returns None and to_map
fails on None.get. Both options given as a mapping that names no local
rank ("9:0") leave every rank's output alone, as the default would, and
parse (docs/TORCH.md)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

LAUNCH = ["-m", "torch.distributed.run", "--redirects", "9:0", "--tee", "9:0",
          "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]


def rank_body():
    import torch
    import torch.distributed as dist
    import weft.torch  # noqa: F401
    c = harness.Checks(int(os.environ.get("RANK", -1)))
    try:
        c("no WEFT_* variable", not [k for k in os.environ if k.startswith("WEFT_")])
        c("launched by torch", "TORCHELASTIC_RUN_ID" in os.environ)
        dist.init_process_group("weft")  # env://: torch's RANK, WORLD_SIZE, MASTER_*
        rank, n = dist.get_rank(), dist.get_world_size()
        c("rank and size from torch", (rank, n) == (int(os.environ["RANK"]), 2))
        c("backend", dist.get_backend() == "weft", dist.get_backend())
        t = torch.arange(1000, dtype=torch.float32) * (rank + 1)
        dist.all_reduce(t)
        c("all_reduce", torch.equal(t, torch.arange(1000, dtype=torch.float32) * 3))
        w = dist.all_reduce(torch.ones(3), op=dist.ReduceOp.MAX, async_op=True)
        w.wait()
        c("async all_reduce", torch.equal(w.result()[0], torch.ones(3)))
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        c("no exception", False, repr(e))
    print(f"rank checks: {c.passed} passed, {c.failed} failed", flush=True)
    sys.exit(1 if c.failed else 0)


def main():
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
    env["OMP_NUM_THREADS"] = "1"
    for _ in range(3):  # the free port may be taken before the launcher binds it
        cmd = [sys.executable, *LAUNCH, "--master_port", str(harness.free_port()),
               os.path.abspath(__file__), "--rank"]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=180)
        if "Address already in use" not in p.stdout:
            break
    passed = failed = 0
    for line in p.stdout.splitlines():
        if line.startswith("rank checks: "):
            w = line.split()
            passed, failed = passed + int(w[2]), failed + int(w[4])
        elif line.startswith("FAIL"):
            print(line)
    ranks = sum(line.startswith("rank checks: ") for line in p.stdout.splitlines())
    for name, ok in (("launcher exit 0", p.returncode == 0), ("both ranks reported", ranks == 2)):
        passed, failed = passed + ok, failed + (not ok)
        if not ok:
            print(f"FAIL {name}: exit {p.returncode}; output:\n{p.stdout[-3000:]}")
    print(f"{'ok  ' if not failed else 'FAIL'} {' '.join(['python3'] + LAUNCH)} ... "
          f"({passed} passed, {failed} failed)")
    print(f"checks: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    rank_body() if sys.argv[1:] == ["--rank"] else main()
