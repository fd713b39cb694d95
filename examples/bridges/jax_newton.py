"""A diffdsl program in JAX: Newton's method on the Rosenbrock function from many starts.

jax.grad and jax.hessian of rosenbrock.dd run its compiled derivative kernels (the Hessian
as forward over reverse: the jvp of the vjp graph); jax.jit compiles the Newton step around
them and jax.vmap runs it for 64 starting points at once (a batch of rows for the kernels).
A Newton step that does not lower f is damped: H + mu I, the least mu of eight that lowers f.

    python examples/bridges/jax_newton.py
"""

from pathlib import Path

import jax
import jax.numpy as jnp

import diffdsl
import diffdsl.jax

jax.config.update("jax_enable_x64", True)
HERE = Path(__file__).resolve().parent

f = diffdsl.jax.function(diffdsl.load(HERE.parent / "rosenbrock.dd"))


MUS = jnp.array([0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0])


@jax.jit
@jax.vmap
def newton_step(x):
    g, h = jax.grad(f)(x), jax.hessian(f)(x)
    steps = jax.vmap(lambda mu: x - jnp.linalg.solve(h + mu * jnp.eye(4), g))(MUS)
    lower = jax.vmap(f)(steps) < f(x)  # f of the 8 candidates: one kernel call, 8 rows
    return jnp.where(lower.any(), steps[jnp.argmax(lower)], x)  # the least damped that helps


def main() -> jax.Array:
    starts = jax.random.uniform(jax.random.PRNGKey(0), (64, 4), minval=-2, maxval=2)
    x = starts
    for _ in range(60):
        x = newton_step(x)
    gradients = jax.vmap(jax.grad(f))(x)
    stationary = jnp.linalg.norm(gradients, axis=1) < 1e-8
    at_one = jnp.abs(x - 1).max(axis=1) < 1e-8
    print(f"60 damped Newton steps from 64 starts: {int(stationary.sum())} reach a stationary "
          f"point, {int(at_one.sum())} of them the minimum (1, 1, 1, 1)")
    return x


if __name__ == "__main__":
    main()
