"""Array programs written the NumPy way over n rows of data (inputs read in place, kept as
loops over the rows): time to a first gradient and a call, graph size and peak memory, each
(program, n) in a fresh process with an empty cache, beside NumPy by hand and JAX.

    python bench/rows.py [--sizes 256 100000 1000000] [--calls 20] [--programs mlp lse ...]
                         [--threads 1]

Programs, with the gradient by every input:
  mlp        tanh(X @ W1 + b1) then a mean squared error; X[n, 32], 32 hidden units
  logreg     mean(softplus(z) - y * z) with z = X @ w + b; X[n, 10], y[n] in {0, 1}
  lse        logsumexp(x), x[n] (GradBench's lse)
  gmm_diag   log-likelihood of 5 diagonal Gaussians in 4 dimensions at n points:
             sum(logsumexp([column for each component], axis=0)), a column of n values
             per component
  gmm_points the same function (gmm.dd's sum, without its terms in alpha alone) written as
             examples/data/gmm.dd writes it: a generator over the points, each point's
             logsumexp of a list of its 5 components

The first gradient is the whole process: Python's start, imports, compiling and the first
call (making the data not counted). Memory is the process's peak resident set above that of a
process that imports NumPy and diffdsl; it is taken before the references run. The references
run in the same process afterwards: NumPy vectorised with the gradient derived by hand (the
strongest we could write: matrix products, no (n, k, d) temporaries), and JAX's
jax.jit(jax.grad(f)) in float64 when JAX imports, its first call including tracing and
compiling (its import timed apart). Errors are max |g - ref| / max |ref| over each input's
gradient, the worst input, against NumPy's; a call is the median of --calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

GMM_HEAD = """input X[{n}, 4]
input alpha[5]
input mu[5, 4]
input q[5, 4]
"""
SOURCES = {
    "mlp": """input X[{n}, 32]
input y[{n}]
input W1[32, 32]
input b1[32]
input w2[32]
input b2
h = tanh(X @ W1 + b1)
output loss = mean((h @ w2 + b2 - y) ** 2)
""",
    "logreg": """input X[{n}, 10]
input w[10]
input b
input y[{n}]
z = X @ w + b
output loss = mean(softplus(z) - y * z)
""",
    "lse": """input x[{n}]
output lse = logsumexp(x)
""",
    "gmm_diag": GMM_HEAD + """def column(X, a, m, s) =
    a + sum(s) - 0.5 * sum((exp(s) * (X - m)) ** 2, axis=1)
output ll = sum(logsumexp([column(X, alpha[c], mu[c], q[c]) for c in range(5)], axis=0))
""",
    "gmm_points": GMM_HEAD + """def component(x, a, m, s) =
    a + sum(s) - 0.5 * sum((exp(s) * (x - m)) ** 2)
output ll = sum(logsumexp([component(X[i], alpha[c], mu[c], q[c]) for c in range(5)])
                for i in range({n}))
""",
}
NAMES = {"mlp": "MLP, X[n, 32], 32 hidden", "logreg": "logistic regression, X[n, 10]",
         "lse": "logsumexp, x[n]", "gmm_diag": "GMM diagonal, k = 5, d = 4, columns",
         "gmm_points": "GMM diagonal, generator over points"}


def make_data(kind: str, n: int, np) -> dict:
    """The inputs, float64, drawn once; scaled so that tanh and exp stay in their useful range."""
    rng = np.random.default_rng(0)
    if kind == "mlp":
        return {"X": rng.normal(size=(n, 32)), "y": rng.normal(size=n),
                "W1": rng.normal(size=(32, 32)) / 32 ** 0.5, "b1": 0.1 * rng.normal(size=32),
                "w2": rng.normal(size=32) / 32 ** 0.5, "b2": np.float64(rng.normal())}
    if kind == "logreg":
        return {"X": rng.normal(size=(n, 10)), "w": rng.normal(size=10) / 10 ** 0.5,
                "b": np.float64(rng.normal()), "y": (rng.random(n) < 0.5).astype(np.float64)}
    if kind == "lse":
        return {"x": rng.normal(size=n)}
    return {"X": rng.normal(size=(n, 4)), "alpha": rng.normal(size=5),
            "mu": rng.normal(size=(5, 4)), "q": 0.1 * rng.normal(size=(5, 4))}


def numpy_grad(kind: str, v: dict, np):
    """A function () -> {input: gradient}: NumPy, vectorised, the adjoints derived by hand."""
    if kind == "mlp":
        X, y, W1, b1, w2, b2 = (v[k] for k in ("X", "y", "W1", "b1", "w2", "b2"))

        def grad():
            H = np.tanh(X @ W1 + b1)
            dp = (2.0 / len(y)) * (H @ w2 + b2 - y)
            dZ = np.outer(dp, w2)
            dZ *= 1.0 - H * H
            return {"X": dZ @ W1.T, "y": -dp, "W1": X.T @ dZ, "b1": dZ.sum(axis=0),
                    "w2": H.T @ dp, "b2": dp.sum()}
    elif kind == "logreg":
        X, w, b, y = v["X"], v["w"], v["b"], v["y"]

        def grad():
            z = X @ w + b
            dz = (1.0 / (1.0 + np.exp(-z)) - y) / len(y)
            return {"X": np.outer(dz, w), "w": X.T @ dz, "b": dz.sum(), "y": -z / len(y)}
    elif kind == "lse":
        x = v["x"]

        def grad():
            e = np.exp(x - x.max())
            return {"x": e / e.sum()}
    else:
        X, alpha, mu, q = v["X"], v["alpha"], v["mu"], v["q"]

        def grad():
            # column c at row i: alpha_c + sum(q_c) - 0.5 * sum_j P_cj (x_ij - mu_cj)^2, the
            # square expanded into products with X and X^2 (P = exp(2 q))
            P = np.exp(2.0 * q)
            Pm = P * mu
            A = X @ Pm.T - 0.5 * (X * X) @ P.T
            A += alpha + q.sum(axis=1) - 0.5 * (Pm * mu).sum(axis=1)
            R = np.exp(A - A.max(axis=1, keepdims=True))
            R /= R.sum(axis=1, keepdims=True)  # each row's softmax: the adjoint of its column
            Rs, RX, RX2 = R.sum(axis=0), R.T @ X, R.T @ (X * X)
            return {"X": R @ Pm - X * (R @ P), "alpha": Rs,
                    "mu": P * RX - Pm * Rs[:, None],
                    "q": Rs[:, None] - P * (RX2 - 2.0 * mu * RX + mu * mu * Rs[:, None])}
    return grad


def jax_function(kind: str):
    """(f, argument order) in jax.numpy, written as a JAX user writes it."""
    import jax
    import jax.numpy as jnp
    if kind == "mlp":
        def f(X, y, W1, b1, w2, b2):
            h = jnp.tanh(X @ W1 + b1)
            return jnp.mean((h @ w2 + b2 - y) ** 2)
        return f, ("X", "y", "W1", "b1", "w2", "b2")
    if kind == "logreg":
        def f(X, w, b, y):
            z = X @ w + b
            return jnp.mean(jax.nn.softplus(z) - y * z)
        return f, ("X", "w", "b", "y")
    if kind == "lse":
        return jax.nn.logsumexp, ("x",)

    def f(X, alpha, mu, q):
        d = jnp.exp(q)[None] * (X[:, None, :] - mu[None])
        cols = alpha + q.sum(axis=1) - 0.5 * jnp.sum(d * d, axis=-1)
        return jnp.sum(jax.nn.logsumexp(cols, axis=1))
    return f, ("X", "alpha", "mu", "q")


def rel_error(got: dict, want: dict, np) -> float:
    return max(float(np.max(np.abs(np.asarray(got[k]) - want[k])))
               / max(float(np.max(np.abs(want[k]))), 1e-300) for k in want)


def median_call(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def child(kind: str, n: int, calls: int, launched: float) -> dict:
    """Runs in the fresh process: diffdsl first (timed from the parent's launch), then the
    references."""
    started = time.time() - launched
    import resource

    import numpy as np

    import diffdsl
    imported = time.time() - launched
    prog = diffdsl.compile(SOURCES[kind].format(n=n))
    compiled = time.time() - launched
    t = time.time()
    values = make_data(kind, n, np)
    making = time.time() - t
    grad = prog.grad(values)
    first = time.time() - launched - making
    per_call = median_call(lambda: prog.grad(values), calls)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    by_hand = numpy_grad(kind, values, np)
    want = by_hand()
    out = {"start": started, "imports": imported - started, "compile": compiled - imported,
           "first": first, "per_call": per_call, "nodes": len(prog.graph.nodes), "rss": rss,
           "data": 2 * sum(np.asarray(x).nbytes for x in values.values()),
           "err": rel_error(grad, want, np), "numpy": median_call(by_hand, calls)}
    try:
        t = time.perf_counter()
        import jax
    except ImportError:
        return out
    jax.config.update("jax_enable_x64", True)
    out["jax_import"] = time.perf_counter() - t
    f, order = jax_function(kind)
    args = [jax.device_put(values[k]) for k in order]
    t = time.perf_counter()
    g = jax.jit(jax.grad(f, argnums=tuple(range(len(order)))))
    jax.block_until_ready(g(*args))
    out["jax_first"] = time.perf_counter() - t
    out["jax"] = median_call(lambda: jax.block_until_ready(g(*args)), calls)
    out["jax_err"] = rel_error(dict(zip(order, g(*args), strict=True)), want, np)
    return out


def thread_env(threads: int | None) -> dict:
    """The variables that hold OpenBLAS, OpenMP, diffdsl and XLA to `threads` (None: each
    library's default). On a busy machine BLAS's threads spin against the other work: NumPy's
    X.T @ H at n = 2,000 took 51 ms on two threads where it takes 0.15 ms on one."""
    if threads is None:
        return {}
    env = {k: str(threads) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                      "MKL_NUM_THREADS", "DIFFDSL_NUM_THREADS")}
    if threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    return env


def run_case(kind: str, n: int, calls: int, timeout: float, threads: int | None) -> dict:
    from common import run_worker
    with tempfile.TemporaryDirectory() as cache:
        return run_worker([str(Path(__file__).resolve()), "--child", kind, str(n), str(calls),
                           repr(time.time())], timeout,
                          env={"DIFFDSL_CACHE_DIR": cache, **thread_env(threads)})


def baseline_rss() -> int:
    """Peak memory of a process that imports NumPy and diffdsl and does nothing else."""
    import subprocess
    done = subprocess.run([sys.executable, "-c", "import resource, numpy, diffdsl; "
                           "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout) * 1024


def ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.3f} ms"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, n, calls, launched = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
            float(sys.argv[5])
        print(json.dumps(child(kind, n, calls, launched)))
        return
    sys.path.insert(0, str(HERE))
    from common import machine, table
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 100_000, 1_000_000])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--programs", nargs="+", choices=list(SOURCES), default=list(SOURCES))
    ap.add_argument("--timeout", type=float, default=600, help="seconds a case may take")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for BLAS, XLA and diffdsl (default: each library's own)")
    args = ap.parse_args()
    base = baseline_rss()
    rows = []
    for kind in args.programs:
        for n in args.sizes:
            r = run_case(kind, n, args.calls, args.timeout, args.threads)
            print(json.dumps({"case": kind, "n": n, **r}), file=sys.stderr)
            if "error" in r:
                rows.append([NAMES[kind], f"{n:,}", r["error"]] + ["-"] * 10)
                continue
            jax_ratio = f"{r['per_call'] / r['jax']:.2f}" if "jax" in r else "-"
            jax_err = f"{r['jax_err']:.1e}" if "jax_err" in r else "-"
            rows.append([NAMES[kind], f"{n:,}", f"{r['nodes']:,}", f"{r['first']:.2f} s",
                         ms(r["per_call"]), ms(r["numpy"]), f"{r['per_call'] / r['numpy']:.2f}",
                         "-" if "jax_first" not in r else f"{r['jax_first']:.2f} s",
                         ms(r.get("jax")), jax_ratio,
                         f"{(r['rss'] - base) / 2**20:,.0f} MB", f"{r['err']:.1e}", jax_err])
    threads = "each library's default" if args.threads is None else args.threads
    print(f"{machine()}; threads: {threads}; a process importing diffdsl peaks at "
          f"{base / 2**20:.0f} MB")
    print(table(["program", "rows n", "nodes", "first gradient (whole process)", "per call",
                 "NumPy by hand", "ratio to NumPy", "JAX first call (jit)", "JAX per call",
                 "ratio to JAX", "peak memory above imports", "max rel. error",
                 "JAX's error"], rows, markdown=True, left=(0,)))


if __name__ == "__main__":
    main()
