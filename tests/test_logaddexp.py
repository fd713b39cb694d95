"""`logaddexp(a, b)`, the builtin added as one row of the op table: its value against mpmath at
50 digits and against NumPy at the IEEE edges, without overflow, and its first and second
derivatives against the closed forms, on every backend (tests/compare.py's list) and in both
dtypes; its SymPy export and the oracle's proof. (The tables' coverage, the fold against NumPy,
finite differences and the CUDA kernels at special values come from the tests over `OPS`.)"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from compare import backend_params, compare_with_reference, path

import diffdsl
from diffdsl.graph.ops import OPS
from diffdsl.symbolic.check import check

SOURCE = "input a\ninput b\noutput y = logaddexp(a, b)\n"
# Points on both sides, equal arguments, far apart (one exp underflows), huge (exp overflows).
POINTS = [(0.3, -1.2), (-1.2, 0.3), (2.0, 2.0), (-40.0, 3.0), (700.0, 710.0), (1000.0, 999.0),
          (-1000.0, -1001.0), (1e300, -1e300), (-745.5, -745.0), (0.0, -0.0)]
EDGES = [(math.inf, math.inf), (-math.inf, -math.inf), (math.inf, -math.inf), (-math.inf, 1.0),
         (1.0, math.inf), (math.nan, 1.0), (1.0, math.nan), (math.inf, math.nan)]


def _exact(a: float, b: float) -> tuple:
    """The value, gradient and Hessian at 50 digits: w = exp(a - y) is a's softmax weight."""
    with mpmath.workdps(50):
        a_, b_ = mpmath.mpf(a), mpmath.mpf(b)
        y = mpmath.log(mpmath.exp(a_) + mpmath.exp(b_))
        w = mpmath.exp(a_ - y)
        curve = w * (1 - w)
        return float(y), [float(w), float(1 - w)], [[float(curve), float(-curve)],
                                                    [float(-curve), float(curve)]]


@pytest.mark.parametrize("backend", ["numpy"] + backend_params())
def test_values_and_derivatives_against_mpmath(backend):
    prog = diffdsl.compile(SOURCE)
    a = np.array([p[0] for p in POINTS])
    b = np.array([p[1] for p in POINTS])
    with path(backend) as name:
        value, grad = prog.value_and_grad(a=a, b=b, backend=name)
        hess = prog.hessian(a=a, b=b, backend=name)
    for k, point in enumerate(POINTS):
        y, g, h = _exact(*point)
        assert value[k] == pytest.approx(y, rel=2e-16, abs=0), point
        assert [grad["a"][k], grad["b"][k]] == pytest.approx(g, rel=1e-15, abs=1e-300), point
        got = [[hess["a"]["a"][k], hess["a"]["b"][k]], [hess["b"]["a"][k], hess["b"]["b"][k]]]
        assert np.allclose(got, h, rtol=1e-14, atol=1e-300), (point, got, h)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["numpy"] + backend_params())
def test_ieee_edges_are_numpys(backend, dtype):
    """Infinities of either sign, NaN, signed zeros: NumPy's np.logaddexp, bit for bit."""
    prog = diffdsl.compile(SOURCE)
    pairs = EDGES + POINTS
    with np.errstate(over="ignore"):  # 1e300 is inf in float32
        a = np.array([p[0] for p in pairs]).astype(dtype)
        b = np.array([p[1] for p in pairs]).astype(dtype)
    with path(backend) as name, np.errstate(all="ignore"):
        got = np.asarray(prog(a=a, b=b, backend=name, dtype=dtype))
        want = np.logaddexp(a, b)
    assert got.dtype == np.dtype(dtype)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    close = np.isclose(got, want, rtol=4 * np.finfo(dtype).eps, atol=0)
    assert (same | close).all(), (a[~same], b[~same], got[~same], want[~same])


def test_no_overflow_where_the_naive_formula_overflows():
    naive = diffdsl.compile("input a\ninput b\noutput y = log(exp(a) + exp(b))\n")
    prog = diffdsl.compile(SOURCE)
    with np.errstate(over="ignore"):
        assert naive(a=1000.0, b=1000.0) == math.inf
    assert prog(a=1000.0, b=1000.0) == 1000.0 + math.log(2.0)
    assert prog.grad(a=1000.0, b=1000.0) == {"a": 0.5, "b": 0.5}
    assert prog.grad(a=-1000.0, b=0.0) == {"a": 0.0, "b": 1.0}


@pytest.mark.parametrize("backend", backend_params())
def test_a_program_of_logaddexp_on_every_backend(backend):
    """A log-likelihood over a vector, through compare_with_reference: outputs, Jacobians in
    both modes and the Hessian, float64 and float32, a batch with a shared input."""
    source = ("input x[4]\ninput s\n"
              "output ll = sum(logaddexp(x[i] * s, -x[i]) for i in range(4))\n"
              "output pairs = [logaddexp(x[i], x[3 - i]) for i in range(4)]\n")
    prog = diffdsl.compile(source)
    compare_with_reference(prog, backend, "float64", ())
    compare_with_reference(prog, backend, "float64", (3,), seed=1, shared=("s",))
    compare_with_reference(prog, backend, "float32", (2,), seed=2)


def test_folds_on_static_arguments_as_numpy():
    prog = diffdsl.compile("input x\noutput y = x + (logaddexp(1, 2) + logaddexp(0.5, -inf))\n")
    assert [n.op for n in prog.graph.nodes] == ["input", "const", "add"]
    assert prog(x=0.0) == np.logaddexp(1.0, 2.0) + 0.5
    assert OPS["logaddexp"].fold(3.0, 3.0) == np.logaddexp(3.0, 3.0)


def test_sympy_export_and_the_oracle_agree():
    prog = diffdsl.compile(SOURCE)
    import sympy as sp
    a, b = sp.symbols("a b", real=True)
    assert prog.to_sympy()["y"] == sp.log(sp.exp(a) + sp.exp(b))
    (grad_a,) = [prog.symbolic_grad()["a"]]
    assert sp.simplify(grad_a - sp.exp(a) / (sp.exp(a) + sp.exp(b))) == 0
    report = check(diffdsl.compile("input v[2]\noutput y = logaddexp(v[0] * v[1], v[1])\n")
                   .graph)
    assert report["ok"]
    assert {e["status"] for e in report["symbolic"]["y"].values()} <= {"proven", "numeric50"}
