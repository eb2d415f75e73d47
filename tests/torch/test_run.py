"""weft.Run against weft-train: the same options under weftrun -n 4 from
Python and from the program write the same metrics: each train row's step,
epoch, loss, accuracy, learning rate and gradient norm, compared as text
(the timing columns left out), and save the same checkpoint byte for byte
(parameters, optimiser state and RNG after the last step: the text rows
round the losses, the checkpoint does not): the MLP data-parallel with
ZeRO-2, and a GPT at tp 2 x pp 2. In the middle of a run, Run.save and
Run.eval at 4 ranks (tp 2 x pp 2, and ZeRO-3) write what weft-train
--stop-at writes there, and leave the rest of the run as it was (its last
checkpoint the same bytes). Needs no NumPy or torch."""
import json
import os
import subprocess
import sys
import tempfile

UNDER_WEFTRUN = r'''
import json, sys
import weft
with weft.Run(json.loads(sys.argv[1])) as run:
    print("outcome", run.train(), "step", run.info.step, flush=True)
'''

# steps to AT, save and evaluate there, then the rest
MID_RUN = r'''
import json, sys
import weft
opts, mid, at = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
with weft.Run(opts) as run:
    while run.info.step < at:
        run.step()
    run.save(mid)
    run.eval()
    print("outcome", run.train(), "step", run.info.step, flush=True)
'''

CASES = {
    "mlp-zero2": {"model": "mlp", "data": "builtin", "train-size": 2048, "steps": 6,
                  "zero": 2},
    "gpt-tp2-pp2": {"model": "gpt", "data": "builtin", "train-size": 2048, "steps": 4,
                    "layers": 2, "dim": 32, "seq": 16, "tp": 2, "pp": 2},
}
MID_CASES = {
    "gpt-tp2-pp2": CASES["gpt-tp2-pp2"],
    "gpt-zero3": {"model": "gpt", "data": "builtin", "train-size": 2048, "steps": 4,
                  "layers": 2, "dim": 32, "seq": 16, "zero": 3},
}
COMMON = {"no-eval": True, "quiet": True, "threads": 1}
# the same kernels and reduction order in both launches
ENV = {"WEFT_MATMUL": "portable", "WEFT_ALGO": "ring", "OMP_NUM_THREADS": "1"}


def train_rows(path):
    """step,epoch,split,loss,accuracy,lr,grad_norm of each train row."""
    with open(path) as f:
        return [",".join(line.split(",")[:7]) for line in f.read().splitlines()[1:]
                if line.split(",")[2:3] == ["train"]]


def same_bytes(a, b):
    if not (os.path.exists(a) and os.path.exists(b)):
        return False
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def mid_run(weftrun, tool, env, tmp, check):
    """Run.save and Run.eval after step 2 of 4, against weft-train."""
    for name, case in MID_CASES.items():
        opts = dict(case, **COMMON)
        mid, end = os.path.join(tmp, name + ".mid.ckpt"), os.path.join(tmp, name + ".end.ckpt")
        r = subprocess.run([weftrun, "-n", "4", sys.executable, "-c", MID_RUN,
                            json.dumps(dict(opts, save=end)), mid, "2"],
                           capture_output=True, text=True, timeout=300, env=env)
        check(f"{name}: save and eval after step 2 of 4, then the rest",
              r.returncode == 0 and r.stdout.count(f"outcome 1 step {case['steps']}") == 4
              and r.stdout.count("validation:") + r.stderr.count("validation:") >= 1,
              r.stdout + r.stderr)
        args = []
        for k, v in opts.items():
            args += [f"--{k}"] + ([] if v is True else [str(v)])
        ref_mid, ref_end = (os.path.join(tmp, name + ".ref_mid.ckpt"),
                            os.path.join(tmp, name + ".ref_end.ckpt"))
        r1 = subprocess.run([weftrun, "-n", "4", tool, *args, "--stop-at", "2", "--save", ref_mid],
                            capture_output=True, text=True, timeout=300, env=env)
        r2 = subprocess.run([weftrun, "-n", "4", tool, *args, "--save", ref_end],
                            capture_output=True, text=True, timeout=300, env=env)
        check(f"{name}: weft-train --stop-at 2 and the whole run",
              r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr)
        check(f"{name}: Run.save at step 2 writes weft-train --stop-at 2's bytes",
              same_bytes(mid, ref_mid))
        check(f"{name}: the run after the save and eval ends as the undisturbed one",
              same_bytes(end, ref_end))


def main():
    build = os.environ.get("BUILD", "build")
    weftrun, tool = os.path.join(build, "weftrun"), os.path.join(build, "weft-train")
    env = dict(os.environ, **ENV)
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"), flush=True)
        passed, failed = passed + bool(ok), failed + (not ok)

    with tempfile.TemporaryDirectory() as tmp:
        for name, case in CASES.items():
            opts = dict(case, **COMMON)
            py_csv, c_csv = os.path.join(tmp, name + ".py.csv"), os.path.join(tmp, name + ".c.csv")
            py_ck, c_ck = os.path.join(tmp, name + ".py.ckpt"), os.path.join(tmp, name + ".c.ckpt")
            r = subprocess.run([weftrun, "-n", "4", sys.executable, "-c", UNDER_WEFTRUN,
                                json.dumps(dict(opts, metrics=py_csv, save=py_ck))],
                               capture_output=True, text=True, timeout=300, env=env)
            want = f"outcome 1 step {case['steps']}"
            check(f"{name}: weft.Run under weftrun -n 4",
                  r.returncode == 0 and r.stdout.count(want) == 4, r.stdout + r.stderr)
            args = []
            for k, v in opts.items():
                args += [f"--{k}"] + ([] if v is True else [str(v)])
            r = subprocess.run([weftrun, "-n", "4", tool, *args, "--metrics", c_csv, "--save", c_ck],
                               capture_output=True, text=True, timeout=300, env=env)
            check(f"{name}: weft-train under weftrun -n 4", r.returncode == 0, r.stdout + r.stderr)
            if not (os.path.exists(py_csv) and os.path.exists(c_csv)):
                check(f"{name}: both metrics files written", False)
                continue
            a, b = train_rows(py_csv), train_rows(c_csv)
            check(f"{name}: {len(a)} train rows, rows equal as text",
                  a == b and len(a) == case["steps"], f"\n  python {a}\n  tool   {b}")
            same = False
            if os.path.exists(py_ck) and os.path.exists(c_ck):
                with open(py_ck, "rb") as f, open(c_ck, "rb") as g:
                    same = f.read() == g.read()
            check(f"{name}: the two checkpoints equal byte for byte", same)
        mid_run(weftrun, tool, env, tmp, check)
    print(f"checks: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
