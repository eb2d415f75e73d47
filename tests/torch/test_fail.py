"""Errors through backend "weft": a rank killed mid-training makes every
other rank's collective raise, naming the dead rank and the operation,
whether the collective runs on the caller's thread (synchronous calls)
or on the group's worker (a Future waited on); a rank that never arrives
makes the others' collective raise once torch's timeout passes."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def body(rank, size, check):
    import datetime
    import torch
    import torch.distributed as dist
    import weft.torch  # noqa: F401
    mode = os.environ["WEFT_TEST_MODE"]
    dist.init_process_group("weft", timeout=datetime.timedelta(seconds=8))
    t = torch.ones(1000)
    dist.all_reduce(t)
    check("before the failure", t[0].item() == size)
    victim = size - 1
    if rank == victim:
        print(f"checks: {check.passed} passed, 0 failed", flush=True)
        if mode.startswith("kill"):
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(25)  # silent past the others' timeout
        os._exit(0)
    try:
        for _ in range(50):
            if mode == "kill-async":
                dist.all_reduce(t, async_op=True).get_future().wait()
            else:
                dist.all_reduce(t)
        check("a collective raised", False)
    except RuntimeError as e:
        msg = str(e)
        if mode.startswith("kill"):
            check("names the dead rank", f"rank {victim}" in msg, msg)
        else:
            check("says it timed out", "timed out" in msg or "timeout" in msg.lower(), msg)
        check("names the operation", "all_reduce" in msg or "allreduce" in msg, msg)
    if mode == "kill":
        # a later call fails too; the Future asked for after it failed
        # carries the same error
        w = dist.all_reduce(t, async_op=True)
        try:
            w.wait()
            check("a later call raised", False)
        except RuntimeError as e:
            check("a later call raised", "all_reduce" in str(e), str(e))
        check("its Work failed", w.is_completed() and not w.is_success())
        try:
            w.get_future().wait()
            check("its Future raises", False)
        except RuntimeError as e:
            check("its Future raises", "all_reduce" in str(e), str(e))
    # leave without destroy_process_group: the group is broken


if __name__ == "__main__":
    if os.environ.get("WEFT_TEST_CHILD"):
        harness.main(body)
    tp = tf = 0
    for mode, n in (("kill", 3), ("kill-async", 3), ("timeout", 2)):
        p, f = harness.launch(sys.argv[0], n, {"WEFT_TEST_MODE": mode}, timeout=120)
        print(f"{'ok  ' if not f else 'FAIL'} {mode} at {n} ranks: {p} passed, {f} failed")
        tp, tf = tp + p, tf + f
    print(f"checks: {tp} passed, {tf} failed")
    sys.exit(1 if tf else 0)
