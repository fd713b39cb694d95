"""Batched throughput: gradients of det (by minors) per second over a million matrices.

    python bench/det_batch.py [--rows 1000000] [--sizes 3 5] [--quick] [--markdown]

One call evaluates every row: diffdsl `prog.grad(A=X)` with X of shape (rows, n, n) on the
CPU backend and on the numpy interpreter; the hand-written Numba reference of
bench/common.py over the rows with `prange` (parallel=True); JAX `jit(vmap(grad(det)))` in a
subprocess when JAX is installed. X is uniform(0, 1), drawn once before timing; each column
is timed `--repeats` times after a warm-up call, and the median is reported. The first call
of each column is shown too: it includes any compilation left for it (for diffdsl, the
parallel batch loop is compiled on the first batch large enough to use it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from common import (
    analytic_grad,
    check_reference,
    det_source,
    fmt_rate,
    fmt_s,
    have,
    machine,
    reference_grad_batch,
    run_worker,
    scratch_cache,
    table,
    timed,
)


def draw(rows: int, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 1.0, (rows, n, n))


def worker(args) -> None:
    """JAX: jit(vmap(grad(det_by_minors))) over the same rows; print a JSON line."""
    import jax
    from common import jax_det
    X = draw(args.rows, args.n, args.seed + args.n)
    fn = jax.jit(jax.vmap(jax.grad(jax_det())))

    def run(X):
        return np.asarray(fn(X))

    first, median, G = timed(run, X, args.repeats)
    check = slice(0, 1000)
    err = float(np.abs(G[check] - reference_grad_batch(X[check])).max())
    print(json.dumps({"first": first, "seconds": median, "grad_error": err}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--sizes", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="100,000 rows, 3 repeats")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--jax-timeout", type=float, default=300.0)
    ap.add_argument("--worker", choices=["jax"], help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.rows, args.repeats = min(args.rows, 100_000), 3
    if args.worker:
        worker(args)
        return

    scratch_cache()
    import numba

    import diffdsl

    check_reference(args.sizes)
    use_jax = have("jax") and not args.no_jax
    log = sys.stderr
    rows = []
    notes = []
    for n in args.sizes:
        X = draw(args.rows, n, args.seed + n)
        prog = diffdsl.compile(det_source(n), backend="cpu")
        prog.grad(A=X[0])  # compile the kernel (its point and serial loop)
        nodes = len(prog.derivative("grad").nodes)

        def dd(X, prog=prog):
            return prog.grad(A=X)["A"]

        first, t_cpu, G = timed(dd, X, args.repeats)
        ref_first, t_ref, R = timed(reference_grad_batch, X, args.repeats)
        err = float(np.abs(G - R).max())
        spot = float(np.abs(R[0] - analytic_grad(X[0])).max())
        if err > 1e-9 or spot > 1e-9:
            notes.append(f"n={n}: diffdsl and reference differ by {err:.1e} (reference vs "
                         f"analytic {spot:.1e})")
        print(f"n={n}: diffdsl first {first:.2f} s, then {t_cpu:.3f} s; reference first "
              f"{ref_first:.2f} s, then {t_ref:.3f} s", file=log)

        prog_np = diffdsl.compile(det_source(n), backend="numpy")

        def interp(X, prog_np=prog_np):
            return prog_np.grad(A=X)["A"]

        _, t_np, G_np = timed(interp, X, max(1, args.repeats // 2))
        err = float(np.abs(G_np - R).max())
        if err > 1e-9:
            notes.append(f"n={n}: numpy interpreter differs from the reference by {err:.1e}")
        del G, R, G_np

        t_jax = jax_first = None
        if use_jax:
            res = run_worker([os.path.abspath(__file__), "--worker", "jax", "--n", str(n),
                              "--rows", str(args.rows), "--repeats", str(args.repeats),
                              "--seed", str(args.seed)], timeout=args.jax_timeout)
            print(f"n={n}: JAX {res}", file=log)
            if "error" in res:
                notes.append(f"JAX n={n}: {res['error']}")
            else:
                t_jax, jax_first = res["seconds"], res["first"]
                if res["grad_error"] > 1e-9:
                    notes.append(f"n={n}: JAX differs from the reference by "
                                 f"{res['grad_error']:.1e}")
        r = args.rows
        rows.append([n, f"{nodes:,}", f"{r:,}", fmt_rate(r / t_cpu), fmt_s(first, 2),
                     fmt_rate(r / t_np), fmt_rate(r / t_ref), fmt_s(ref_first, 2),
                     fmt_rate(t_jax and r / t_jax), fmt_s(jax_first, 2),
                     f"{t_cpu / t_ref:.2f}"])
        del X

    print(f"batched gradients of det (by minors) per second, one call per batch; median of "
          f"{args.repeats} calls after the first")
    print(f"machine: {machine()}; Numba threads {numba.get_num_threads()}, threading layer "
          f"{numba.threading_layer()}")
    if not use_jax:
        notes.append("JAX not measured (not installed or --no-jax)")
    headers = ["n", "grad nodes", "rows", "diffdsl cpu", "first call s", "numpy interp",
               "reference", "ref first s", "JAX vmap", "JAX first s", "cpu/ref time"]
    print(table(headers, rows, markdown=args.markdown))
    for note in notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
