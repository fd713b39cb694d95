"""expm (issue 26, item 4): values against mpmath's expm at 50 digits and scipy.linalg.expm
over 1-norms from 1e-3 to 1e3; first and second derivatives against the block-triangular
identities expm([[A, E], [0, A]]) and expm([[A, E, 0], [0, A, E], [0, 0, A]]) (Mathias
1996), on the numpy and cpu backends."""

from __future__ import annotations

import warnings

import mpmath
import numpy as np
import pytest
import scipy.linalg as sl
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import diffdsl

BACKENDS = ["numpy", "cpu"]
RNG = np.random.default_rng(2026)
U = 2.0 ** -53
_PROGS = {}


def prog(n):
    if n not in _PROGS:
        _PROGS[n] = diffdsl.compile(f"input A[{n}, {n}]\ninput W[{n}, {n}]\n"
                                    "output E = expm(A)\noutput f = sum(W * expm(A))\n",
                                    cache=False)
    return _PROGS[n]


def of_norm(n, norm):
    A = RNG.standard_normal((n, n))
    return A * norm / np.abs(A).sum(axis=0).max()


def exact(A):
    with mpmath.workdps(50):
        return np.array(mpmath.expm(mpmath.matrix(A.tolist())).tolist(), dtype=float)


def rel(X, Y):
    return np.linalg.norm(X - Y, 1) / np.linalg.norm(Y, 1)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_values_over_six_decades_of_norm(n):
    p = prog(n)
    for norm in np.logspace(-3, 3, 7):
        A = of_norm(n, norm)
        got, truth = p(A=A, W=A)["E"], exact(A)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            scipy_value, kappa = sl.expm(A), sl.expm_cond(A)
        # 1e-13 where expm is well conditioned; past that, a few roundings times its
        # condition number, the accuracy any backward-stable method has
        bound = max(1e-13, 4 * U * kappa)
        assert rel(got, truth) < bound, (norm, rel(got, truth), kappa)
        assert rel(got, scipy_value) < bound + rel(scipy_value, truth)


def test_symmetric_and_special_matrices():
    p = prog(3)
    for norm in (1e-3, 1.0, 30.0, 1e3):
        X = of_norm(3, norm)
        S = -(X @ X.T) / norm  # symmetric, eigenvalues <= 0: well conditioned
        lam, Q = np.linalg.eigh(S)
        assert rel(p(A=S, W=S)["E"], Q @ np.diag(np.exp(lam)) @ Q.T) < 1e-13
    np.testing.assert_array_equal(p(A=np.zeros((3, 3)), W=np.zeros((3, 3)))["E"], np.eye(3))
    N = np.triu(RNG.standard_normal((3, 3)), 1)  # nilpotent: I + N + N^2 / 2
    assert rel(p(A=N, W=N)["E"], np.eye(3) + N + N @ N / 2) < 1e-15
    one = diffdsl.compile("input a[1, 1]\noutput e = expm(a)\n", cache=False)
    for x in (-700.0, -3.0, 1e-9, 0.5, 700.0):
        # exp is |x| conditioned: 700 u of error is what the input itself carries
        want = np.exp(x)
        assert one(a=np.array([[x]]))[0, 0] == pytest.approx(want, rel=4 * U * max(1, abs(x)))


def test_past_the_squarings_written_out_is_nan():
    p = prog(2)
    A = np.array([[-1e6, 0.0], [0.0, -2e6]])
    assert np.all(np.isnan(p(A=A, W=A)["E"]))
    ok = np.array([[-1e5, 0.0], [0.0, -2e5]])
    np.testing.assert_array_equal(p(A=ok, W=ok)["E"], np.zeros((2, 2)))


def frechet(A, E):
    n = len(A)
    return sl.expm(np.block([[A, E], [np.zeros((n, n)), A]]))[:n, n:]


def second(A, E, F):
    """d²/ds dt expm(A + sE + tF) at 0: two corners of block bidiagonal exponentials."""
    n, Z = len(A), np.zeros_like(A)
    def corner(X, Y):
        return sl.expm(np.block([[A, X, Z], [Z, A, Y], [Z, Z, A]]))[:n, 2 * n:]
    return corner(E, F) + corner(F, E)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("norm", [0.01, 1.0, 20.0, 300.0])
def test_first_derivatives(norm, backend):
    n = 3
    p = prog(n)
    A, E, W = of_norm(n, norm), RNG.standard_normal((n, n)), RNG.standard_normal((n, n))
    L = frechet(A, E)
    got = p.jvp({"A": E}, A=A, W=W, of="E", backend=backend)
    assert rel(got, L) < 1e-12 * max(1.0, norm)
    g = p.grad(A=A, W=W, of="f", wrt=["A"], backend=backend)["A"]
    g_true = frechet(A.T, W)  # the adjoint of L(A, .) is L(A', .)
    assert rel(g, g_true) < 1e-12 * max(1.0, norm)


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_derivatives(backend):
    n = 2
    p = prog(n)
    A, W = of_norm(n, 8.0), RNG.standard_normal((n, n))  # 8 > theta_13: squarings taken
    H = p.hessian({"A": A, "W": W}, of="f", wrt=["A"], backend=backend)["A"]["A"]
    for _ in range(3):
        E, F = RNG.standard_normal((n, n)), RNG.standard_normal((n, n))
        want = np.sum(W * second(A, E, F))
        assert np.einsum("ij,ijkl,kl", E, H, F) == pytest.approx(want, rel=1e-11)


@pytest.mark.parametrize("source, error", [
    ("input A[2, 3]\noutput E = expm(A)\n", diffdsl.ShapeError),
    ("input x\noutput E = expm(x)\n", diffdsl.ShapeError),
])
def test_errors(source, error):
    with pytest.raises(error):
        diffdsl.compile(source, cache=False)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), decade=st.floats(-3, 3))
def test_hypothesis_random_matrices(seed, decade):
    """Random 3x3 matrices of 1-norm 10^decade against mpmath at 50 digits."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((3, 3))
    A *= 10 ** decade / np.abs(A).sum(axis=0).max()
    want = exact(A)
    assume(np.all(np.isfinite(want)))  # exp of a norm near 1000 may be past float64 (seed 240)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            kappa = np.nan_to_num(sl.expm_cond(A))
        except ValueError:  # SciPy's estimate meets inf inside, near overflow
            kappa = 0.0
    # SciPy's estimate fails where expm is near overflow; the condition number of exp at a
    # normal matrix is its norm, and no matrix has a smaller one (Van Loan 1977)
    kappa = max(kappa, 10 ** decade)
    assert rel(prog(3)(A=A, W=A)["E"], want) < max(1e-13, 4 * U * kappa)
