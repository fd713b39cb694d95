"""logabsdet, signdet, logdet, solve_triangular(_upper), diag and outer (issue 26, items 1
and 2): values against NumPy, SciPy and mpmath at 50 digits, gradients against the closed
forms (d log|det A| = A^-T, d log det S = S^-1, the triangular solve's adjoint system),
Hessians against central differences of gradients, on the numpy and cpu backends."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import scipy.linalg as sl
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl

BACKENDS = ["numpy", "cpu"]
RNG = np.random.default_rng(260)


def prog(source):
    return diffdsl.compile(source, cache=False)


def spd(n):
    X = RNG.standard_normal((n, n))
    return X @ X.T + n * np.eye(n)


def fd_hessian(p, name, x, backend, of, h=1e-6, **fixed):
    want = np.zeros(x.shape + x.shape)
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = h
        gp = p.grad({name: x + e, **fixed}, of=of, wrt=[name], backend=backend)[name]
        gm = p.grad({name: x - e, **fixed}, of=of, wrt=[name], backend=backend)[name]
        want[(Ellipsis,) + k] = (gp - gm) / (2 * h)
    return want


DETS = prog("input A[5, 5]\noutput l = logabsdet(A)\noutput s = signdet(A)\n"
            "output d = signdet(A) * exp(logabsdet(A))\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_logabsdet_and_signdet(backend):
    for _ in range(3):
        A = RNG.standard_normal((5, 5))
        r = DETS(A=A, backend=backend)
        sign, logabs = np.linalg.slogdet(A)
        assert r["l"] == pytest.approx(logabs, rel=1e-13, abs=1e-14)
        assert r["s"] == sign
        assert r["d"] == pytest.approx(np.linalg.det(A), rel=1e-12)
        g = DETS.grad(A=A, of="l", wrt=["A"], backend=backend)["A"]
        np.testing.assert_allclose(g, np.linalg.inv(A).T, rtol=1e-11, atol=1e-12)
    H = DETS.hessian(A=A, of="l", wrt=["A"], backend=backend)["A"]["A"]
    # d² log|det| [E, F] = -tr(A^-1 E A^-1 F)
    Ai = np.linalg.inv(A)
    np.testing.assert_allclose(H, -np.einsum("jk,li->ijkl", Ai, Ai), rtol=1e-10, atol=1e-12)
    singular = A.copy()
    singular[4] = singular[0] + singular[1]
    r = DETS(A=singular, backend=backend)
    assert r["l"] < -30  # rounding leaves a pivot of about 1e-16, or exactly 0: -inf
    zero = np.zeros((5, 5))
    r = DETS(A=zero, backend=backend)
    assert r["l"] == -np.inf and r["s"] == 0


def test_logabsdet_where_det_overflows_60x60():
    """60x60 matrices of entries near 1e-8 and 1e8 (det about 1e-520 and 1e+480), and 10 rows
    of 1e-8 among 50 of 1e8: against mpmath's determinant at 50 digits."""
    p = prog("input A[60, 60]\noutput l = logabsdet(A)\noutput s = signdet(A)\n")
    base = RNG.standard_normal((60, 60))
    mixed = base * np.where(np.arange(60) % 6 == 0, 1e-8, 1e8)[:, None]
    for A in (base * 1e-8, base * 1e8, mixed):
        with np.errstate(over="ignore", under="ignore"):
            assert np.linalg.det(A) in (0.0, np.inf, -np.inf)  # det itself is no use here
        with mpmath.workdps(50):
            d = mpmath.det(mpmath.matrix(A.tolist()))
            want, sign = float(mpmath.log(abs(d))), int(mpmath.sign(d))
        r = p(A=A, backend="numpy")
        assert r["l"] == pytest.approx(want, rel=1e-14) and r["s"] == sign


LOGDET = prog("input S[4, 4]\noutput l = logdet(S)\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_logdet(backend):
    S = spd(4)
    assert LOGDET(S=S, backend=backend) == pytest.approx(np.linalg.slogdet(S)[1], rel=1e-14)
    g = LOGDET.grad(S=S, wrt=["S"], backend=backend)["S"]
    Si = np.linalg.inv(S)
    # it reads the lower triangle, as cholesky does: an entry below the diagonal stands for
    # both of its places in S
    np.testing.assert_allclose(g, np.tril(2 * Si) - np.diag(np.diag(Si)), rtol=1e-12,
                               atol=1e-14)
    H = LOGDET.hessian(S=S, wrt=["S"], backend=backend)["S"]["S"]
    np.testing.assert_allclose(H, fd_hessian(LOGDET, "S", S, backend, None), rtol=1e-5,
                               atol=1e-7)
    assert np.isnan(LOGDET(S=-S, backend=backend))


SOLVES = prog("input L[4, 4]\ninput b[4]\ninput B[4, 2]\ninput w[4]\n"
              "output x = solve_triangular(L, b)\noutput X = solve_triangular(L, B)\n"
              "output y = solve_triangular_upper(transpose(L), b)\n"
              "output Y = solve_triangular_upper(transpose(L), B)\n"
              "output f = dot(w, solve_triangular(L, b))\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_solve_triangular(backend):
    L = np.tril(RNG.standard_normal((4, 4))) + 3 * np.eye(4)
    junk = L + np.triu(RNG.standard_normal((4, 4)), 1)  # the other triangle is not read
    b, B, w = RNG.standard_normal(4), RNG.standard_normal((4, 2)), RNG.standard_normal(4)
    r = SOLVES(L=junk, b=b, B=B, w=w, backend=backend)
    np.testing.assert_allclose(r["x"], sl.solve_triangular(L, b, lower=True), rtol=1e-13)
    np.testing.assert_allclose(r["X"], sl.solve_triangular(L, B, lower=True), rtol=1e-13)
    np.testing.assert_allclose(r["y"], sl.solve_triangular(L.T, b), rtol=1e-13)
    np.testing.assert_allclose(r["Y"], sl.solve_triangular(L.T, B), rtol=1e-13)
    g = SOLVES.grad(L=junk, b=b, B=B, w=w, of="f", wrt=["L", "b"], backend=backend)
    lam = sl.solve_triangular(L.T, w)  # the adjoint system L' lam = w
    np.testing.assert_allclose(g["b"], lam, rtol=1e-12)
    np.testing.assert_allclose(g["L"], -np.tril(np.outer(lam, r["x"])), rtol=1e-12, atol=1e-14)
    H = SOLVES.hessian(L=junk, b=b, B=B, w=w, of="f", wrt=["L"], backend=backend)["L"]["L"]
    np.testing.assert_allclose(H, fd_hessian(SOLVES, "L", junk, backend, "f", b=b, B=B, w=w),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_diag_and_outer(backend):
    p = prog("input A[3, 4]\ninput u[3]\ninput v[2]\noutput d = diag(A)\noutput D = diag(u)\n"
             "output O = outer(u, v)\noutput f = sum(outer(u, v) ** 2) + trace(diag(u) @ "
             "diag(u))\n")
    A, u, v = RNG.standard_normal((3, 4)), RNG.standard_normal(3), RNG.standard_normal(2)
    r = p(A=A, u=u, v=v, backend=backend)
    np.testing.assert_array_equal(r["d"], np.diag(A))
    np.testing.assert_array_equal(r["D"], np.diag(u))
    np.testing.assert_array_equal(r["O"], np.outer(u, v))
    g = p.grad(A=A, u=u, v=v, of="f", wrt=["u", "v"], backend=backend)
    np.testing.assert_allclose(g["u"], 2 * u * (v @ v) + 2 * u, rtol=1e-14)
    np.testing.assert_allclose(g["v"], 2 * v * (u @ u), rtol=1e-14)
    H = p.hessian(A=A, u=u, v=v, of="f", wrt=["u"], backend=backend)["u"]["u"]
    np.testing.assert_allclose(H, (2 * (v @ v) + 2) * np.eye(3), rtol=1e-14)


_GAUSS = []


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_hypothesis_logdet_through_solves(seed):
    """logdet(S) = 2 sum(log(diag(L))) and x' S^-1 x = |L^-1 x|² for random SPD S."""
    if not _GAUSS:
        _GAUSS.append(prog("input S[3, 3]\ninput x[3]\noutput l = logdet(S)\n"
                           "output q = dot(solve_triangular(cholesky(S), x), "
                           "solve_triangular(cholesky(S), x))\noutput m = logabsdet(S)\n"))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((3, 3))
    S, x = X @ X.T + 0.1 * np.eye(3), rng.standard_normal(3)
    r = _GAUSS[0](S=S, x=x)
    assert r["l"] == pytest.approx(np.linalg.slogdet(S)[1], rel=1e-12, abs=1e-12)
    assert r["m"] == pytest.approx(r["l"], rel=1e-12, abs=1e-12)
    assert r["q"] == pytest.approx(x @ np.linalg.solve(S, x), rel=1e-10)


@pytest.mark.parametrize("source, error, where", [
    ("input A[2, 3]\noutput y = logabsdet(A)\n", diffdsl.ShapeError, "2:12"),
    ("input A[3, 3]\ninput b[2]\noutput y = solve_triangular(A, b)\n", diffdsl.ShapeError,
     "3:12"),
    ("input A[3, 3]\noutput y = solve_triangular_upper(A)\n", diffdsl.ArityError, "2:12"),
    ("input x\noutput y = diag(x)\n", diffdsl.ShapeError, "2:12"),
    ("input A[2, 2]\ninput u[2]\noutput y = outer(A, u)\n", diffdsl.ShapeError, "3:12"),
    ("input A[2, 3]\noutput y = logdet(A)\n", diffdsl.ShapeError, "2:12"),
    ("input A[2, 3]\noutput y = signdet(A)\n", diffdsl.ShapeError, "2:12"),
])
def test_errors_are_located(source, error, where):
    with pytest.raises(error) as e:
        diffdsl.compile(source, cache=False)
    assert where in str(e.value)
