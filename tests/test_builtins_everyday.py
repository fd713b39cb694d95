"""The builtins people reach for (issue 11, section 2), each against an independent oracle:
NumPy's linear algebra, mpmath's special functions, and plain formulas in float64 or at 50
digits. Values and gradients on the numpy and cpu backends; Hessians against finite
differences of gradients; derivative rules of det, inv and solve checked as formulas."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.language.lower import close_names

BACKENDS = ["numpy", "cpu"]
RNG = np.random.default_rng(11)
mpmath.mp.dps = 50


def prog(source: str) -> diffdsl.Program:
    return diffdsl.compile(source, cache=False)


def fd_grad(f, x, h=1e-6):
    """Central differences of a scalar function of an array."""
    x = np.asarray(x, dtype=float)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = h
        g[k] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def check_hessian(p, name, x, backend, rtol=1e-5, atol=1e-6, **fixed):
    """The Hessian of the output against central differences of the gradient."""
    H = p.hessian({name: x, **fixed}, wrt=[name], backend=backend)[name][name]
    want = np.zeros(x.shape + x.shape)
    h = 1e-6
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = h
        gp = p.grad({name: x + e, **fixed}, wrt=[name], backend=backend)[name]
        gm = p.grad({name: x - e, **fixed}, wrt=[name], backend=backend)[name]
        want[(Ellipsis,) + k] = (gp - gm) / (2 * h)
    np.testing.assert_allclose(H, want, rtol=rtol, atol=atol)


# --- elementwise ---------------------------------------------------------------------------

def _sigmoid(x):
    return float(1 / (1 + mpmath.exp(-mpmath.mpf(x))))


def _softplus(x):
    return float(mpmath.log(1 + mpmath.exp(mpmath.mpf(x))))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigmoid_and_softplus_are_stable_and_right(backend):
    xs = np.array([-800.0, -40.0, -5.0, -1e-9, 0.0, 1e-9, 0.5, 5.0, 40.0, 800.0])
    p = prog(f"input x[{len(xs)}]\noutput s = sigmoid(x)\noutput q = softplus(x)\n")
    r = p(x=xs, backend=backend)
    np.testing.assert_allclose(r["s"], [_sigmoid(x) for x in xs], rtol=1e-15, atol=0)
    np.testing.assert_allclose(r["q"], [_softplus(x) for x in xs], rtol=1e-15, atol=0)
    for name, d1 in (("sigmoid", lambda x: float(mpmath.exp(-mpmath.mpf(x))
                                                  / (1 + mpmath.exp(-mpmath.mpf(x))) ** 2)),
                     ("softplus", _sigmoid)):
        q = prog(f"input x\noutput y = {name}(x)\n")
        for x in xs:
            g = q.grad(x=x, backend=backend)["x"]
            assert np.isfinite(g)
            assert g == pytest.approx(d1(x), rel=1e-14, abs=1e-300), (name, x)
            check_hessian(q, "x", np.array(x), backend) if abs(x) < 50 else None


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_derivatives_at_zero(backend):
    """At 0 the selects and min/max ties must follow one side: sigmoid'(0) = 1/4,
    softplus'(0) = 1/2, softplus''(0) = 1/4, sigmoid''(0) = 0."""
    for name, d1, d2 in (("sigmoid", 0.25, 0.0), ("softplus", 0.5, 0.25)):
        q = prog(f"input x\noutput y = {name}(x)\n")
        assert q.grad(x=0.0, backend=backend)["x"] == pytest.approx(d1, abs=1e-16)
        assert q.hessian(x=0.0, backend=backend)["x"]["x"] == pytest.approx(d2, abs=1e-16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lgamma_and_digamma_against_mpmath(backend):
    xs = np.array([1e-8, 0.1, 0.5, 0.9999999, 1.0, 1.5, 2.0, 2.5, 3.7, 7.25, 30.0, 1e3, 1e6,
                   -0.5, -1.5, -2.3, -7.9])
    p = prog(f"input x[{len(xs)}]\noutput l = lgamma(x)\noutput d = digamma(x)\n")
    r = p(x=xs, backend=backend)
    lg = [float(mpmath.log(abs(mpmath.gamma(mpmath.mpf(x))))) for x in xs]
    dg = [float(mpmath.digamma(mpmath.mpf(x))) for x in xs]
    np.testing.assert_allclose(r["l"], lg, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(r["d"], dg, rtol=1e-12, atol=0)
    # lgamma' = digamma, digamma' = trigamma, lgamma'' = trigamma: all by AD of the series
    q = prog("input x\noutput y = lgamma(x)\n")
    t = prog("input x\noutput y = digamma(x)\n")
    for x in (0.3, 1.0, 2.5, 9.0, 123.0, -0.5, -2.3):
        trigamma = float(mpmath.psi(1, mpmath.mpf(x)))
        assert q.grad(x=x, backend=backend)["x"] == pytest.approx(
            float(mpmath.digamma(x)), rel=1e-12)
        assert q.hessian(x=x, backend=backend)["x"]["x"] == pytest.approx(trigamma, rel=1e-11)
        assert t.grad(x=x, backend=backend)["x"] == pytest.approx(trigamma, rel=1e-11)
        assert t.hessian(x=x, backend=backend)["x"]["x"] == pytest.approx(
            float(mpmath.psi(2, mpmath.mpf(x))), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=1e-3, max_value=1e8))
def test_digamma_relative_accuracy_hypothesis(x):
    p = _digamma_prog()
    got = p(x=x, backend="cpu")
    want = float(mpmath.digamma(mpmath.mpf(x)))
    if abs(want) > 1e-3:  # relative accuracy is lost only near the root 1.4616...
        assert got == pytest.approx(want, rel=1e-12)
    else:
        assert got == pytest.approx(want, abs=1e-15)


_DIGAMMA: list = []


def _digamma_prog():
    if not _DIGAMMA:
        _DIGAMMA.append(prog("input x\noutput y = digamma(x)\n"))
    return _DIGAMMA[0]


def test_lgamma_poles_and_static_folding():
    p = prog("input x[3]\noutput y = lgamma(x)\n")
    for backend in BACKENDS:
        assert list(p(x=[0.0, -2.0, math.inf], backend=backend)) == [math.inf] * 3
    assert prog("output y = lgamma(0.5) + digamma(1)\n")(backend="numpy") == pytest.approx(
        math.log(math.pi) / 2 - 0.5772156649015329, rel=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_where_and_clip(backend):
    p = prog("input x[4]\noutput y = where(x[0] > 0, x ** 2, -x) + clip(x, -1, 0.5)\n")
    for x in (np.array([1.0, -2.0, 0.25, 3.0]), np.array([-1.0, -2.0, 0.25, 3.0])):
        want = (x ** 2 if x[0] > 0 else -x) + np.clip(x, -1, 0.5)
        np.testing.assert_allclose(p(x=x, backend=backend), want, rtol=1e-15)
    q = prog("input x[3]\noutput y = sum(clip(x, -1, 1) * where(x[0] > 0, 2, 3))\n")
    g = q.grad(x=np.array([0.5, -2.0, 0.9]), backend=backend)["x"]
    np.testing.assert_array_equal(g, [2.0, 0.0, 2.0])
    # where on a condition per element, and with sqrt in the branch not taken: exact zero
    r = prog("input x\noutput y = where(x > 0, sqrt(x), 0)\n")
    assert r.grad(x=-1.0, backend=backend)["x"] == 0.0


# --- reductions ----------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_logsumexp_softmax_norm(backend):
    x = np.array([0.3, -1.7, 4.2, 2.0])
    p = prog("input x[4]\noutput m = mean(x)\noutput l = logsumexp(x)\noutput s = softmax(x)\n"
             "output n2 = norm(x)\noutput n1 = norm(x, 1)\noutput ni = norm(x, inf)\n"
             "output g = mean(x[i] ** 2 for i in range(4)) + logsumexp(x[i] for i in range(2))\n")
    r = p(x=x, backend=backend)
    m = x.max()
    assert r["m"] == pytest.approx(x.mean(), rel=1e-15)
    assert r["l"] == pytest.approx(m + np.log(np.exp(x - m).sum()), rel=1e-15)
    np.testing.assert_allclose(r["s"], np.exp(x - m) / np.exp(x - m).sum(), rtol=1e-15)
    assert r["n2"] == pytest.approx(np.linalg.norm(x), rel=1e-15)
    assert r["n1"] == pytest.approx(np.linalg.norm(x, 1), rel=1e-15)
    assert r["ni"] == pytest.approx(np.linalg.norm(x, np.inf), rel=1e-15)
    assert r["g"] == pytest.approx((x ** 2).mean() + np.logaddexp(x[0], x[1]), rel=1e-15)
    # gradients: d logsumexp = softmax; d norm = x / |x|; d mean = 1/n
    for out, want in (("l", r["s"]), ("n2", x / np.linalg.norm(x)), ("m", np.full(4, 0.25))):
        np.testing.assert_allclose(p.grad(x=x, of=out, backend=backend)["x"], want,
                                   rtol=1e-14, atol=1e-16)
    for out in ("l", "n2"):
        q = prog(f"input x[4]\noutput y = {'logsumexp' if out == 'l' else 'norm'}(x)\n")
        check_hessian(q, "x", x, backend)
    # softmax's Jacobian is diag(s) - s s^T
    J = p.jacobian(x=x, of="s", backend=backend)["x"]
    np.testing.assert_allclose(J, np.diag(r["s"]) - np.outer(r["s"], r["s"]), atol=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_do_not_overflow(backend):
    p = prog("input x[3]\noutput l = logsumexp(x)\noutput s = softmax(x)\noutput n = norm(x)\n")
    r = p(x=np.array([1000.0, 999.0, -1000.0]), backend=backend)
    assert r["l"] == pytest.approx(1000 + np.log1p(np.exp(-1.0)), rel=1e-15)
    assert np.isfinite(r["s"]).all() and r["s"].sum() == pytest.approx(1.0)
    assert r["n"] == pytest.approx(1000 * np.sqrt(1 + 0.998001 + 1), rel=1e-15)
    r = p(x=np.array([1e200, 1e200, 0.0]), backend=backend)
    assert r["n"] == pytest.approx(math.sqrt(2) * 1e200, rel=1e-15)
    r = p(x=np.array([-math.inf, -math.inf, -math.inf]), backend=backend)
    assert r["l"] == -math.inf
    # the norm's gradient at the zero vector is 0 (as hypot's), not NaN
    q = prog("input x[3]\noutput n = norm(x)\n")
    np.testing.assert_array_equal(q.grad(x=np.zeros(3), backend=backend)["x"], np.zeros(3))


# --- linear algebra ------------------------------------------------------------------------

def _matrices(n):
    A = RNG.normal(size=(n, n))
    P = np.eye(n)[RNG.permutation(n)]  # a small leading entry forces a pivot
    A = P @ A
    A[0, 0] = 1e-3
    return A


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_det_inv_solve_values_and_derivative_rules(n, backend):
    A = _matrices(n)
    b = RNG.normal(size=n)
    w = RNG.normal(size=n)
    p = prog(f"input A[{n}, {n}]\ninput b[{n}]\ninput w[{n}]\ninput V[{n}, {n}]\n"
             "output d = det(A)\noutput I = inv(A)\noutput x = solve(A, b)\n"
             "output f = dot(w, solve(A, b))\noutput t = sum(V * inv(A))\n")
    V = RNG.normal(size=(n, n))
    r = p(A=A, b=b, w=w, V=V, backend=backend)
    Ainv = np.linalg.inv(A)
    assert r["d"] == pytest.approx(np.linalg.det(A), rel=1e-12)
    np.testing.assert_allclose(r["I"], Ainv, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(r["x"], np.linalg.solve(A, b), rtol=1e-11, atol=1e-12)
    # det' = det * inv(A)^T
    g = p.grad(A=A, b=b, w=w, V=V, of="d", wrt=["A"], backend=backend)["A"]
    np.testing.assert_allclose(g, np.linalg.det(A) * Ainv.T, rtol=1e-10, atol=1e-12)
    # solve's adjoint: lam = A^-T w; df/db = lam, df/dA = -lam x^T
    x = np.linalg.solve(A, b)
    lam = np.linalg.solve(A.T, w)
    gf = p.grad(A=A, b=b, w=w, V=V, of="f", wrt=["A", "b"], backend=backend)
    np.testing.assert_allclose(gf["b"], lam, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gf["A"], -np.outer(lam, x), rtol=1e-10, atol=1e-12)
    # inv' = -inv dA inv: the gradient of sum(V * inv(A)) is -inv^T V inv^T
    gt = p.grad(A=A, b=b, w=w, V=V, of="t", wrt=["A"], backend=backend)["A"]
    np.testing.assert_allclose(gt, -Ainv.T @ V @ Ainv.T, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [2, 4])
def test_linear_algebra_hessians_against_finite_differences(n, backend):
    A = _matrices(n) + 3 * np.eye(n)
    check_hessian(prog(f"input A[{n}, {n}]\noutput d = det(A)\n"), "A", A, backend)
    check_hessian(prog(f"input A[{n}, {n}]\noutput d = sum(inv(A))\n"), "A", A, backend)
    b = RNG.normal(size=n)
    check_hessian(prog(f"input A[{n}, {n}]\ninput b[{n}]\noutput d = norm(solve(A, b))\n"),
                  "A", A, backend, b=b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_solve_with_a_matrix_right_hand_side(backend):
    A = _matrices(3)
    B = RNG.normal(size=(3, 2))
    p = prog("input A[3, 3]\ninput B[3, 2]\noutput X = solve(A, B)\n")
    np.testing.assert_allclose(p(A=A, B=B, backend=backend), np.linalg.solve(A, B), rtol=1e-11)


@pytest.mark.parametrize("backend", BACKENDS)
def test_det_of_singular_matrices(backend):
    p = prog("input A[4, 4]\noutput d = det(A)\n")
    A = RNG.normal(size=(4, 4))
    A[:, 2] = 0.0
    assert p(A=A, backend=backend) == 0.0
    q = prog("input A[3, 3]\noutput d = det(A)\n")
    B = np.array([[1.0, 2, 3], [4, 5, 6], [7, 8, 9]])
    # n <= 3 is the cofactor polynomial: its gradient is the adjugate^T even when singular
    adj_t = np.array([[np.linalg.det(np.delete(np.delete(B, i, 0), j, 1)) * (-1) ** (i + j)
                       for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(q.grad(A=B, backend=backend)["A"], adj_t, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 3, 4])
def test_cholesky(n, backend):
    M = RNG.normal(size=(n, n))
    S = M @ M.T + n * np.eye(n)
    p = prog(f"input S[{n}, {n}]\noutput L = cholesky(S)\noutput f = sum(cholesky(S))\n")
    r = p(S=S, backend=backend)
    np.testing.assert_allclose(r["L"], np.linalg.cholesky(S), rtol=1e-12, atol=1e-14)
    # the gradient against finite differences of the lower triangle (which is all it reads)
    g = p.grad(S=S, of="f", backend=backend)["S"]
    lower = np.tril(np.ones((n, n)))

    def f(T):
        return np.linalg.cholesky(np.tril(T) + np.tril(T, -1).T).sum()
    np.testing.assert_allclose(g, fd_grad(f, S) * lower, rtol=1e-6, atol=1e-8)
    check_hessian(prog(f"input S[{n}, {n}]\noutput f = sum(cholesky(S))\n"), "S", S, backend,
                  rtol=1e-4, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=2 ** 32 - 1))
def test_inv_and_det_hypothesis(seed):
    """Random 4x4 matrices, pivots and all: inv(A) A = I, det against NumPy."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(4, 4)) * rng.choice([1e-3, 1.0, 1e3], size=(4, 4))
    if np.linalg.cond(A) > 1e8:
        return
    p = _inv_prog()
    r = p(A=A, backend="cpu")
    np.testing.assert_allclose(r["I"] @ A, np.eye(4), atol=1e-7)
    assert r["d"] == pytest.approx(np.linalg.det(A), rel=1e-9)


_INV: list = []


def _inv_prog():
    if not _INV:
        _INV.append(prog("input A[4, 4]\noutput I = inv(A)\noutput d = det(A)\n"))
    return _INV[0]


# --- errors and suggestions ----------------------------------------------------------------

def test_argument_errors():
    for source, error in (
        ("input x[3]\noutput y = norm(x, 3)\n", diffdsl.TypeMismatchError),
        ("input A[2, 3]\noutput y = det(A)\n", diffdsl.ShapeError),
        ("input A[2, 2]\ninput b[3]\noutput y = solve(A, b)\n", diffdsl.ShapeError),
        ("input x\noutput y = softmax(x)\n", diffdsl.ShapeError),
        ("input x\noutput y = clip(x, 1)\n", diffdsl.ArityError),
    ):
        with pytest.raises(error):
            prog(source)


def test_suggestions_come_only_from_names_close_in_spelling():
    known = {"max", "sin", "sqrt", "input", "total", "weights", "softmax", "x"}
    assert close_names("softmx", known)[0] == "softmax"
    assert close_names("sqr", known) == ["sqrt"]
    assert close_names("inptu", known) == ["input"]
    assert "max" not in close_names("softmax2", known - {"softmax"})
    assert close_names("inverse", {"sin", "max"}) == []
    assert close_names("inv", {"sin", "min"}) == []
    assert close_names("y", known) == []
    with pytest.raises(diffdsl.UnknownNameError) as info:
        prog("input x\noutput y = wobble(x)\n")
    assert "did you mean" not in str(info.value)
    with pytest.raises(diffdsl.UnknownNameError) as info:
        prog("input x\noutput y = sigmod(x)\n")
    assert "did you mean 'sigmoid'" in str(info.value)
    with pytest.raises(diffdsl.UnknownNameError) as info:
        prog("input x\noutput y = invert(x)\n")
    assert "did you mean" not in str(info.value)
