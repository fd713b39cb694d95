"""The linear algebra builtins (issue 26) at n = 3, 10, 30: the time to build a program and
its gradient (lowering, autodiff, LLVM; an empty cache) and the time per call, value and
gradient, for one matrix and per row of a batch of 1,000, beside NumPy/SciPy (values; batched
where they take a stack of matrices) and JAX under jit in float64 (gradients).

    python bench/linalg.py [--sizes 3 10 30] [--only expm eigh ...] [--timeout 600]

Each case runs in its own process with its own cache folder, under a wall-clock timeout; a
case that passes the default limits (nodes, steps) says so instead of a time. Call times are
the best of five rounds (of 20 calls, 200 for NumPy's, 3 batches), builds are single runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

# builtin -> (program of A (n x n) and W (n x n weights), NumPy value, JAX scalar function)
CASES = {
    "logabsdet": ("output y = logabsdet(A)\noutput f = logabsdet(A)",
                  "np.linalg.slogdet(A)[1]", "lambda A, W: jnp.linalg.slogdet(A)[1]"),
    "logdet": ("output y = logdet(S)\noutput f = logdet(S)",
               "np.linalg.slogdet(S)[1]", "lambda S, W: jnp.linalg.slogdet(S)[1]"),
    "solve_triangular": ("output y = solve_triangular(L, W)\n"
                         "output f = sum(solve_triangular(L, W))",
                         "sl.solve_triangular(L, W, lower=True)",
                         "lambda L, W: jsl.solve_triangular(L, W, lower=True).sum()"),
    "eigvalsh": ("output y = eigvalsh(S)\noutput f = dot(W[0], eigvalsh(S))",
                 "np.linalg.eigvalsh(S)", "lambda S, W: W[0] @ jnp.linalg.eigvalsh(S)"),
    "eigh": ("output y = eigh(S)\noutput f = sum(W * eigh(S))", "np.linalg.eigh(S)[1]",
             None),  # eigh's sign rule is ours: JAX's vectors differ by signs
    "expm": ("output y = expm(A)\noutput f = sum(W * expm(A))", "sl.expm(A)",
             "lambda A, W: (W * jsl.expm(A)).sum()"),
}

CHILD = r"""
import json, sys, time
import numpy as np
import scipy.linalg as sl
import diffdsl
name, n, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[6])
body, reference, jax_fn = sys.argv[3:6]
var = body.split("(")[1].split(")")[0].split(",")[0]
rng = np.random.default_rng(0)
X = rng.standard_normal((n, n))
values = {"A": X / n ** 0.5, "S": X @ X.T / n + np.eye(n), "L": np.tril(X) + n * np.eye(n),
          "W": rng.standard_normal((n, n))}
source = f"input {var}[{n}, {n}]\ninput W[{n}, {n}]\n{body}\n"
out = {}
t = time.perf_counter()
prog = diffdsl.compile(source, backend="cpu")
given = {var: values[var], "W": values["W"]}
prog(given)
out["build"] = time.perf_counter() - t
out["nodes"] = len(prog.graph.nodes)
t = time.perf_counter()
try:
    prog.grad(given, of="f", wrt=[var])
    out["build_grad"] = time.perf_counter() - t
except diffdsl.errors.LimitError as e:
    out["grad_error"] = "over the " + e.message.split("(the limit is ")[1].split(")")[0]
def per(fn, k, rounds=5):
    # the best of `rounds` rounds of k calls: on a shared, loaded machine the slower rounds
    # measure the neighbours
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(k):
            fn()
        best = min(best, (time.perf_counter() - t) / k)
    return best
out["value"] = per(lambda: prog(given), 20)
if "build_grad" in out:
    out["grad"] = per(lambda: prog.grad(given, of="f", wrt=[var]), 20)
batch = {var: np.broadcast_to(values[var], (rows, n, n)).copy(), "W": values["W"]}
out["value_row"] = per(lambda: prog(batch), 3) / rows
env = {"np": np, "sl": sl, **values}
out["ref_value"] = per(lambda: eval(reference, env), 200)
stack = np.broadcast_to(values[var], (rows, n, n)).copy()
if "solve_triangular" not in reference and "expm" not in reference:
    out["ref_value_row"] = per(lambda: eval(reference, {**env, var: stack}), 3) / rows
if "expm" in reference:
    out["ref_value_row"] = per(lambda: sl.expm(stack), 3) / rows
if jax_fn != "None":
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    g = jax.jit(jax.grad(eval(jax_fn, {"jnp": jnp, "jsl": jsl})))
    args = (jnp.asarray(values[var]), jnp.asarray(values["W"]))
    t = time.perf_counter()
    g(*args).block_until_ready()
    out["jax_build"] = time.perf_counter() - t
    out["jax_grad"] = per(lambda: g(*args).block_until_ready(), 50)
print(json.dumps(out))
"""


def run(name: str, n: int, timeout: int, rows: int) -> dict:
    body, reference, jax_fn = CASES[name]
    with tempfile.TemporaryDirectory() as cache:
        # one BLAS thread: small LAPACK calls with threads that spin on a loaded machine took
        # 100 to 1000 times longer (scipy.linalg.expm of a 3x3 from 15 µs to 11 ms)
        env = dict(os.environ, DIFFDSL_CACHE_DIR=cache, OPENBLAS_NUM_THREADS="1",
                   MKL_NUM_THREADS="1")
        try:
            done = subprocess.run([sys.executable, "-c", CHILD, name, str(n), body, reference,
                                   str(jax_fn), str(rows)], capture_output=True, text=True,
                                  env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"over {timeout} s"}
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if "error: " in line] or ["?"]
        return {"error": said[-1].split("error: ")[-1][:90]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def ms(x):
    return "" if x is None else f"{x * 1e3:.3g} ms" if x >= 1e-3 else f"{x * 1e6:.3g} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 10, 30])
    parser.add_argument("--only", nargs="+", default=list(CASES))
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    print("| builtin | n | nodes | build value | build gradient | value per call | NumPy/SciPy "
          "per call | value per row (batch) | NumPy/SciPy per row (stacked) | gradient per "
          "call | JAX jit gradient per call |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.only:
        for n in args.sizes:
            r = run(name, n, args.timeout, args.rows)
            if "error" in r:
                print(f"| {name} | {n} | {r['error']} | | | | | | | | |", flush=True)
                continue
            built = f"{r['build_grad']:.2f} s" if "build_grad" in r else r["grad_error"]
            print(f"| {name} | {n} | {r['nodes']:,} | {r['build']:.2f} s | {built} | "
                  f"{ms(r['value'])} | {ms(r['ref_value'])} | {ms(r['value_row'])} | "
                  f"{ms(r.get('ref_value_row'))} | {ms(r.get('grad'))} | "
                  f"{ms(r.get('jax_grad'))} |", flush=True)


if __name__ == "__main__":
    main()
