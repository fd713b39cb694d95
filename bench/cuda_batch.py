"""Batched gradients of det (by minors) on a GPU: diffdsl cuda against cpu and JAX.

    python bench/cuda_batch.py [--rows 1000000 10000000] [--sizes 3 5 8]
                               [--paths straight tape] [--repeats 5] [--dtype float64]
                               [--no-cpu] [--no-jax] [--quick] [--markdown] [--dry-run]

Needs a real CUDA GPU: without one (no driver, no device, or only Numba's simulator, which
runs kernels as Python) it says so and exits 0 having measured nothing.

For each size n and row count, X (rows, n, n) is drawn uniform(0, 1) once. Columns:
  cuda host      `Kernel.run([X], rows)` from NumPy to NumPy: copies X to the GPU and the
                 gradient back (what `prog.grad(A=X)` pays on the cuda backend)
  cuda device    the same with X already on the GPU and the results left there (synchronised)
  api            `diffdsl.compile(src, backend="cuda").grad(A=X)`, when api.py knows "cuda"
  cpu            `diffdsl.compile(src, backend="cpu").grad(A=X)` on this machine's cores
  JAX            `jit(vmap(grad(det_by_minors)))` on the same GPU, in a subprocess (its memory
                 pool is its own), with X on the GPU (device) and from NumPy (host), when JAX
                 with a CUDA backend is installed
Each path of diffdsl's CUDA kernel is measured: "straight" (the generated module) and "tape"
(the device interpreter), whatever `cuda.TAPE_THRESHOLD` would pick, so the threshold can be
set from the numbers. Each column: the first call (compiling what it needs; Numba's disk cache
may hold the kernel from an earlier run), then the median of `--repeats` calls. The gradient
of the first 1,000 rows is checked against the hand-written reference of bench/common.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from functools import partial

import numpy as np
from common import timed

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # the repository, when diffdsl is not installed

CHECK_ROWS = 1000


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000],
                    help="batch sizes (matrices per call), 10^6 to 10^7 by default")
    ap.add_argument("--sizes", type=int, nargs="+", default=[3, 5, 8], help="n of det n x n")
    ap.add_argument("--paths", nargs="+", choices=["straight", "tape"],
                    default=["straight", "tape"], help="CUDA kernel paths to measure")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--threads-per-block", type=int, default=None,
                    help="override the kernel's launch configuration (default: the backend's)")
    ap.add_argument("--no-cpu", action="store_true", help="skip the CPU backend column")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--jax-timeout", type=float, default=600.0)
    ap.add_argument("--quick", action="store_true", help="100,000 rows, 3 repeats")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dry-run", action="store_true",
                    help="print what would be measured and exit, touching no GPU")
    ap.add_argument("--worker", choices=["jax"], help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.repeats = [min(min(args.rows), 100_000)], 3
    if any(r < 1 for r in args.rows) or any(n < 1 for n in args.sizes) or args.repeats < 1:
        ap.error("--rows, --sizes and --repeats take positive integers")
    return args


def find_gpu() -> tuple[str | None, str]:
    """(the GPU's name, "") or (None, why not). The simulator is not a GPU."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return None, "NUMBA_ENABLE_CUDASIM is set: Numba's CUDA simulator is not a GPU"
    try:
        from numba import cuda
    except Exception as exc:
        return None, f"numba.cuda cannot be imported ({exc})"
    if "simulator" in getattr(cuda.is_available, "__module__", ""):
        return None, "numba.cuda is the simulator, not a GPU"
    try:
        if not cuda.is_available():
            return None, "numba.cuda finds no usable CUDA GPU or driver"
        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
        return f"{name} (compute capability {device.compute_capability})", ""
    except Exception as exc:
        return None, f"the CUDA driver fails: {exc}"


def draw(rows: int, n: int, seed: int, dtype: str) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 1.0, (rows, n, n)).astype(dtype)


def grad_error(G: np.ndarray, X: np.ndarray) -> float:
    """Largest error of the first rows' gradients against the reference, relative to them."""
    from common import reference_grad_batch
    k = min(CHECK_ROWS, len(X))
    R = reference_grad_batch(np.asarray(X[:k], dtype=np.float64))
    G = np.asarray(G[:k], dtype=np.float64).reshape(R.shape)
    return float(np.abs(G - R).max() / max(1.0, np.abs(R).max()))


def tolerance(dtype: str) -> float:
    return 1e-9 if dtype == "float64" else 1e-3


# ---------------------------------------------------------------------------------------------
# JAX, in its own process
# ---------------------------------------------------------------------------------------------

def jax_worker(args) -> None:
    """jit(vmap(grad(det_by_minors))) on the GPU; prints one JSON line."""
    import jax
    from common import jax_det
    if jax.default_backend() != "gpu":
        print(json.dumps({"error": f"JAX runs on {jax.default_backend()}, not a GPU"}))
        return
    X = draw(args.rows[0], args.n, args.seed + args.n, args.dtype)
    fn = jax.jit(jax.vmap(jax.grad(jax_det())))
    Xd = jax.device_put(X)
    Xd.block_until_ready()

    def device(Xd):
        return fn(Xd).block_until_ready()

    def host(X):
        return np.asarray(fn(X))

    first, seconds, G = timed(device, Xd, args.repeats)
    _, seconds_host, _ = timed(host, X, max(1, args.repeats // 2))
    err = grad_error(np.asarray(G), X)
    print(json.dumps({"first": first, "seconds": seconds, "seconds_host": seconds_host,
                      "grad_error": err}))


def run_jax(args, n: int, rows: int) -> dict:
    from common import run_worker
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # leave the GPU's memory to the rest
    return run_worker([os.path.abspath(__file__), "--worker", "jax", "--n", str(n),
                       "--rows", str(rows), "--repeats", str(args.repeats),
                       "--seed", str(args.seed), "--dtype", args.dtype],
                      timeout=args.jax_timeout, env=env)


# ---------------------------------------------------------------------------------------------
# diffdsl
# ---------------------------------------------------------------------------------------------

def cuda_kernel(graph, dtype: str, path: str, tpb: int | None):
    from diffdsl.backends import cuda as backend
    from diffdsl.backends import emit
    if path == "tape":
        kernel = backend.Kernel(graph, dtype)
    else:
        key = graph.key()
        module = emit.module_in_memory(f"diffdsl_bench_{key[:24]}_{dtype}",
                                       backend.module_source(graph, dtype, key, "bench"))
        kernel = backend.Kernel(graph, dtype, module)
    if tpb:
        kernel.threads_per_block = tpb
    return kernel


def measure_cuda(kernel, X: np.ndarray, repeats: int) -> dict:
    from numba import cuda
    rows = X.shape[0]
    flat = X.reshape(rows, -1)

    def host(flat):
        return kernel.run([flat], rows)[1]  # outputs: value, d:A

    def device(flat_d):
        out = kernel.run([flat_d], rows)[1]
        cuda.synchronize()
        return out

    start = time.perf_counter()
    kernel.warm()  # compile (or load) on one row, so "first" below is the compile
    compile_s = time.perf_counter() - start
    first, seconds_host, G = timed(host, flat, repeats)
    flat_d = cuda.to_device(flat)
    _, seconds_device, G_d = timed(device, flat_d, repeats)
    err = max(grad_error(G, X), grad_error(G_d[:CHECK_ROWS].copy_to_host(), X))
    del flat_d, G_d
    return {"compile": compile_s, "first": first, "host": seconds_host,
            "device": seconds_device, "grad_error": err}


def grad_of(prog, X):
    return prog.grad(A=X)["A"]


def rate(rows: int, seconds):
    return None if seconds is None else rows / seconds


def ratio(a, b):
    return None if a is None or b is None else a / b


def fmt(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        jax_worker(args)
        return 0
    plan = (f"det by minors, n = {', '.join(map(str, args.sizes))}; rows "
            f"{', '.join(f'{r:,}' for r in args.rows)}; paths {' and '.join(args.paths)}; "
            f"{args.dtype}; {args.repeats} repeats; cpu {'no' if args.no_cpu else 'yes'}; "
            f"JAX {'no' if args.no_jax else 'if installed with a GPU'}")
    if args.dry_run:
        print(f"would measure: {plan}")
        return 0
    gpu, why = find_gpu()
    if gpu is None:
        print(f"cuda_batch: no CUDA GPU here ({why}); nothing measured.")
        return 0

    os.environ.setdefault("DIFFDSL_CACHE_DIR", tempfile.mkdtemp(prefix="diffdsl-bench-"))
    from common import det_source, fmt_rate, have, machine, table

    import diffdsl
    from diffdsl import api

    use_jax = have("jax") and not args.no_jax
    api_cuda = "cuda" in getattr(api, "BACKENDS", ())
    log = sys.stderr
    print(f"measuring: {plan}", file=log)
    tol = tolerance(args.dtype)
    rows_out, notes = [], []
    for n in args.sizes:
        src = det_source(n)
        graph = diffdsl.compile(src, backend="numpy").derivative("grad")
        kernels = {path: cuda_kernel(graph, args.dtype, path, args.threads_per_block)
                   for path in args.paths}
        cpu_prog = None if args.no_cpu else diffdsl.compile(src, backend="cpu",
                                                            dtype=args.dtype)
        api_prog = diffdsl.compile(src, backend="cuda", dtype=args.dtype) if api_cuda else None
        for r in args.rows:
            X = draw(r, n, args.seed + n, args.dtype)
            t_cpu = cpu_first = t_api = None
            if cpu_prog is not None:
                cpu_prog.grad(A=X[0])  # compile the kernel before the timing
                cpu_first, t_cpu, G = timed(partial(grad_of, cpu_prog), X, args.repeats)
                err = grad_error(G, X)
                if not err <= tol:
                    notes.append(f"n={n} rows={r}: cpu differs from the reference by {err:.1e}")
                del G
                print(f"n={n} rows={r:,}: cpu first {cpu_first:.2f} s, then {t_cpu:.3f} s",
                      file=log)
            if api_prog is not None:
                api_prog.grad(A=X[0])
                _, t_api, G = timed(partial(grad_of, api_prog), X, args.repeats)
                err = grad_error(G, X)
                if not err <= tol:
                    notes.append(f"n={n} rows={r}: api cuda differs by {err:.1e}")
                del G
            jax: dict = {}
            if use_jax:
                jax = run_jax(args, n, r)
                print(f"n={n} rows={r:,}: JAX {jax}", file=log)
                if "error" in jax:
                    notes.append(f"JAX n={n} rows={r}: {jax['error']}")
                    jax = {}
                elif not jax["grad_error"] <= tol:
                    notes.append(f"n={n} rows={r}: JAX differs from the reference by "
                                 f"{jax['grad_error']:.1e}")
            for path, kernel in kernels.items():
                res = measure_cuda(kernel, X, args.repeats)
                print(f"n={n} rows={r:,} {path}: {res}", file=log)
                if not res["grad_error"] <= tol:
                    notes.append(f"n={n} rows={r} {path}: cuda differs from the reference by "
                                 f"{res['grad_error']:.1e}")
                rows_out.append([
                    n, f"{len(graph.nodes):,}", f"{r:,}", path,
                    fmt_rate(r / res["host"]), fmt_rate(r / res["device"]),
                    fmt(res["compile"]), fmt_rate(rate(r, t_api)),
                    fmt_rate(rate(r, t_cpu)), fmt(cpu_first),
                    fmt_rate(rate(r, jax.get("seconds"))),
                    fmt_rate(rate(r, jax.get("seconds_host"))), fmt(jax.get("first")),
                    fmt(ratio(t_cpu, res["device"]), 1),
                    fmt(ratio(jax.get("seconds"), res["device"]), 1),
                ])
            del X

    import numba
    print(f"batched gradients of det (by minors) per second, one call per batch, {args.dtype}; "
          f"median of {args.repeats} calls after the first")
    print(f"GPU: {gpu}; numba.cuda {getattr(numba.cuda, 'implementation', '?')}, "
          f"Numba {numba.__version__}")
    print(f"host: {machine()}")
    if not use_jax:
        notes.append("JAX not measured (not installed or --no-jax)")
    if not api_cuda:
        notes.append('api column empty: diffdsl.compile(backend="cuda") is not wired yet')
    headers = ["n", "grad nodes", "rows", "path", "cuda host", "cuda device",
               "compile s", "api", "cpu", "cpu first s", "JAX device", "JAX host",
               "JAX first s", "cpu/cuda", "JAX/cuda"]
    print(table(headers, rows_out, markdown=args.markdown, left=(3,)))
    print("cpu/cuda and JAX/cuda: time ratios against cuda device (above 1: cuda is faster)")
    for note in notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
