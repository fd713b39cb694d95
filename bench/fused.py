"""Comprehensions whose rows are fused into the loops that read them (issue 22): time to a
first gradient, each size in a fresh process with an empty cache, with the rows fused (the
default for a body of up to `mapped.FUSED` nodes), stored by the comprehension's loop and
streamed by the readers (the default past it; here `mapped.FUSED = -1`), and listed as part
nodes (as before), beside the same gradient written by hand in NumPy (vectorised) for the
time a call.

    python bench/fused.py [--sizes 1000 10000] [--large 100000 1000000] [--calls 20]

Programs: a total variation over a named comprehension of differences, and an integrator's
stage (a comprehension made in a def, then an elementwise update and a sum of squares). The
figures include Python's start, imports, lowering, autodiff and LLVM; making the data is not
counted.
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

PROGRAMS = {
    "total variation": """input x[{n}]
d = [x[i + 1] - x[i] for i in range({n} - 1)]
output tv = sum(d ** 2)
""",
    "an integrator's stage": """input x[{n}]
input y[{n}]
def f(x, y) = [x[i] * y[i] for i in range({n})]
k = f(x, y)
z = y + 0.5 * k
output s = sum(z * z)
""",
}

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import diffdsl
from diffdsl.language.lower import mapped
name, build, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
if build == "stored":
    mapped.FUSED = -1  # every body past the limit: its rows stored and streamed
elif build == "listed":
    mapped.fused = lambda *args: None  # every comprehension's rows listed, as before
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
if name == "total variation":
    x = values["x"]
    def by_hand():
        d = np.diff(x)
        g = np.zeros_like(x)
        g[1:] += 2 * d
        g[:-1] -= 2 * d
        return {"x": g}
else:
    x, y = values["x"], values["y"]
    def by_hand():
        z = y + 0.5 * x * y
        return {"x": z * y, "y": 2 * z * (1 + 0.5 * x)}
want = by_hand()
err = max(float(np.max(np.abs(grad[k] - want[k]))) / (1 + float(np.max(np.abs(want[k]))))
          for k in want)
t = time.perf_counter()
for _ in range(calls):
    by_hand()
numpy_call = (time.perf_counter() - t) / calls
print(json.dumps({"first": first, "per_call": per_call, "numpy": numpy_call, "err": err,
                  "nodes": len(prog.graph.nodes)}))
"""


def child(name: str, build: str, n: int, calls: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, DIFFDSL_CACHE_DIR=cache)
        done = subprocess.run([sys.executable, "-c", CHILD, name, build, str(calls),
                               PROGRAMS[name].format(n=n)],
                              capture_output=True, text=True, env=env)
    if done.returncode != 0:  # a limit met: said in the table
        said = [line for line in done.stderr.splitlines() if "error:" in line] or \
            done.stderr.strip().splitlines()[-1:]
        return {"error": said[-1].split("error:")[-1].strip()[:120]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000])
    ap.add_argument("--large", type=int, nargs="*", default=[100_000, 1_000_000],
                    help="sizes run fused and stored alone (listed, they take minutes)")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    rows = []
    for name in PROGRAMS:
        cases = [(n, b) for n in args.sizes for b in ("fused", "stored", "listed")]
        for n, build in cases + [(n, b) for n in args.large for b in ("fused", "stored")]:
            r = child(name, build, n, args.calls)
            if "error" in r:
                rows.append([name, f"{n:,}", build, r["error"], "", "", "", "", ""])
                continue
            rows.append([name, f"{n:,}", build, f"{r['first']:.2f} s",
                         f"{r['per_call'] * 1e3:.3f} ms", f"{r['numpy'] * 1e3:.3f} ms",
                         f"{r['per_call'] / r['numpy']:.2f}", f"{r['nodes']:,}",
                         f"{r['err']:.1e}"])
            print(json.dumps({"program": name, "n": n, "build": build, **r}), file=sys.stderr,
                  flush=True)
    print(machine())
    print(table(["program", "n", "rows", "first gradient (whole process)", "per call",
                 "NumPy by hand", "ratio", "nodes", "max rel. error"], rows, markdown=True))


if __name__ == "__main__":
    main()
