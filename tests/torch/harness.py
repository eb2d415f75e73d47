"""Runs a test body on N ranks, each its own python process, and adds up
their checks. A body module defines body(rank, size, check); check(name,
cond, detail="") records one check. Output: "ok NAME" / "FAIL NAME: ..."
per failed check and a last line "checks: P passed, F failed"."""
import os
import random
import socket
import subprocess
import sys
import traceback


def free_port():
    """A port 127.0.0.1 binds now, outside the ephemeral range: one from
    inside it can become another connection's source port before rank 0
    listens there (tests run side by side)."""
    lo, hi = 32768, 60999
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = map(int, f.read().split())
    except (OSError, ValueError):
        pass
    spare = [*range(10000 if lo > 10000 else 1024, lo), *range(hi + 1, 65536)]
    for _ in range(64):
        p = random.choice(spare) if spare else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
            return s.getsockname()[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Checks:
    def __init__(self, rank):
        self.rank, self.passed, self.failed = rank, 0, 0

    def __call__(self, name, cond, detail=""):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL [rank {self.rank}] {name} {detail}", flush=True)
        return cond


def child(body, rank, size):
    c = Checks(rank)
    try:
        body(rank, size, c)
    except Exception:
        c.failed += 1
        print(f"FAIL [rank {rank}] exception:\n" + traceback.format_exc(), flush=True)
    print(f"checks: {c.passed} passed, {c.failed} failed", flush=True)
    sys.stdout.flush()
    os._exit(0 if c.failed == 0 else 1)


def launch(script, size, extra_env=None, timeout=180, args=()):
    """Start size ranks of script (which calls main()); returns (passed, failed)."""
    port = free_port()
    procs = []
    for r in range(size):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(size), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   WEFT_TEST_CHILD="1")
        env.update(extra_env or {})
        procs.append(subprocess.Popen([sys.executable, script, *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    passed = failed = 0
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            print(f"FAIL rank {r} of {size}: timed out after {timeout} s")
            failed += 1
        got = False
        for line in out.splitlines():
            if line.startswith("checks: "):
                w = line.split()
                passed += int(w[1])
                failed += int(w[3])
                got = True
            elif line.startswith("FAIL") or "Error" in line or "error" in line:
                print(line)
        if not got:
            failed += 1
            print(f"FAIL rank {r} of {size}: no result (exit {p.returncode}); output:\n{out[-3000:]}")
    return passed, failed


def main(body, sizes=(1, 2, 3, 4), extra_env=None):
    if os.environ.get("WEFT_TEST_CHILD"):
        child(body, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    tp = tf = 0
    for n in sizes:
        p, f = launch(sys.argv[0], n, extra_env)
        print(f"{'ok  ' if not f else 'FAIL'} {os.path.basename(sys.argv[0])} at {n} ranks: "
              f"{p} passed, {f} failed", flush=True)
        tp, tf = tp + p, tf + f
    print(f"checks: {tp} passed, {tf} failed")
    sys.exit(1 if tf else 0)
