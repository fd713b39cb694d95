"""Sparse against dense derivatives: the Broyden banded function's Jacobian and the chained
Rosenbrock function's Hessian, n = 10^3 and 10^4, side by side in one run.

    python bench/sparse.py [--markdown] [--sizes 1000,10000] [--timeout 600] [--memory GB]

Problems (Moré, Garbow and Hillstrom's test set, and its usual chained Rosenbrock):
  broyden     F_i = x_i (2 + 5 x_i^2) + 1 - sum of x_j (1 + x_j) over j != i, i-5 <= j <= i+1:
              a Jacobian with 7 bands
  rosenbrock  f = sum of 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2: a tridiagonal Hessian

Methods, each in a process of its own (so the memory column is its own):
  hand-written    the closed form, vectorised NumPy, assembled as scipy.sparse CSR: the
                  strongest reference, and the values every other row is checked against
  diffdsl sparse  prog.jacobian(x=x, sparse=True) / prog.hessian(x=x, sparse=True): pattern
                  from the graph, colouring, one compressed kernel (CPU backend)
  diffdsl dense   prog.jacobian(x=x) / prog.hessian(x=x): the dense derivative graph
  JAX dense       jax.jit(jax.jacfwd(F)) / jax.jit(jax.hessian(f)), float64 (where installed)

Columns: sweeps (forward or reverse passes the derivative needs: colours for sparse, n for
dense), first call (s: for diffdsl the derivative graph, pattern, colouring and kernel, with an
empty kernel cache; for JAX tracing and XLA compilation; the program's own lowering is not in
it), call (the median ms of 5 to 200 later calls, at least a second's worth, cycling through 7
random points), ratio (call / hand-written call), peak MB (the
process's peak resident memory above what it held before the first call), max rel err
(against hand-written). A cell that fails, runs past --timeout or needs more than --memory GB
of address space (diffdsl's cells; JAX reserves address space it does not use) says so.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time

import numpy as np
from common import have, machine, run_worker, scratch_cache, table

BROYDEN = """const n = {n}
input x[n]
output F = [x[i] * (2 + 5 * x[i]**2) + 1
            - sum(x[j] * (1 + x[j]) for j in range(max(0, i - 5), min(n, i + 2)) if j != i)
            for i in range(n)]
"""
ROSENBROCK = """const n = {n}
input x[n]
output f = sum(100 * (x[i+1] - x[i]**2)**2 + (1 - x[i])**2 for i in range(n - 1))
"""
METHODS = ["hand-written", "diffdsl sparse", "diffdsl dense", "JAX dense"]


def hand_written(problem: str, x: np.ndarray):
    """The derivative in closed form, as CSR."""
    import scipy.sparse as sp
    n = len(x)
    if problem == "broyden":
        off = -(1 + 2 * x)  # d F_i / d x_j for j != i in the band: it depends on j only
        offsets = [k for k in range(-5, 2) if k != 0]
        # diags' band of offset k holds the entries (i, i + k) in order of i: off[i + k]
        bands = [off[max(k, 0): n + min(k, 0)] for k in offsets]
        return sp.diags([2 + 15 * x * x] + bands, [0] + offsets, format="csr")
    d = np.zeros(n)
    d[:-1] = 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    d[1:] += 200
    off = -400 * x[:-1]
    return sp.diags([off, d, off], [-1, 0, 1], format="csr")


def memory_mb(field: str) -> float:
    """VmRSS (resident now) or VmHWM (its peak) of this process, in MB (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1e3
    return float("nan")


def reset_peak() -> None:
    """Start VmHWM afresh from the current RSS (Linux's clear_refs 5), so the peak seen is that
    of the work measured, not of compiling the program before it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def derivative(method: str, problem: str, n: int):
    """(function x -> matrix (CSR or dense), sweeps)."""
    if method == "hand-written":
        return (lambda x: hand_written(problem, x)), 0
    if method == "JAX dense":
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
        if problem == "broyden":
            def F(x):
                g = jnp.pad(x * (1 + x), (5, 1))
                near = sum(g[5 + k:5 + k + n] for k in range(-5, 2) if k != 0)
                return x * (2 + 5 * x**2) + 1 - near
            fn = jax.jit(jax.jacfwd(F))
        else:
            def f(x):
                return jnp.sum(100 * (x[1:] - x[:-1]**2)**2 + (1 - x[:-1])**2)
            fn = jax.jit(jax.hessian(f))
        return (lambda x: np.asarray(fn(x))), n
    import diffdsl
    from diffdsl.runtime import sparse
    source = (BROYDEN if problem == "broyden" else ROSENBROCK).format(n=n)
    prog = diffdsl.compile(source, backend="cpu")
    kind = "jacobian" if problem == "broyden" else "hessian"
    if method == "diffdsl sparse":
        def call(x):
            return getattr(prog, kind)(x=x, sparse=True)
        return call, lambda: sparse.plan(prog, kind).sweeps
    if kind == "jacobian":
        return (lambda x: prog.jacobian(x=x)["x"]), n
    return (lambda x: prog.hessian(x=x)["x"]["x"]), n


def worker(args) -> None:
    scratch_cache()
    if not args.method.startswith("JAX"):
        limit = int(args.memory * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    rng = np.random.default_rng(0)
    fn, sweeps = derivative(args.method, args.problem, args.n)
    draws = [rng.uniform(-1, 1, args.n) for _ in range(8)]
    reset_peak()
    before = memory_mb("VmRSS")
    start = time.perf_counter()
    try:
        first = fn(draws[0])
    except MemoryError:
        print(json.dumps({"error": f"out of memory (limit {args.memory:g} GB)"}))
        return
    first_s = time.perf_counter() - start
    times = []
    while len(times) < 5 or (sum(times) < 1.0 and len(times) < 200):  # the median of these
        start = time.perf_counter()
        fn(draws[1 + len(times) % 7])
        times.append(time.perf_counter() - start)
    peak = memory_mb("VmHWM") - before
    want = hand_written(args.problem, draws[0])
    if hasattr(first, "toarray"):
        diff = abs(first - want).max()
    else:  # a dense result: compared row block by row block, not as a second dense copy
        diff = max(np.max(np.abs(first[k:k + 1000] - want[k:k + 1000].toarray()))
                   for k in range(0, args.n, 1000))
    print(json.dumps({"sweeps": sweeps() if callable(sweeps) else sweeps,
                      "nnz": int(first.nnz) if hasattr(first, "nnz") else int(first.size),
                      "first": first_s, "call": statistics.median(times), "peak": peak,
                      "err": float(diff / abs(want).max())}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--memory", type=float, default=8.0)
    parser.add_argument("--worker", dest="method")
    parser.add_argument("--problem")
    parser.add_argument("--n", type=int)
    args = parser.parse_args()
    if args.method:
        return worker(args)
    print(machine())
    rows = []
    for problem in ("broyden", "rosenbrock"):
        for n in (int(s) for s in args.sizes.split(",")):
            base = None
            for method in METHODS:
                if method == "JAX dense" and not have("jax"):
                    rows.append([problem, f"{n:,}", method, "-", "-", "-", "-", "-", "-",
                                 "not installed"])
                    continue
                r = run_worker([__file__, "--worker", method, "--problem", problem,
                                "--n", str(n), "--memory", str(args.memory)], args.timeout)
                if "error" in r:
                    rows.append([problem, f"{n:,}", method, "-", "-", "-", "-", "-", "-",
                                 r["error"][:60]])
                    continue
                base = r["call"] if method == "hand-written" else base
                ratio = f"{r['call'] / base:.2f}" if base else "-"
                rows.append([problem, f"{n:,}", method, r["sweeps"] or "-", f"{r['nnz']:,}",
                             f"{r['first']:.3f}", f"{r['call'] * 1e3:.3f}", ratio,
                             f"{r['peak']:.0f}", f"{r['err']:.1e}"])
                print(" | ".join(str(c) for c in rows[-1]), file=sys.stderr, flush=True)
    print(table(["problem", "n", "method", "sweeps", "stored", "first call s", "call ms",
                 "ratio", "peak MB", "max rel err"], rows, args.markdown, left=(0, 2)))


if __name__ == "__main__":
    main()
