"""The bridges' cost a call: a gradient through PyTorch and JAX beside a plain `prog.grad`.

For each program, one gradient at a single point, new inputs each call (bench/common.py's
`per_call`, median of 5 rounds), all in one process on one machine:

- `prog.grad`: the API's single-point fast path (the kernel and a dict of arrays);
- torch: `diffdsl.torch.function` forward and `torch.autograd.grad` (two kernel calls:
  the value, then the vjp), each an `autograd.Function` call (eager mode);
- JAX eager: `jax.grad` of `diffdsl.jax.function` without `jit` (jvp, then transpose: one
  vjp kernel call after tracing in Python every time);
- JAX jit, callback: `jax.jit(jax.grad(f))` with `diffdsl.jax.ROUTE = "callback"`, the
  kernel reached through `jax.pure_callback`;
- JAX jit, FFI: the same with the default route, the kernel an XLA foreign function
  (runtime/xla_call.py: a typed-FFI handler around its machine code);
- JAX jit, jax.numpy: the same function written in jax.numpy, jitted, for scale.

    python bench/bridges.py [--markdown]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
from common import machine, per_call, scratch_cache, table

ROOT = Path(__file__).resolve().parent.parent


def programs():
    import jax.numpy as jnp

    def rosenbrock(x):
        return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    def gauss(S, x, mu):
        L = jnp.linalg.cholesky(S)
        z = jax_solve(L, x - mu)
        n = S.shape[0]
        return -0.5 * z @ z - jnp.sum(jnp.log(jnp.diag(L))) - n / 2 * jnp.log(2 * jnp.pi)

    def jax_solve(L, b):
        import jax.scipy.linalg
        return jax.scipy.linalg.solve_triangular(L, b, lower=True)

    S = np.array([[2.0, 1, 0], [1, 2, 1], [0, 1, 2]])
    return [("rosenbrock.dd", lambda k: np.random.default_rng(k).uniform(-1, 1, (1, 4)),
             lambda x: {"x": x[0]}, lambda x: rosenbrock(x["x"])),
            ("det3.dd", lambda k: np.random.default_rng(k).uniform(-1, 1, (1, 3, 3)),
             lambda x: {"A": x[0]}, lambda x: jnp.linalg.det(x["A"])),
            ("gauss.dd", lambda k: np.random.default_rng(k).uniform(-1, 1, (1, 3)),
             lambda x: {"S": S, "x": x[0], "mu": np.zeros(3)},
             lambda x: gauss(x["S"], x["x"], x["mu"]))]


def main(markdown: bool = False) -> None:
    scratch_cache()
    os.environ.pop("DIFFDSL_BACKEND", None)
    import jax
    import torch

    import diffdsl
    import diffdsl.jax as dj
    import diffdsl.torch as dt
    jax.config.update("jax_enable_x64", True)
    rows = []
    for name, one, inputs, by_hand in programs():
        prog = diffdsl.load(ROOT / "examples" / name, backend="cpu")
        names = list(inputs(one(0)))

        def draw_many(k, one=one):
            return np.concatenate([one(j) for j in range(k)])  # k new points

        def api(x, prog=prog, inputs=inputs):
            return prog.grad(**inputs(x[None]))

        tf = dt.function(prog)

        def torch_grad(x, tf=tf, inputs=inputs):
            args = [torch.from_numpy(np.asarray(v, dtype=np.float64)).requires_grad_()
                    for v in inputs(x[None]).values()]
            return torch.autograd.grad(tf(*args), args)

        jf = dj.function(prog)
        jgrad = jax.grad(lambda *a, jf=jf: jf(*a), argnums=tuple(range(len(names))))
        example = [np.asarray(v, dtype=np.float64) for v in inputs(one(0)).values()]
        # ROUTE is read when a function is lowered, which happens here (a function of its own
        # for each: JAX caches lowerings by function)
        dj.ROUTE = "callback"
        jitted = jax.jit(lambda *a, g=jgrad: g(*a)).lower(*example).compile()
        dj.ROUTE = "ffi"
        jitted_ffi = jax.jit(lambda *a, g=jgrad: g(*a)).lower(*example).compile()
        ref = jax.jit(jax.grad(lambda *a, names=names, by_hand=by_hand:
                               by_hand(dict(zip(names, a, strict=True))),
                               argnums=tuple(range(len(names)))))

        def jax_call(fn, inputs=inputs):
            def call(x):
                out = fn(*[np.asarray(v, dtype=np.float64) for v in inputs(x[None]).values()])
                jax.block_until_ready(out)
            return call

        # the routes agree before they are timed (jax.numpy's gauss takes S as symmetric, a
        # gradient other than that of the program, which reads S's lower triangle)
        x0 = draw_many(1)[0]
        want = api(x0)
        for fn in (jgrad, jitted, jitted_ffi):
            got = fn(*[np.asarray(v, dtype=np.float64) for v in inputs(x0[None]).values()])
            for n, g in zip(names, got, strict=True):
                np.testing.assert_allclose(np.asarray(g), want[n], rtol=1e-9, atol=1e-12)
        cells = [name]
        for fn in (api, torch_grad, jax_call(jgrad), jax_call(jitted), jax_call(jitted_ffi),
                   jax_call(ref)):
            cells.append(per_call(fn, draw_many)["seconds"])
        rows.append(cells)
    headers = ["program", "prog.grad", "torch", "JAX eager", "JAX jit, callback",
               "JAX jit, FFI", "JAX jit, jax.numpy"]
    print(machine())
    print(table(headers, [[r[0]] + [f"{s * 1e6:.1f} us" for s in r[1:]] for r in rows],
                markdown=markdown))


if __name__ == "__main__":
    main("--markdown" in sys.argv)
