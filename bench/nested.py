"""Inputs read whole by loops nested in loops (issue 22): the first gradient (a whole process,
empty cache) and a gradient call, for a pairwise Gaussian kernel sum over n points X and m
points Y, whose inner loop over Y runs in every iteration of the outer loop over X, beside
the same gradient written by hand in Numba (two parallel loops, one over X and one over Y,
each point's terms in registers: the strongest reference we could write).

    python bench/nested.py [--sizes 1000 10000 100000] [--n 1000] [--old PATH]

`--old PATH` runs the same programs with the diffdsl found at PATH too (a checkout of an
earlier commit: `git worktree add /tmp/old <commit>`), in the same run, so the two are
measured on the same machine under the same load.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine, run_child, table  # noqa: E402

KERNEL = """input X[{n}, 4]
input Y[{m}, 4]
output k = sum(sum(exp(-sum((X[i, t] - Y[j, t]) ** 2 for t in range(4))) for j in range({m}))
               for i in range({n}))
"""

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import diffdsl
prog = diffdsl.compile(sys.argv[1])
rng = np.random.default_rng(0)
values = {k: rng.normal(size=s) for k, s in prog.inputs.items()}
t = time.perf_counter()
grad = prog.grad(values)
first = time.perf_counter() - start
calls = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    prog.grad(values)
    calls.append(time.perf_counter() - t)
np.savez(sys.argv[3], **grad)
print(json.dumps({"first": first, "call": min(calls), "nodes": len(prog.graph.nodes)}))
"""


@njit(parallel=True, cache=True)
def _by_x(X, Y, out):
    for i in prange(X.shape[0]):
        g0 = g1 = g2 = g3 = 0.0
        for j in range(Y.shape[0]):
            d0, d1 = X[i, 0] - Y[j, 0], X[i, 1] - Y[j, 1]
            d2, d3 = X[i, 2] - Y[j, 2], X[i, 3] - Y[j, 3]
            e = np.exp(-(d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3))
            g0 -= 2.0 * d0 * e
            g1 -= 2.0 * d1 * e
            g2 -= 2.0 * d2 * e
            g3 -= 2.0 * d3 * e
        out[i, 0], out[i, 1], out[i, 2], out[i, 3] = g0, g1, g2, g3


def reference(X, Y):
    """d/dX and d/dY of the kernel sum: one loop per side (d/dY is d/dX with the roles
    swapped and the sign turned), each point's partial sums in registers."""
    gx, gy = np.empty_like(X), np.empty_like(Y)
    _by_x(X, Y, gx)
    _by_x(Y, X, gy)
    return {"X": gx, "Y": gy}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--old", help="the path of another diffdsl checkout, run beside")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    builds = [("this checkout", None)] + ([(f"old ({args.old})", args.old)] if args.old
                                           else [])
    rows = []
    for m in args.sizes:
        source = KERNEL.format(n=args.n, m=m)
        rng = np.random.default_rng(0)
        X, Y = rng.normal(size=(args.n, 4)), rng.normal(size=(m, 4))
        reference(X, Y)  # compiled (and cached) once, not timed
        times = []
        for _ in range(args.calls):
            t = time.perf_counter()
            want = reference(X, Y)
            times.append(time.perf_counter() - t)
        hand = min(times)
        for name, path in builds:
            got = run_child(CHILD, [source, str(args.calls)], path, timeout=900)
            gap = max(float(np.max(np.abs(got["grad"][k] - want[k])) /
                            max(1.0, float(np.max(np.abs(want[k]))))) for k in want)
            rows.append([f"n = {args.n}, m = {m}", name, f"{got['first']:.2f} s",
                         f"{got['call'] * 1e3:.1f} ms", f"{hand * 1e3:.1f} ms",
                         f"{got['call'] / hand:.2f}", f"{got['nodes']:,}", f"{gap:.0e}"])
    print(machine())
    print(table(["size", "diffdsl", "first gradient (whole process)", "a call",
                 "Numba by hand a call", "ratio", "nodes", "gap to the hand gradient"],
                rows, args.markdown))


if __name__ == "__main__":
    main()
