"""Sparse Jacobians and Hessians (issue 12, part 2): patterns from the graph, and the results
of the compressed kernels against the dense `jacobian` and `hessian` (flattened), closed forms
and finite differences, on hand-written families (banded, arrow, blocks, dense, selects, loops),
every example and generated programs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from fuzzing import programs
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.graph import pattern_walk
from diffdsl.graph.ops import OPS
from diffdsl.runtime import sparse

sp = pytest.importorskip("scipy.sparse", reason="sparse results are scipy.sparse matrices")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

BROYDEN = """const n = {n}
input x[n]
output F = [x[i] * (2 + 5 * x[i]**2) + 1
            - sum(x[j] * (1 + x[j]) for j in range(max(0, i - 5), min(n, i + 2)) if j != i)
            for i in range(n)]
"""
ROSENBROCK = """const n = {n}
input x[n]
output f = sum(100 * (x[i+1] - x[i]**2)**2 + (1 - x[i])**2 for i in range(n - 1))
"""
# name -> (source, the outputs with one element, the outputs with several)
FAMILIES = {
    "broyden": (BROYDEN.format(n=12), [], ["F"]),
    "rosenbrock": (ROSENBROCK.format(n=9), ["f"], []),
    "arrow": ("input x[7]\noutput F = [x[0] * x[i] + sin(x[i]) for i in range(7)]\n"
              "output f = sum(x[0] * x[i]**2 for i in range(1, 7)) + exp(x[0])\n",
              ["f"], ["F"]),
    "blocks": ("input A[4, 3]\noutput F = [A[i, 0] * A[i, 1] - A[i, 2]**3 for i in range(4)]\n"
               "output f = sum(exp(A[i, 0] * A[i, 1] * A[i, 2]) for i in range(4))\n",
               ["f"], ["F"]),
    "dense": ("input x[5]\noutput F = [exp(sum(x)) * x[i] for i in range(5)]\n"
              "output f = log(1 + sum(x * x))\n", ["f"], ["F"]),
    "selects_and_loops": ("""input x[6]
input w[2]
s = 0
for i in range(5) {
    if x[i] > x[i + 1] {
        s = s + x[i] * w[0]
    } else {
        s = s + sqrt(x[i + 1]**2 + 1) * w[1]
    }
}
t = x[0]
for k in range(4) {
    if t < 20 {
        t = t * 2 + x[1] * x[2]
    }
}
output f = s + t + min(x[3], x[4]) + abs(x[5])
output F = [if x[i] > 1 then x[i] * x[i + 1] else w[0] * x[i] for i in range(5)]
""", ["f"], ["F"]),
    "two_inputs": ("input a[3]\ninput b[3]\n"
                   "output F = [a[i] * b[(i + 1) % 3] for i in range(3)]\n"
                   "output f = dot(a, b)**2 + sum(a) + b[0] / a[1]\n", ["f"], ["F"]),
}


def point(prog, rng, low=0.5, high=1.5) -> dict:
    return {name: rng.uniform(low, high, shape) for name, shape in prog.inputs.items()}


def size(prog, name) -> int:
    return math.prod(prog.inputs[name])


def dense_jacobian(prog, values, of, wrt, mode="auto") -> np.ndarray:
    jac = prog.jacobian(values, of=of, wrt=wrt, mode=mode)
    m = math.prod(prog.outputs[of])
    return np.concatenate([np.reshape(jac[n], (m, size(prog, n))) for n in wrt], axis=1)


def dense_hessian(prog, values, of, wrt) -> np.ndarray:
    h = prog.hessian(values, of=of, wrt=wrt)
    return np.block([[np.reshape(h[a][b], (size(prog, a), size(prog, b))) for b in wrt]
                     for a in wrt])


def assert_same(matrix, dense, pattern) -> None:
    """The sparse result equals the dense one to rounding (NaN where it is NaN), its structure
    is the pattern, and the pattern holds every entry that is not zero."""
    assert sp.issparse(matrix) and matrix.format == "csr"
    assert matrix.shape == dense.shape == pattern.shape
    assert np.array_equal(matrix.indptr, pattern.indptr)
    assert np.array_equal(matrix.indices, pattern.indices)
    np.testing.assert_allclose(matrix.toarray(), dense, rtol=1e-12, atol=1e-12, equal_nan=True)
    outside = (dense != 0) & ~pattern.toarray()
    assert not outside.any(), f"nonzero entries outside the pattern at {np.argwhere(outside)}"


def all_wrts(prog) -> list:
    names = list(prog.inputs)
    return [names] + ([names[::-1], names[-1:]] if len(names) > 1 else [])


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_sparse_results_equal_the_dense_ones(name, backend):
    source, scalars, vectors = FAMILIES[name]
    prog = diffdsl.compile(source, filename=f"{name}.dd", backend=backend)
    rng = np.random.default_rng(3)
    for values in (point(prog, rng), point(prog, rng, -1.5, 1.5)):
        for wrt in all_wrts(prog):
            for of in scalars + vectors:
                for mode in ("forward", "reverse", "auto"):
                    assert_same(prog.jacobian(values, of=of, wrt=wrt, mode=mode, sparse=True),
                                dense_jacobian(prog, values, of, wrt, mode),
                                prog.sparsity(of=of, wrt=wrt))
            for of in scalars:
                assert_same(prog.hessian(values, of=of, wrt=wrt, sparse=True),
                            dense_hessian(prog, values, of, wrt),
                            prog.sparsity(of=of, wrt=wrt, hessian=True))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.dd")), ids=lambda p: p.name)
def test_every_example(path):
    prog = diffdsl.load(path)
    values = point(prog, np.random.default_rng(11))
    wrt = list(prog.inputs)
    for of, shape in prog.outputs.items():
        assert_same(prog.jacobian(values, of=of, sparse=True),
                    dense_jacobian(prog, values, of, wrt), prog.sparsity(of=of))
        if math.prod(shape) == 1 and sum(size(prog, n) for n in wrt) <= 30:
            assert_same(prog.hessian(values, of=of, sparse=True),
                        dense_hessian(prog, values, of, wrt), prog.sparsity(of=of, hessian=True))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(mutate=False), st.integers(0, 2**32 - 1))
def test_generated_programs(source, seed):
    try:
        prog = diffdsl.compile(source, filename="generated.dd", cache=False)
    except diffdsl.DiffDSLError:
        assume(False)
    values = point(prog, np.random.default_rng(seed), -2.0, 2.0)
    wrt = list(prog.inputs)
    for mode in ("forward", "reverse"):
        assert_same(prog.jacobian(values, of="y", mode=mode, sparse=True),
                    dense_jacobian(prog, values, "y", wrt, mode), prog.sparsity(of="y"))
    assert_same(prog.hessian(values, of="y", sparse=True), dense_hessian(prog, values, "y", wrt),
                prog.sparsity(of="y", hessian=True))


# independent oracles ---------------------------------------------------------------------
def test_broyden_jacobian_against_its_closed_form():
    n = 40
    prog = diffdsl.compile(BROYDEN.format(n=n), backend="cpu")
    x = np.random.default_rng(0).uniform(-1, 1, n)
    want = np.zeros((n, n))
    for i in range(n):
        for j in range(max(0, i - 5), min(n, i + 2)):
            want[i, j] = 2 + 15 * x[i]**2 if j == i else -(1 + 2 * x[j])
    J = prog.jacobian(x=x, sparse=True)
    np.testing.assert_allclose(J.toarray(), want, rtol=1e-14)
    assert J.nnz == np.count_nonzero(want)
    assert sparse.plan(prog, "jacobian").sweeps == 7          # the band's width, not n


def test_rosenbrock_hessian_against_scipy_and_finite_differences():
    from scipy.optimize import rosen_der, rosen_hess
    n = 50
    prog = diffdsl.compile(ROSENBROCK.format(n=n), backend="cpu")
    x = np.random.default_rng(1).uniform(-1, 2, n)
    H = prog.hessian(x=x, sparse=True)
    np.testing.assert_allclose(H.toarray(), rosen_hess(x), rtol=1e-13, atol=1e-10)
    assert H.nnz == 3 * n - 2 and sparse.plan(prog, "hessian").sweeps == 3
    v = np.random.default_rng(2).normal(size=n)
    h = 1e-6
    fd = (rosen_der(x + h * v) - rosen_der(x - h * v)) / (2 * h)
    np.testing.assert_allclose(H @ v, fd, rtol=1e-6, atol=1e-5)


# patterns on known shapes ----------------------------------------------------------------
def mask(prog, **kw) -> np.ndarray:
    return prog.sparsity(**kw).toarray()


def test_patterns_are_exact_on_known_shapes():
    n = 10
    i, j = np.indices((n, n))
    broyden = diffdsl.compile(BROYDEN.format(n=n))
    assert np.array_equal(mask(broyden), (j - i <= 1) & (i - j <= 5))
    rosen = diffdsl.compile(ROSENBROCK.format(n=n))
    assert np.array_equal(mask(rosen, hessian=True), abs(i - j) <= 1)
    assert np.array_equal(mask(rosen), np.ones((1, n), dtype=bool))
    arrow = diffdsl.compile(FAMILIES["arrow"][0])
    want = np.eye(7, dtype=bool)
    want[0, :] = want[:, 0] = True
    assert np.array_equal(mask(arrow, of="f", hessian=True), want)
    i, j = np.indices((7, 7))
    assert np.array_equal(mask(arrow, of="F"), (i == j) | (j == 0))
    assert arrow.sparsity(of="F").dtype == bool
    blocks = diffdsl.compile(FAMILIES["blocks"][0])
    assert np.array_equal(mask(blocks, of="f", hessian=True),
                          np.kron(np.eye(4), np.ones((3, 3))).astype(bool))


@pytest.mark.parametrize("source, jac, hess", [
    # a select's condition carries no derivative; its branches do
    ("input x[4]\noutput y = if x[0] > 0 then x[1] * x[2] else x[3]",
     [0, 1, 1, 1], [(1, 2), (2, 1)]),
    # comparisons, sign, floor: derivative zero
    ("input x[3]\noutput y = (x[0] < x[1]) + sign(x[2]) + floor(x[0] * x[1])", [0, 0, 0], []),
    # linear, and piecewise linear: no second derivatives
    ("input x[4]\noutput y = 2 * x[0] - x[1] / 4 + abs(x[2]) + max(x[3], x[0]) - min(x[1], 3)",
     [1, 1, 1, 1], []),
    # a product of two, a square, a quotient, a nonlinear function of a sum
    ("input x[5]\noutput y = x[0] * x[1] + x[2] * x[2] + x[3] / x[4]",
     [1] * 5, [(0, 1), (1, 0), (2, 2), (3, 4), (4, 3), (4, 4)]),
    ("input x[3]\noutput y = exp(x[0] + x[1]) + x[2]",
     [1, 1, 1], [(0, 0), (0, 1), (1, 0), (1, 1)]),
    # a product that only feeds a comparison adds nothing
    ("input x[3]\noutput y = if x[0] * x[1] > 1 then x[2] else 2 * x[2]", [0, 0, 1], []),
])
def test_patterns_of_single_ops(source, jac, hess):
    prog = diffdsl.compile(source)
    assert mask(prog).astype(int).tolist() == [jac]
    n = len(jac)
    want = np.zeros((n, n), dtype=bool)
    for a, b in hess:
        want[a, b] = True
    assert np.array_equal(mask(prog, hessian=True), want)


def test_every_op_has_a_kind_and_those_without_derivative_pass_none():
    assert set(pattern_walk.KIND) == set(OPS)
    for name, row in OPS.items():
        assert (pattern_walk.KIND[name] == "none") == (row.pullback is None), name
