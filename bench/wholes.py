"""Inputs read in place (issue 22): time to a first gradient and peak memory, each size in a
fresh process with an empty cache (making the data not counted), for programs whose data
grows while their text does not, beside the same gradient written by hand in NumPy
(vectorised) for the time a call.

    python bench/wholes.py [--sizes 1000 1000000 ...] [--calls 20]

Programs: a least-squares mean over n points (`input x[n]`, `input y[n]`, scalars a, b), and
a sum of squares over a matrix `input X[m, m]` (a loop over rows, inside it one over
columns: n = m * m elements). The figures include Python's start, imports, lowering,
autodiff and LLVM; peak memory is the process's maximum resident set, beside the data's own
size (the inputs and the gradient's arrays).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine, table  # noqa: E402

LSQ = """input x[{n}]
input y[{n}]
input a
input b
output loss = mean((a * x[i] + b - y[i]) ** 2 for i in range({n}))
"""
MATRIX = """input X[{m}, {m}]
output s = sum(sum(X[i, j] ** 2 for j in range({m})) for i in range({m}))
"""

CHILD = r"""
import json, sys, time, resource
start = time.perf_counter()
import numpy as np
import diffdsl
kind, n, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
prog = diffdsl.compile(sys.argv[4])
compiled = time.perf_counter() - start
rng = np.random.default_rng(0)
values = {k: rng.normal(size=s) for k, s in prog.inputs.items()}  # not timed: the data
t = time.perf_counter()
grad = prog.grad(values)
first = compiled + time.perf_counter() - t
t = time.perf_counter()
for _ in range(calls):
    prog.grad(values)
per_call = (time.perf_counter() - t) / calls
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before NumPy's temporaries
if kind == "lsq":
    x, y, a, b = values["x"], values["y"], values["a"], values["b"]
    def by_hand():
        r = a * x + b - y
        return {"x": 2 * a * r / n, "y": -2 * r / n, "a": 2 * np.mean(r * x),
                "b": 2 * np.mean(r)}
else:
    X = values["X"]
    def by_hand():
        return {"X": 2 * X}
want = by_hand()
err = max(float(np.max(np.abs(np.ravel(grad[k]) - np.ravel(want[k])))) /
          (1 + float(np.max(np.abs(want[k])))) for k in want)
t = time.perf_counter()
for _ in range(calls):
    by_hand()
numpy_call = (time.perf_counter() - t) / calls
data = sum(v.nbytes for v in values.values()) * 2  # the inputs and their gradient
print(json.dumps({"first": first, "per_call": per_call, "numpy": numpy_call, "err": err,
                  "nodes": len(prog.graph.nodes), "data": data,
                  "rss": rss}))
"""


def child(kind: str, n: int, calls: int) -> dict:
    source = LSQ.format(n=n) if kind == "lsq" else MATRIX.format(m=int(round(n ** 0.5)))
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, DIFFDSL_CACHE_DIR=cache)
        done = subprocess.run([sys.executable, "-c", CHILD, kind, str(n), str(calls), source],
                              capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def baseline_rss() -> int:
    """Peak memory of a process that imports diffdsl and NumPy and does nothing else."""
    done = subprocess.run([sys.executable, "-c", "import resource, numpy, diffdsl; "
                           "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout) * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+",
                    default=[1_000, 100_000, 1_000_000, 10_000_000])
    ap.add_argument("--matrix", type=int, nargs="+", default=[2000, 10_000],
                    help="sides m of the m x m matrix input")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    base = baseline_rss()
    rows = []
    cases = [("lsq", n) for n in args.sizes] + [("matrix", m * m) for m in args.matrix]
    for kind, n in cases:
        r = child(kind, n, args.calls if n <= 10**7 else 3)
        name = "least squares, x[n], y[n]" if kind == "lsq" else \
            f"sum of squares, X[{int(round(n ** 0.5))}, {int(round(n ** 0.5))}]"
        rows.append([name, f"{n:,}", f"{r['first']:.2f} s", f"{r['per_call'] * 1e3:.3f} ms",
                     f"{r['numpy'] * 1e3:.3f} ms", f"{r['per_call'] / r['numpy']:.2f}",
                     f"{r['nodes']:,}", f"{r['data'] / 2**20:,.0f} MB",
                     f"{(r['rss'] - base) / 2**20:,.0f} MB",
                     f"{(r['rss'] - base) / r['data']:.2f}", f"{r['err']:.1e}"])
        print(json.dumps({"case": kind, "n": n, **r}), file=sys.stderr)
    print(f"{machine()}; a process importing diffdsl peaks at {base / 2**20:.0f} MB")
    print(table(["program", "elements n", "first gradient (whole process)", "per call",
                 "NumPy by hand", "ratio", "nodes", "data (inputs + gradient)",
                 "peak memory above imports", "memory / data", "max rel. error"], rows,
                markdown=True))


if __name__ == "__main__":
    main()
