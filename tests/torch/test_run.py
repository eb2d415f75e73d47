"""weft.Run against weft-train: the same options under weftrun -n 4 from
Python and from the program write the same metrics: each train row's step,
epoch, loss, accuracy, learning rate and gradient norm, compared as text
(the timing columns left out), and save the same checkpoint byte for byte
(parameters, optimiser state and RNG after the last step: the text rows
round the losses, the checkpoint does not): the MLP data-parallel with
ZeRO-2, and a GPT at tp 2 x pp 2. Needs no NumPy or torch."""
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

CASES = {
    "mlp-zero2": {"model": "mlp", "data": "builtin", "train-size": 2048, "steps": 6,
                  "zero": 2},
    "gpt-tp2-pp2": {"model": "gpt", "data": "builtin", "train-size": 2048, "steps": 4,
                    "layers": 2, "dim": 32, "seq": 16, "tp": 2, "pp": 2},
}
COMMON = {"no-eval": True, "quiet": True, "threads": 1}
# the same kernels and reduction order in both launches
ENV = {"WEFT_MATMUL": "portable", "WEFT_ALGO": "ring", "OMP_NUM_THREADS": "1"}


def train_rows(path):
    """step,epoch,split,loss,accuracy,lr,grad_norm of each train row."""
    with open(path) as f:
        return [",".join(line.split(",")[:7]) for line in f.read().splitlines()[1:]
                if line.split(",")[2:3] == ["train"]]


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
    print(f"checks: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
