"""Loops that stay loops (issue 22): time to a first gradient in a fresh process with an empty
cache, and the time per gradient call, for programs with their data inside, with regions (the
default) beside the same program fully unrolled (`--limit unroll=...`), and beside a
gradient written by hand in NumPy (vectorised, the strongest reference at hand here).

    python bench/regions.py [--unrolled] [--calls 50]

`--unrolled` also times the unrolled build (tens of seconds each). Each case runs in its own
process: the figures include Python's start, imports, lowering, autodiff and LLVM.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASES = {"k-means (k=10, n=1000, d=8)": "kmeans.dd", "MLP (n=256, d=32, h=32)": "mlp.dd"}

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import diffdsl
path, unroll, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with diffdsl.limits.using(**({"unroll": unroll} if unroll else {})):
    prog = diffdsl.load(path)
rng = np.random.default_rng(0)
values = {k: rng.normal(size=s) for k, s in prog.inputs.items()}
grad = prog.grad(values)
first = time.perf_counter() - start
t = time.perf_counter()
for _ in range(calls):
    prog.grad(values)
per_call = (time.perf_counter() - t) / calls
np.save(sys.argv[4], np.concatenate([np.ravel(grad[k]) for k in sorted(grad)]))
print(json.dumps({"first": first, "per_call": per_call, "nodes": len(prog.graph.nodes)}))
"""


def child(path: Path, unroll: int, calls: int, out: Path) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, DIFFDSL_CACHE_DIR=cache)
        done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(unroll), str(calls),
                               str(out)], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def kmeans_by_hand(P, C):
    """The k-means cost's gradient in NumPy: each point's nearest centroid pulls it."""
    dist = ((P[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    nearest = dist.argmin(axis=1)
    diff = P - C[nearest]
    dP = 2 * diff
    dC = np.zeros_like(C)
    np.add.at(dC, nearest, -2 * diff)
    return dP, dC


def mlp_by_hand(X, Y, W1, b1, w2, b2):
    """The MLP's mean squared loss and its gradient in NumPy (reverse mode by hand)."""
    n = X.shape[0]
    H = np.tanh(X @ W1.T + b1)
    r = H @ w2 + b2 - Y
    g = 2 * r / n
    dH = np.outer(g, w2) * (1 - H ** 2)
    return dH @ W1, -g, dH.T @ X, dH.sum(axis=0), H.T @ g, g.sum()


def by_hand(name: str, calls: int) -> float:
    rng = np.random.default_rng(0)
    if name == "kmeans.dd":
        args = (rng.normal(size=(1000, 8)), rng.normal(size=(10, 8)))
        fn = kmeans_by_hand
    else:
        args = (rng.normal(size=(256, 32)), rng.normal(size=256), rng.normal(size=(32, 32)),
                rng.normal(size=32), rng.normal(size=32), rng.normal())
        fn = mlp_by_hand
    fn(*args)
    t = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unrolled", action="store_true")
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    print("| program | build | first gradient (whole process) | per gradient call | nodes |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, file in CASES.items():
            path = HERE / "programs" / file
            builds = [("regions", 0)] + ([("unrolled", 10**9)] if args.unrolled else [])
            grads = {}
            for build, unroll in builds:
                out = Path(tmp) / f"{file}.{build}.npy"
                r = child(path, unroll, args.calls, out)
                grads[build] = np.load(out)
                print(f"| {label} | {build} | {r['first']:.2f} s | {r['per_call'] * 1e3:.3f} ms "
                      f"| {r['nodes']:,} |")
            if len(grads) == 2:
                gap = np.max(np.abs(grads["regions"] - grads["unrolled"]))
                print(f"| {label} | regions vs unrolled: max gradient difference {gap:.1e} | | | |")
            print(f"| {label} | NumPy by hand | | {by_hand(file, args.calls) * 1e3:.3f} ms | |")


if __name__ == "__main__":
    main()
