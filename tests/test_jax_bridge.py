"""diffdsl.jax: a program as a JAX function, checked by JAX's own oracles.

`jax.test_util.check_grads` compares forward and reverse derivatives to second order with
finite differences on every example's outputs of one element; values, gradients and Hessians
under jit, vmap, jacfwd and jacrev are compared with jax.numpy's own functions (det,
logsumexp), whose derivatives JAX derives independently of diffdsl.
"""

from __future__ import annotations

import gc
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax", reason="jax is not installed (the 'jax' extra)")

import jax.numpy as jnp  # noqa: E402
from bridge_points import (  # noqa: E402
    CASES,
    EXAMPLES,
    POINTS,
    program,
    quadratic_form_gradients,
)
from jax.test_util import check_grads  # noqa: E402

import diffdsl  # noqa: E402
import diffdsl.jax as dj  # noqa: E402
from diffdsl.errors import InputError, UsageError  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def x64():
    """float64 for this module only (JAX's default is float32)."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)


def close(a, b, tol=1e-11):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# An example whose graph is large (an eigendecomposition written out) is checked at second
# order in reverse mode alone (the torch tests take its vjp of the vjp too): forward over
# forward would add half a minute of graph building to the suite.
REVERSE_ONLY = {"linalg/fiedler.dd"}


@pytest.mark.parametrize("name,of", CASES)
def test_check_grads_to_second_order(name, of):
    f = dj.function(program(name), of=of)
    xs = [jnp.asarray(v) for v in POINTS[name][0].values()]
    if name in REVERSE_ONLY:
        check_grads(f, xs, order=1, modes=("fwd", "rev"))
        check_grads(f, xs, order=2, modes=("rev",))
    else:
        check_grads(f, xs, order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("name,wrt", [("kmeans", "C"), ("gmm", "alpha"), ("mlp", "b2")])
def test_data_examples(name, wrt):
    """The GradBench-style examples by one input, the others fixed (finite differences over
    their thousands of data elements would take minutes)."""
    prog = diffdsl.load(EXAMPLES / "data" / f"{name}.dd", backend="cpu")
    rng = np.random.default_rng(2)
    values = {k: jnp.asarray(0.3 * rng.normal(size=s)) for k, s in prog.inputs.items()}
    f = dj.function(prog, wrt=[wrt])

    def by_one(x):
        return f(**{**values, wrt: x})

    check_grads(by_one, [values[wrt]], order=2, modes=("fwd", "rev"))


def test_jit_vmap_jacfwd_jacrev_against_jax_numpy():
    f = dj.function(program("det3.dd"))
    A = jnp.asarray(np.random.default_rng(7).normal(size=(4, 3, 3)))
    det = jnp.linalg.det
    close(jax.jit(f)(A[0]), det(A[0]))
    close(f(A), det(A))  # leading dimensions are a batch
    close(jax.vmap(f)(A), det(A))
    close(jax.jit(jax.vmap(jax.grad(f)))(A), jax.vmap(jax.grad(det))(A))
    hessian = jax.vmap(jax.hessian(det))(A)
    close(jax.jit(jax.vmap(jax.jacfwd(jax.jacrev(f))))(A), hessian)
    close(jax.vmap(jax.jacrev(jax.jacfwd(f)))(A), hessian)
    close(jax.jacrev(jax.jacrev(f))(A[1]), hessian[1])
    close(jax.jacfwd(f)(A), jax.jacfwd(det)(A))  # a batch's Jacobian: zero across rows
    check_grads(jax.jit(jax.vmap(f)), [A], order=2, modes=("fwd", "rev"))


def test_vmap_over_a_batch_with_shared_inputs():
    """vmap's axis goes in front of a batch the arrays have already; an input that vmap does
    not map (in_axes None) stays shared by every row, and its gradient sums over them."""
    prog = program("logsumexp.dd")
    f = dj.function(prog, of="lse")
    ref = jax.nn.logsumexp
    x = jnp.asarray(np.random.default_rng(8).normal(size=(2, 3, 5)))
    close(jax.vmap(f)(x), ref(x, axis=-1))
    g = dj.function(program("matrix.dd"), of="q")
    A = jnp.asarray(np.random.default_rng(9).normal(size=(3, 3)))
    v = jnp.asarray(np.random.default_rng(10).normal(size=(2, 4, 3)))

    def by_hand(A, v):
        return jnp.einsum("...i,ij,...j->...", v, A, v)

    close(jax.vmap(g, in_axes=(None, 0))(A, v), by_hand(A, v))

    def total(fn):
        return lambda A, v: jax.vmap(fn, in_axes=(None, 0))(A, v).sum()

    for argnums in (0, 1):
        close(jax.grad(total(g), argnums)(A, v), jax.grad(total(by_hand), argnums)(A, v))
    check_grads(total(g), [A, v], order=2, modes=("fwd", "rev"))


def test_vector_output_float32_and_wrt():
    prog = program("special.dd")
    f = dj.function(prog, of="f", wrt=["x"])
    x = jnp.asarray([0.5, 1.0, 1.5])
    y = jnp.asarray([0.1, -0.2, 0.3])
    close(f(x, y=y), prog(x=np.asarray(x), y=np.asarray(y))["f"], 1e-14)
    out32 = f(x.astype(jnp.float32), y.astype(jnp.float32))
    assert out32.dtype == jnp.float32
    close(out32, f(x, y), 1e-5)
    jac = jax.jacrev(f, argnums=(0, 1))(x, y)
    close(jac[0], prog.jacobian(x=np.asarray(x), y=np.asarray(y), of="f")["x"])
    assert not np.asarray(jac[1]).any()  # y is outside wrt: a constant


def test_bad_calls_are_errors():
    f = dj.function(program("gauss.dd"))
    with pytest.raises(UsageError, match="missing value for mu"):
        f(jnp.eye(3), jnp.ones(3))
    with pytest.raises(InputError, match="input 'x' is declared with shape"):
        f(jnp.eye(3), jnp.ones(4), jnp.ones(3))
    with pytest.raises(InputError, match="batch shapes do not agree"):
        f(jnp.eye(3), jnp.ones((2, 3)), jnp.ones((5, 3)))


def test_the_example_runs():
    """examples/bridges/jax_newton.py: jit and vmap around jax.grad and jax.hessian."""
    done = subprocess.run([sys.executable, str(EXAMPLES / "bridges" / "jax_newton.py")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "64 reach a stationary point" in done.stdout


@pytest.mark.parametrize("route", ["ffi", "callback"])
def test_both_routes_under_jit(route, monkeypatch):
    """The kernel as an XLA foreign function (the default) and through pure_callback agree
    with the kernels called directly, for a batch with shared inputs, float64 and float32."""
    monkeypatch.setattr(dj, "ROUTE", route)
    prog = program("gauss.dd")
    f = dj.function(prog)
    S = np.array([[2.0, 1, 0], [1, 2, 1], [0, 1, 2]])
    x = np.random.default_rng(11).normal(size=(5, 3))
    mu = np.zeros(3)
    grads = jax.jit(jax.grad(lambda S, x, mu: f(S, x, mu).sum(), argnums=(0, 1)))(S, x, mu)
    want = prog.grad(S=S, x=x, mu=mu, reduce="sum")
    close(grads[0], want["S"])
    close(grads[1], want["x"])
    value32 = jax.jit(f)(*(jnp.asarray(a, jnp.float32) for a in (S, x, mu)))
    assert value32.dtype == jnp.float32
    close(value32, prog(S=S, x=x, mu=mu), 1e-5)


@settings(max_examples=15, deadline=None)
@given(batch=st.lists(st.integers(1, 3), max_size=2), a_batched=st.booleans(),
       v_batched=st.booleans(), mapped=st.booleans(), seed=st.integers(0, 2**16))
def test_batches_vmap_and_shared_inputs_against_the_closed_form(batch, a_batched, v_batched,
                                                                mapped, seed):
    """q = v'Av (matrix.dd) over any batch, each input batched or shared, and v's first axis
    mapped by vmap or not: jit(grad) of the rows' sum is v v' and (A + A')v a row, summed
    over the rows for a shared input."""
    rng = np.random.default_rng(seed)
    batch = tuple(batch)
    A = rng.normal(size=(batch if a_batched else ()) + (3, 3))
    v = rng.normal(size=(batch if v_batched else ()) + (3,))
    f = dj.function(program("matrix.dd"), of="q")
    fn = jax.vmap(f, in_axes=(None, 0)) if mapped and v.ndim > 1 and A.ndim == 2 else f
    grads = jax.jit(jax.grad(lambda A, v: fn(A, v).sum(), argnums=(0, 1)))(A, v)
    rows = batch if A.ndim > 2 or v.ndim > 1 else ()
    for got, want in zip(grads, quadratic_form_gradients(A, v, rows), strict=True):
        close(got, want)


def test_a_foreign_function_outlives_its_program():
    """XLA keeps the handler made for a kernel and finds it again by name when an equal graph
    is compiled later: the kernel must live as long as the handler, not as long as the
    program that made it (a freed kernel here was a segmentation fault)."""
    A = np.array([[2.0, 1, 0], [1, 3, 1], [0, 1, 4]])
    for _ in range(3):
        prog = program("det3.dd")
        close(jax.jit(jax.grad(dj.function(prog)))(A), prog.grad(A=A)["A"])
        del prog
        gc.collect()
