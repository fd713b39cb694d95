"""`for` loops kept as loops (scans, issue 22): time to a first gradient in a fresh process
with an empty cache, and per gradient call, for programs whose state runs through a long
loop, beside the same computation in JAX (`jax.lax.scan` under `jit`, the strongest reference
at hand: written by hand, compiled by XLA) and, with `--unrolled`, beside the program with its
loop written out (`--limit unroll=...`).

    python bench/scans.py [--unrolled] [--calls 20]

Each case runs in its own process: the figures include Python's start, imports, lowering,
autodiff and compilation (LLVM for diffdsl, XLA for JAX). Both compute the same gradient; the
script checks that they agree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASES = {"RK4, 16 states, 2,000 steps": "rk4.dd",
         "LSTM, 1,000 steps, 8 features, hidden 16": "lstm.dd"}

DIFFDSL = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import diffdsl
path, unroll, calls, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with diffdsl.limits.using(**({"unroll": unroll} if unroll else {})):
    prog = diffdsl.load(path)
values = {k: v for k, v in np.load(sys.argv[5]).items()}
grad = prog.grad(values)
first = time.perf_counter() - start
t = time.perf_counter()
for _ in range(calls):
    prog.grad(values)
per_call = (time.perf_counter() - t) / calls
np.save(out, np.concatenate([np.ravel(grad[k]) for k in sorted(grad)]))
print(json.dumps({"first": first, "per_call": per_call, "nodes": len(prog.graph.nodes)}))
"""

JAX = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
name, calls, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
values = {k: jnp.asarray(v) for k, v in np.load(sys.argv[4]).items()}

def rk4(q0, stiff, target):
    dt = 0.005
    def f(s):
        return jnp.concatenate([s[8:], -stiff * jnp.sin(s[:8]) - 0.1 * s[8:]])
    def step(s, _):
        k1 = f(s); k2 = f(s + dt / 2 * k1); k3 = f(s + dt / 2 * k2); k4 = f(s + dt * k3)
        return s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None
    s, _ = jax.lax.scan(step, jnp.concatenate([q0, 0.1 * q0]), None, length=2000)
    return jnp.sum((s - target) ** 2)

def lstm(xs, Wx, Wh, b, Wy):
    H = 16
    h = jnp.tanh(Wh[0] * 0.0 + b[:H]); c = h
    def step(carry, t):
        h, c, loss = carry
        z = Wx @ xs[t] + Wh @ h + b
        f, g = jax.nn.sigmoid(z[:H]), jax.nn.sigmoid(z[H:2 * H])
        o = jax.nn.sigmoid(z[2 * H:3 * H])
        c = f * c + g * jnp.tanh(z[3 * H:])
        h = o * jnp.tanh(c)
        y = Wy @ h
        return (h, c, loss + jax.nn.logsumexp(y) - xs[t + 1] @ y), None
    (h, c, loss), _ = jax.lax.scan(step, (h, c, 0.0 * b[0]), jnp.arange(xs.shape[0] - 1))
    return loss

fn = {"rk4.dd": rk4, "lstm.dd": lstm}[name]
names = sorted(values)
order = list(fn.__code__.co_varnames[:fn.__code__.co_argcount])
g = jax.jit(jax.grad(fn, argnums=tuple(range(len(order)))))
args = [values[k] for k in order]
grad = dict(zip(order, g(*args)))
jax.block_until_ready(grad)
first = time.perf_counter() - start
t = time.perf_counter()
for _ in range(calls):
    jax.block_until_ready(g(*args))
per_call = (time.perf_counter() - t) / calls
np.save(out, np.concatenate([np.ravel(np.asarray(grad[k])) for k in names]))
print(json.dumps({"first": first, "per_call": per_call}))
"""


def run(code: str, args: list) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, DIFFDSL_CACHE_DIR=cache, JAX_PLATFORMS="cpu")
        done = subprocess.run([sys.executable, "-c", code, *map(str, args)],
                              capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def inputs(file: str) -> dict:
    import diffdsl
    prog = diffdsl.load(HERE / "programs" / file)
    rng = np.random.default_rng(0)
    return {k: rng.normal(size=s) * 0.3 for k, s in prog.inputs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unrolled", action="store_true")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    print("| program | build | first gradient (whole process) | per gradient call | nodes |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, file in CASES.items():
            data = Path(tmp) / f"{file}.npz"
            np.savez(data, **inputs(file))
            path = HERE / "programs" / file
            grads = {}
            builds = [("scan", 0)] + ([("written out", 10**9)] if args.unrolled else [])
            for build, unroll in builds:
                out = Path(tmp) / f"{file}.{unroll}.npy"
                r = run(DIFFDSL, [path, unroll, args.calls, out, data])
                grads[build] = np.load(out)
                print(f"| {label} | diffdsl, {build} | {r['first']:.2f} s | "
                      f"{r['per_call'] * 1e3:.3f} ms | {r['nodes']:,} |")
            out = Path(tmp) / f"{file}.jax.npy"
            try:
                r = run(JAX, [file, args.calls, out, data])
            except subprocess.CalledProcessError as exc:
                print(f"| {label} | JAX | not run: {exc.stderr.strip().splitlines()[-1]} | | |")
                continue
            gap = np.max(np.abs(np.load(out) - grads["scan"])) / max(1.0, np.max(np.abs(
                grads["scan"])))
            print(f"| {label} | JAX `lax.scan`, `jit` | {r['first']:.2f} s | "
                  f"{r['per_call'] * 1e3:.3f} ms | (gradients agree to {gap:.0e}) |")


if __name__ == "__main__":
    main()
