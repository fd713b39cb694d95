"""Gradients per second of the determinant by minors, one matrix per call, n = 4 to 11.

    python bench/det_grad.py [--quick] [--markdown] [--min 4] [--max 11]

The det_minor protocol of CppAD's speed tests and gradbench's `det` eval: every repetition
draws a new uniform(0, 1) n x n matrix (all drawn before the timed region), and only the
gradient of det (expanded by minors) with respect to the matrix is timed. A timing round runs
enough repetitions to last about 0.2 s; the table gives the median of the rounds. Columns:

  diffdsl cpu    `prog.grad(A=x)`, the public Python call, compiled before timing
  (kernel only)  the compiled kernel's `point(x)` alone, without `grad`'s Python work
  numpy interp   the same with backend="numpy", diffdsl's reference interpreter
  reference      hand-written Numba gradient with memoised sub-minors (bench/common.py),
                 called from Python per matrix; checked against det(A) inv(A)^T first
  JAX jit        jax.jit(jax.grad(det_by_minors)), plain recursion over jax.numpy; tracing
                 unrolls n! terms, so large n is skipped when its compile would pass the budget
  torch eager    PyTorch re-recording its graph every call (recursion, .backward()); large n
                 is skipped when one gradient would take longer than --torch-limit seconds

JAX and PyTorch run in subprocesses with a time limit (their thread pools stay out of the
other columns); a column whose framework is not installed prints "-". "compile" is
diffdsl.compile plus the first gradient, in this process, with an empty kernel cache. On the
tape path that is lowering, autodiff and building the tape arrays: the tape interpreter is
compiled once for all graphs and kept by Numba's cache beside diffdsl's package (see
bench/compile.py for cold numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from common import (
    analytic_grad,
    check_reference,
    det_source,
    fmt_rate,
    fmt_s,
    have,
    machine,
    per_call,
    reference_grad,
    run_worker,
    scratch_cache,
    table,
    uniform_draw,
)


def worker(args) -> None:
    """Measure one framework at one n in this process; print a JSON line."""
    n = args.n
    x0 = np.random.default_rng(1).uniform(0.0, 1.0, (n, n))
    if args.worker == "jax":
        import jax
        from common import jax_det
        jitted = jax.jit(jax.grad(jax_det()))

        def fn(x):
            return np.asarray(jitted(x))
    else:
        from common import torch_grad_fn
        fn = torch_grad_fn()
    start = time.perf_counter()
    g = fn(x0)  # trace and compile (JAX), or one eager pass (PyTorch)
    compile_s = time.perf_counter() - start
    err = float(np.abs(g - analytic_grad(x0)).max())
    timing = per_call(fn, uniform_draw(n, args.seed + n), args.rounds, args.target)
    print(json.dumps({"seconds": timing["seconds"], "reps": timing["reps"],
                      "compile": compile_s, "grad_error": err}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min", type=int, default=4)
    ap.add_argument("--max", type=int, default=11)
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds (median reported)")
    ap.add_argument("--target", type=float, default=0.2, help="seconds per timing round")
    ap.add_argument("--quick", action="store_true",
                    help="3 rounds of 0.1 s, tighter limits for JAX and PyTorch")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--jax-budget", type=float, default=150.0,
                    help="seconds allowed for one n in JAX (trace, compile and timing)")
    ap.add_argument("--torch-limit", type=float, default=4.0,
                    help="skip PyTorch where one gradient is predicted to take longer (s)")
    ap.add_argument("--numpy-limit", type=float, default=0.5,
                    help="skip the numpy interpreter where one gradient would take longer (s)")
    ap.add_argument("--worker", choices=["jax", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.target = 3, 0.1
        args.jax_budget = min(args.jax_budget, 40.0)
        args.torch_limit = min(args.torch_limit, 1.0)
    if args.worker:
        worker(args)
        return

    # An empty kernel cache, so "compile" is a cold build of each straight-line kernel.
    scratch_cache()
    import diffdsl
    from diffdsl.backends import cpu

    sizes = list(range(args.min, args.max + 1))
    worst = check_reference(sizes)
    log = sys.stderr
    print(f"reference checked against det(A) inv(A)^T at n = {sizes[0]}..{sizes[-1]}: "
          f"largest error {worst:.1e}", file=log)
    use_jax = have("jax") and not args.no_jax
    use_torch = have("torch") and not args.no_torch
    common_argv = [os.path.abspath(__file__), "--rounds", str(args.rounds), "--target",
                   str(args.target), "--seed", str(args.seed)]

    rows = []
    notes = []
    last_numpy = last_torch = last_jax = None
    for n in sizes:
        src = det_source(n)
        draw_seed = args.seed + n
        x0 = np.random.default_rng(1).uniform(0.0, 1.0, (n, n))

        start = time.perf_counter()
        prog = diffdsl.compile(src, backend="cpu")
        g = prog.grad(A=x0)["A"]
        compile_s = time.perf_counter() - start
        err = float(np.abs(g - analytic_grad(x0)).max())
        graph = prog.derivative("grad")
        path = "tape" if cpu.uses_tape(graph) else "straight"
        built = prog.stats.kernels_built
        if err > 1e-9:
            notes.append(f"n={n}: diffdsl cpu gradient off by {err:.1e}")

        def dd(x, prog=prog):
            return prog.grad(A=x)

        t_cpu = per_call(dd, uniform_draw(n, draw_seed), args.rounds, args.target)["seconds"]
        if prog.stats.kernels_built != built:
            notes.append(f"n={n}: kernels were rebuilt while timing")
        kernel = prog.kernel(graph)
        outs = [np.empty(port.shape) for port in graph.outputs.values()]

        def point(x, kernel=kernel, outs=outs):
            kernel.point([x], outs)

        t_point = per_call(point, uniform_draw(n, draw_seed), args.rounds,
                           args.target)["seconds"]
        t_ref = per_call(reference_grad, uniform_draw(n, draw_seed), args.rounds,
                         args.target)["seconds"]
        print(f"n={n}: {len(graph.nodes)} nodes ({path}), compile {compile_s:.2f} s, "
              f"cpu {t_cpu * 1e6:.1f} us, reference {t_ref * 1e6:.2f} us", file=log)

        t_np = None
        if last_numpy is None or last_numpy * 2.5 <= args.numpy_limit:
            prog_np = diffdsl.compile(src, backend="numpy")
            err = float(np.abs(prog_np.grad(A=x0)["A"] - analytic_grad(x0)).max())
            if err > 1e-9:
                notes.append(f"n={n}: numpy interpreter gradient off by {err:.1e}")

            def interp(x, prog_np=prog_np):
                return prog_np.grad(A=x)

            t_np = last_numpy = per_call(interp, uniform_draw(n, draw_seed), args.rounds,
                                         args.target)["seconds"]

        t_jax = jax_compile = None
        if use_jax:
            predicted = None if last_jax is None else last_jax * n * 2
            if predicted is not None and predicted > args.jax_budget:
                if not any(s.startswith("JAX") for s in notes):
                    notes.append(f"JAX skipped from n={n}: the compile at n={n - 1} took "
                                 f"{last_jax:.0f} s and grows faster than n-fold per step "
                                 f"(budget {args.jax_budget:.0f} s)")
            else:
                res = run_worker(common_argv + ["--worker", "jax", "--n", str(n)],
                                 timeout=args.jax_budget)
                if "error" in res:
                    notes.append(f"JAX n={n}: {res['error']}")
                    last_jax = float("inf")
                else:
                    t_jax, jax_compile = res["seconds"], res["compile"]
                    last_jax = jax_compile
                    if res["grad_error"] > 1e-9:
                        notes.append(f"n={n}: JAX gradient off by {res['grad_error']:.1e}")
                print(f"n={n}: JAX {res}", file=log)

        t_torch = None
        if use_torch:
            predicted = None if last_torch is None else last_torch * n
            if predicted is not None and predicted > args.torch_limit:
                if not any(s.startswith("PyTorch") for s in notes):
                    notes.append(f"PyTorch skipped from n={n}: one gradient would take about "
                                 f"{predicted:.1f} s (limit {args.torch_limit:g} s)")
            else:
                budget = 60 + (predicted or 1.0) * (args.rounds + 3) * 3
                res = run_worker(common_argv + ["--worker", "torch", "--n", str(n)],
                                 timeout=budget)
                if "error" in res:
                    notes.append(f"PyTorch n={n}: {res['error']}")
                    last_torch = float("inf")
                else:
                    t_torch = last_torch = res["seconds"]
                    if res["grad_error"] > 1e-9:
                        notes.append(f"n={n}: PyTorch gradient off by {res['grad_error']:.1e}")
                print(f"n={n}: PyTorch {res}", file=log)

        rows.append([n, f"{len(graph.nodes):,}", path, fmt_s(compile_s, 2), fmt_rate(1 / t_cpu),
                     fmt_rate(1 / t_point), fmt_rate(t_np and 1 / t_np), fmt_rate(1 / t_ref),
                     fmt_rate(t_jax and 1 / t_jax), fmt_s(jax_compile, 1),
                     fmt_rate(t_torch and 1 / t_torch), f"{t_cpu / t_ref:.2f}"])

    headers = ["n", "grad nodes", "path", "compile s", "diffdsl cpu", "(kernel only)",
               "numpy interp",
               "reference", "JAX jit", "JAX compile s", "torch eager", "cpu/ref time"]
    print(f"gradients of det (by minors) per second, one new matrix per call; "
          f"median of {args.rounds} rounds of ~{args.target:g} s")
    print(f"machine: {machine()}")
    if not use_jax:
        notes.append("JAX not measured (not installed or --no-jax)")
    if not use_torch:
        notes.append("PyTorch not measured (not installed or --no-torch)")
    print(table(headers, rows, markdown=args.markdown, left=(2,)))
    for note in notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
