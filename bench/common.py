"""Shared pieces of the benchmarks in this folder.

The determinant by minors in every system we compare against, the hand-written Numba
reference, the timing protocol, tables (plain or Markdown), the machine's description and a
helper that runs a measurement in a subprocess with a time limit.

JAX and PyTorch are optional: `have("jax")` says whether one can be imported, and the
functions that need one import it when called.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from lowering import SOURCE
from numba import get_num_threads, njit, prange


def det_source(n: int) -> str:
    """The recursive determinant by minors of bench/lowering.py, for an n x n input."""
    return SOURCE.format(n=n)


# ---------------------------------------------------------------------------------------------
# The hand-written reference: the gradient of the determinant by minors, sub-minors memoised.
#
# D[S] is the determinant of the square sub-matrix made of the last popcount(S) rows and the
# columns in the bit set S, expanded along its first row:
#     D[S] = sum over c in S, at position p in S, of (-1)^p * A[n - |S|, c] * D[S - {c}],
# with D[{}] = 1; the determinant is D[all columns]. That is exactly what expansion by minors
# computes once equal sub-minors are shared (n * 2^(n-1) multiply-adds, no LU). The reverse
# pass walks the same states backwards, sending the adjoint of D[S] to A[n - |S|, c] and to
# D[S - {c}]. Masks in increasing order are a topological order (S - {c} < S), so both passes
# are plain loops; the set bits of S are visited lowest first with `m & -m`.
# ---------------------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _tables(n, count, pos):
    """count[S] = popcount(S); pos[1 << c] = c."""
    count[0] = 0
    for S in range(1, 1 << n):
        count[S] = count[S >> 1] + (S & 1)
    for c in range(n):
        pos[1 << c] = c


@njit(cache=True, nogil=True)
def _det_grad_into(A, G, D, Dbar, count, pos):
    n = A.shape[0]
    full = (1 << n) - 1
    D[0] = 1.0
    for S in range(1, full + 1):
        r = n - count[S]
        acc = 0.0
        sign = 1.0
        m = S
        while m:
            low = m & (-m)
            acc += sign * A[r, pos[low]] * D[S ^ low]
            sign = -sign
            m ^= low
        D[S] = acc
    for S in range(full):
        Dbar[S] = 0.0
    Dbar[full] = 1.0
    for i in range(n):
        for j in range(n):
            G[i, j] = 0.0
    for S in range(full, 0, -1):
        b = Dbar[S]
        r = n - count[S]
        sign = 1.0
        m = S
        while m:
            low = m & (-m)
            c = pos[low]
            T = S ^ low
            G[r, c] += sign * D[T] * b
            Dbar[T] += sign * A[r, c] * b
            sign = -sign
            m ^= low
    return D[full]


@njit(cache=True, nogil=True)
def reference_grad(A):
    """Gradient of det(A) (by minors, memoised) for one square matrix: a new array."""
    n = A.shape[0]
    states = 1 << n
    count = np.empty(states, np.int32)
    pos = np.zeros(states, np.int32)
    _tables(n, count, pos)
    G = np.empty((n, n))
    _det_grad_into(A, G, np.empty(states), np.empty(states), count, pos)
    return G


@njit(cache=True, nogil=True, parallel=True)
def reference_grad_batch(X):
    """Gradients for a batch X of shape (rows, n, n), rows spread over threads with prange.

    The rows are cut into a few chunks per thread; each chunk allocates its scratch once.
    """
    rows, n = X.shape[0], X.shape[1]
    states = 1 << n
    count = np.empty(states, np.int32)
    pos = np.zeros(states, np.int32)
    _tables(n, count, pos)
    G = np.empty_like(X)
    chunks = min(rows, 8 * get_num_threads())
    for k in prange(chunks):
        D = np.empty(states)
        Dbar = np.empty(states)
        for r in range(k * rows // chunks, (k + 1) * rows // chunks):
            _det_grad_into(X[r], G[r], D, Dbar, count, pos)
    return G


def analytic_grad(A: np.ndarray) -> np.ndarray:
    """det(A) * inv(A)^T: the gradient of the determinant, an independent check."""
    return np.linalg.det(A) * np.linalg.inv(A).T


def check_reference(sizes, tol: float = 1e-9, seed: int = 0) -> float:
    """Check the reference against the analytic gradient; returns the largest error."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for n in sizes:
        for _ in range(3):
            A = rng.uniform(0.0, 1.0, (n, n))
            err = float(np.abs(reference_grad(A) - analytic_grad(A)).max())
            if not err <= tol:
                raise AssertionError(f"reference gradient wrong at n={n}: error {err:.2e}")
            worst = max(worst, err)
        X = rng.uniform(0.0, 1.0, (4, n, n))
        G = reference_grad_batch(X)
        for r in range(4):
            err = float(np.abs(G[r] - analytic_grad(X[r])).max())
            if not err <= tol:
                raise AssertionError(f"batched reference wrong at n={n}: error {err:.2e}")
    return worst


# ---------------------------------------------------------------------------------------------
# The determinant by minors as users of JAX and PyTorch write it: plain recursion, no memo.
# ---------------------------------------------------------------------------------------------

def scratch_cache() -> None:
    """Point DIFFDSL_CACHE_DIR at a new empty folder (removed at exit) unless it is set."""
    if "DIFFDSL_CACHE_DIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix="diffdsl-bench-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ["DIFFDSL_CACHE_DIR"] = folder


def have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def jax_det():
    """det_by_minors over jax.numpy (float64), recursive; tracing it unrolls all n! terms."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def minor(M, j):
        return jnp.concatenate([M[1:, :j], M[1:, j + 1:]], axis=1)

    def det_by_minors(M):
        n = M.shape[0]
        if n == 1:
            return M[0, 0]
        total = 0.0
        for j in range(n):
            total = total + (-1) ** j * M[0, j] * det_by_minors(minor(M, j))
        return total

    return det_by_minors


def torch_det():
    """The same recursion over torch tensors, as the forum posts write it."""
    import torch

    def minor(M, j):
        return torch.cat((M[1:, :j], M[1:, j + 1:]), dim=1)

    def det_by_minors(M):
        n = M.shape[0]
        if n == 1:
            return M[0, 0]
        total = 0.0
        for j in range(n):
            total = total + (-1) ** j * M[0, j] * det_by_minors(minor(M, j))
        return total

    return det_by_minors


def torch_grad_fn():
    """A function x (numpy) -> gradient (numpy), re-recording PyTorch's graph every call."""
    import torch
    det = torch_det()

    def grad(x):
        A = torch.tensor(x, requires_grad=True)
        det(A).backward()
        return A.grad.numpy()

    return grad


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------

def per_call(fn, draw, rounds: int = 5, target: float = 0.2, max_reps: int = 200_000,
             warm=None) -> dict:
    """Median seconds per call of `fn(x)` over `rounds` rounds of new inputs.

    `draw(k)` returns k inputs (an array whose first axis is k), all drawn before any timing.
    Each round runs enough calls to last about `target` seconds (at least one), each on its
    own input; the loop over a prepared list is inside the timed region, input drawing is not.
    """
    first = draw(1)[0] if warm is None else warm
    fn(first)
    start = time.perf_counter()
    calls = 0
    while True:
        fn(first)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min(0.05, target / 4) or calls >= 1000:
            break
    estimate = elapsed / calls
    reps = max(1, min(max_reps, math.ceil(target / estimate)))
    X = draw(rounds * reps)
    times = []
    for r in range(rounds):
        xs = list(X[r * reps:(r + 1) * reps])
        start = time.perf_counter()
        for x in xs:
            fn(x)
        times.append((time.perf_counter() - start) / reps)
    return {"seconds": statistics.median(times), "reps": reps, "rounds": rounds,
            "spread": (min(times), max(times))}


def uniform_draw(n: int, seed: int):
    """`draw(k)`: k new uniform(0, 1) n x n matrices from a generator seeded once."""
    rng = np.random.default_rng(seed)

    def draw(k):
        return rng.uniform(0.0, 1.0, (k, n, n))

    return draw


# ---------------------------------------------------------------------------------------------
# Subprocess workers, tables, machine
# ---------------------------------------------------------------------------------------------

def run_worker(argv: list[str], timeout: float, env: dict | None = None) -> dict:
    """Run `python argv...`, which prints one JSON object on its last stdout line.

    Returns that object, or {"error": why} on a timeout or failure.
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                              timeout=timeout, env=full_env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {done.returncode}: {' | '.join(tail)}"}
    return json.loads(lines[-1])


def fmt_rate(x) -> str:
    """Calls per second for a table cell; '-' when not measured."""
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def fmt_s(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table(headers: list[str], rows: list[list], markdown: bool = False,
          left: tuple = ()) -> str:
    """A table as text: aligned columns, or Markdown. Columns numbered in `left` align left."""
    cells = [[str(c) for c in row] for row in rows]
    if markdown:
        out = ["| " + " | ".join(headers) + " |",
               "|" + "|".join(":---" if k in left else "---:" for k in range(len(headers)))
               + "|"]
        out += ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join(out)
    widths = [max(len(h), *(len(r[k]) for r in cells)) if cells else len(h)
              for k, h in enumerate(headers)]

    def line(row):
        return "  ".join(c.ljust(w) if k in left else c.rjust(w)
                         for k, (c, w) in enumerate(zip(row, widths, strict=True)))

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def machine() -> str:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import numba
    load = ""
    if hasattr(os, "getloadavg"):
        load = "; load average %.2f" % os.getloadavg()[0]
    return (f"{os.cpu_count()} CPUs ({model}); Python {platform.python_version()}, "
            f"NumPy {np.__version__}, Numba {numba.__version__}{load}")


def timed(fn, X, repeats: int) -> tuple[float, float, np.ndarray]:
    """(first call s, median of the following calls s, result of the first call)."""
    start = time.perf_counter()
    result = fn(X)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(X)
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), result


def run_child(code: str, args: list[str], path: str | None = None,
              timeout: float = 1800) -> dict:
    """Run `python -c code *args GRADS` in a fresh process with an empty kernel cache (and
    the diffdsl at `path`, if given) from a temporary folder (`python -c` puts the working
    directory first on the path, which would import this checkout's diffdsl over
    PYTHONPATH's): its last line of output as JSON, with "grad" the arrays it saved to
    GRADS (an .npz)."""
    # The empty cache lives in the run's own temporary folder, removed with it.
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, DIFFDSL_CACHE_DIR=os.path.join(out, "cache"))
        if path:
            env["PYTHONPATH"] = path
        grads = os.path.join(out, "g.npz")
        done = subprocess.run([sys.executable, "-c", code, *args, grads], env=env,
                              capture_output=True, text=True, timeout=timeout, cwd=out)
        if done.returncode:
            raise SystemExit(done.stderr[-2000:])
        found = json.loads(done.stdout.strip().splitlines()[-1])
        with np.load(grads) as g:
            found["grad"] = {k: g[k] for k in g.files}
    return found
