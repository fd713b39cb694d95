"""Loops that read an input backwards (issue 22): time to a first gradient, each size in a
fresh process with an empty cache, and a gradient call, beside the same gradient written by
hand in NumPy (vectorised, the strongest we could write for these: reversed views).

    python bench/backwards.py [--sizes 10000 100000 1000000] [--calls 20] [--diffdsl PATH]
                              [--no-trim]

Programs: a dot product of w with x reversed, and a symmetry penalty, the squared differences
of x and x reversed (its gradient adds what the loop read forwards and backwards). `--diffdsl`
runs another checkout (an earlier commit, where both were written out) the same way.
`--no-trim` keeps glibc from giving freed memory back to the system (`mallopt`): by default
the gradient's fresh output arrays of a large input lie on pages the system maps anew each
call, which costs both sides about 0.3 ms per MB (0.5 of diffdsl's 0.84 ms at 10^5). The
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
    "reversed dot": """input x[{n}]
input w[{n}]
output s = sum(w[i] * x[{n} - 1 - i] for i in range({n}))
""",
    "symmetry penalty": """input x[{n}]
output s = sum((x[i] - x[{n} - 1 - i]) ** 2 for i in range({n}))
""",
}

CHILD = r"""
import ctypes, json, os, sys, time
if os.environ.get("BENCH_NO_TRIM"):  # M_TRIM_THRESHOLD and M_MMAP_THRESHOLD: 1 GB
    ctypes.CDLL("libc.so.6").mallopt(-1, 1 << 30)
    ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 30)
start = time.perf_counter()
import numpy as np
import diffdsl
name, calls = sys.argv[1], int(sys.argv[2])
prog = diffdsl.compile(sys.argv[3])
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
if name == "reversed dot":
    x, w = values["x"], values["w"]
    def by_hand():
        return {"x": w[::-1].copy(), "w": x[::-1].copy()}
else:
    x = values["x"]
    def by_hand():
        d = x - x[::-1]
        return {"x": 4 * d}  # 2 d[i] - 2 d[n - 1 - i], and d is odd under reversal
want = by_hand()
err = max(float(np.max(np.abs(grad[k] - want[k]))) / (1 + float(np.max(np.abs(want[k]))))
          for k in want)
t = time.perf_counter()
for _ in range(calls):
    by_hand()
numpy = (time.perf_counter() - t) / calls
print(json.dumps({"first": first, "call": per_call, "numpy": numpy, "error": err,
                  "nodes": len(prog.graph.nodes)}))
"""


def run(name: str, n: int, calls: int, checkout: str | None, no_trim: bool) -> dict:
    env = dict(os.environ, DIFFDSL_CACHE_DIR=tempfile.mkdtemp(prefix="dd-back-"))
    if checkout:
        env["PYTHONPATH"] = checkout
    if no_trim:
        env["BENCH_NO_TRIM"] = "1"
    source = PROGRAMS[name].format(n=n)
    done = subprocess.run([sys.executable, "-c", CHILD, name, str(calls), source],
                          capture_output=True, text=True, env=env, timeout=600,
                          cwd=tempfile.gettempdir())  # not this checkout's folder
    if done.returncode:
        return {"failed": done.stderr.strip().splitlines()[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--diffdsl", help="another checkout to run the same way")
    ap.add_argument("--no-trim", action="store_true", help="malloc keeps freed memory")
    args = ap.parse_args()
    print(machine())
    rows = []
    for name in PROGRAMS:
        for n in args.sizes:
            got = run(name, n, args.calls, args.diffdsl, args.no_trim)
            if "failed" in got:
                rows.append([name, f"{n:,}", got["failed"][:60], "", "", "", "", ""])
            else:
                rows.append([name, f"{n:,}", f"{got['first']:.2f} s",
                             f"{got['call'] * 1e3:.3f} ms", f"{got['numpy'] * 1e3:.3f} ms",
                             f"{got['call'] / got['numpy']:.2f}", f"{got['nodes']:,}",
                             f"{got['error']:.1e}"])
            print(rows[-1], file=sys.stderr)
    print(table(["program", "n", "first gradient (whole process)", "per call", "NumPy by hand",
                 "ratio", "nodes", "max rel. error"], rows, markdown=True))


if __name__ == "__main__":
    main()
