"""eigvalsh and eigh (issue 26, item 3) against NumPy, and their derivatives against the
closed-form perturbation formulas of the symmetric eigenproblem (first and second order),
on the numpy and cpu backends; repeated eigenvalues: the values, an orthonormal basis of each
eigenspace, finite derivatives whose sum over a cluster is exact and which lie in the range the
cluster's eigenvalues allow (Schur-Horn)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl

BACKENDS = ["numpy", "cpu"]
RNG = np.random.default_rng(26)
_PROGS = {}


def prog(n):
    if n not in _PROGS:
        _PROGS[n] = diffdsl.compile(f"input A[{n}, {n}]\noutput w = eigvalsh(A)\n"
                                    "output V = eigh(A)\n", cache=False)
    return _PROGS[n]


def sym(n):
    X = RNG.standard_normal((n, n))
    return (X + X.T) / 2


def with_spectrum(w):
    n = len(w)
    Q, _ = np.linalg.qr(RNG.standard_normal((n, n)))
    A = Q @ np.diag(w) @ Q.T
    return (A + A.T) / 2


def signed(V):
    """The stated rule: each column's entry of largest magnitude is positive."""
    return V * np.sign(V[np.abs(V).argmax(axis=0), range(V.shape[1])])


def perturbation(A, E):
    """dλ_i = v_i' E v_i, dv_i = sum_j≠i v_j (v_j' E v_i) / (λ_i - λ_j), and
    d²λ_i = 2 sum_j≠i (v_j' E v_i)² / (λ_i - λ_j): distinct eigenvalues."""
    lam, V = np.linalg.eigh(A)
    V = signed(V)
    F = V.T @ E @ V
    gap = lam[None, :] - lam[:, None] + np.eye(len(lam))
    G = np.where(np.eye(len(lam)) == 1, 0.0, F / gap)
    return np.diag(F), V @ G, 2 * (F ** 2 * np.where(np.eye(len(lam)) == 1, 0.0, 1 / gap)).sum(0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_values_and_first_derivatives(n, backend):
    A, E = sym(n), sym(n)
    p = prog(n)
    r = p(A=A, backend=backend)
    lam, V = np.linalg.eigh(A)
    np.testing.assert_allclose(r["w"], lam, rtol=0, atol=2e-15 * np.abs(lam).max())
    np.testing.assert_allclose(r["V"], signed(V), atol=1e-14)
    with mpmath.workdps(50):
        exact = np.array(mpmath.eigsy(mpmath.matrix(A.tolist()), eigvals_only=True).tolist(),
                         dtype=float).ravel()
    np.testing.assert_allclose(r["w"], np.sort(exact), rtol=0, atol=2e-15 * np.abs(lam).max())
    dlam, dV, _ = perturbation(A, E)
    np.testing.assert_allclose(p.jvp({"A": E}, A=A, of="w", backend=backend), dlam, atol=1e-13)
    np.testing.assert_allclose(p.jvp({"A": E}, A=A, of="V", backend=backend), dV, atol=1e-12)


def test_reads_the_lower_triangle():
    A = sym(3)
    B = np.tril(A) + np.triu(RNG.standard_normal((3, 3)), 1)  # junk above the diagonal
    np.testing.assert_allclose(prog(3)(A=B)["w"], np.linalg.eigvalsh(B), atol=1e-14)
    g = prog(3).vjp(np.ones(3), A=B, of="w")["A"]
    assert np.all(np.triu(g, 1) == 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_derivatives_of_the_eigenvalues(backend):
    n = 3
    p = diffdsl.compile(f"input A[{n}, {n}]\ninput c[{n}]\noutput f = dot(c, eigvalsh(A))\n",
                        cache=False)
    A, c = sym(n), RNG.standard_normal(n)
    H = p.hessian({"A": A, "c": c}, wrt=["A"], backend=backend)["A"]["A"]
    for _ in range(3):
        E = sym(n)
        _, _, d2 = perturbation(A, E)
        assert np.einsum("ij,ijkl,kl", E, H, E) == pytest.approx(c @ d2, rel=1e-10, abs=1e-12)
    # and a mixed one against central differences of the gradient
    E, F = sym(n), sym(n)
    h = 1e-6
    gp = p.grad({"A": A + h * F, "c": c}, wrt=["A"], backend=backend)["A"]
    gm = p.grad({"A": A - h * F, "c": c}, wrt=["A"], backend=backend)["A"]
    fd = np.sum((gp - gm) / (2 * h) * E)
    assert np.einsum("ij,ijkl,kl", E, H, F) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_second_derivatives_of_the_eigenvectors():
    """The Hessian of a weighted sum of eigh's columns against central differences of its
    gradient along symmetric directions (the sort and the sign rule are constant nearby)."""
    n = 3
    p = diffdsl.compile(f"input A[{n}, {n}]\ninput W[{n}, {n}]\noutput f = sum(W * eigh(A))\n",
                        cache=False)
    A, W = sym(n), RNG.standard_normal((n, n))
    H = p.hessian({"A": A, "W": W}, wrt=["A"])["A"]["A"]
    h = 1e-6
    for _ in range(2):
        E, F = sym(n), sym(n)
        gp = p.grad({"A": A + h * F, "W": W}, wrt=["A"])["A"]
        gm = p.grad({"A": A - h * F, "W": W}, wrt=["A"])["A"]
        fd = np.sum((gp - gm) / (2 * h) * E)
        assert np.einsum("ij,ijkl,kl", E, H, F) == pytest.approx(fd, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("spectrum", [[1.0, 1.0, 2.0], [-1.0, 3.0, 3.0], [2.0, 2.0, 2.0],
                                      [0.0, 0.0, 0.0, 5.0]])
def test_repeated_eigenvalues(spectrum):
    n = len(spectrum)
    A, E = with_spectrum(spectrum), sym(n)
    p = prog(n)
    r = p(A=A)
    np.testing.assert_allclose(r["w"], sorted(spectrum), atol=1e-14)
    V = r["V"]
    np.testing.assert_allclose(V.T @ V, np.eye(n), atol=1e-14)  # an orthonormal basis ...
    np.testing.assert_allclose(A @ V, V * r["w"], atol=1e-14)  # ... of eigenvectors
    dw = p.jvp({"A": E}, A=A, of="w")
    assert np.all(np.isfinite(dw)) and np.all(np.isfinite(p.jvp({"A": E}, A=A, of="V")))
    lam, Q = np.linalg.eigh(A)
    for value in set(spectrum):
        at = np.abs(lam - value) < 1e-9
        mu = np.linalg.eigvalsh(Q[:, at].T @ E @ Q[:, at])  # the cluster's one-sided rates
        got = np.sort(dw[at])
        assert got.sum() == pytest.approx(mu.sum(), abs=1e-13)
        # Schur-Horn: the diagonal of W' E W for an orthonormal basis W of the eigenspace
        # is majorised by the eigenvalues of E there
        assert np.all(np.cumsum(got) >= np.cumsum(mu) - 1e-12)


def test_exactly_diagonal_and_identity():
    p = prog(3)
    E = sym(3)
    r = p(A=np.diag([3.0, 1.0, 2.0]))
    np.testing.assert_array_equal(r["w"], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(r["V"], np.eye(3)[:, [1, 2, 0]])
    dw = p.jvp({"A": E}, A=np.eye(3), of="w")
    assert np.all(np.isfinite(dw)) and dw.sum() == pytest.approx(np.trace(E), abs=1e-14)
    # an exactly repeated eigenvalue, where JAX's and PyTorch's eigenvector derivatives are NaN
    dV = p.jvp({"A": E}, A=np.diag([1.0, 1.0, 2.0]), of="V")
    assert np.all(np.isfinite(dV))


_HYP = {}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), scale=st.sampled_from([1e-8, 1.0, 1e8]))
def test_hypothesis_random_symmetric(seed, scale):
    """Random 4x4 symmetric matrices at scales from 1e-8 to 1e8: values, vectors, A V = V Λ."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((4, 4)) * scale
    A = X + X.T
    r = prog(4)(A=A)
    lam = np.linalg.eigvalsh(A)
    tol = 1e-14 * np.abs(lam).max()
    np.testing.assert_allclose(r["w"], lam, rtol=0, atol=tol)
    np.testing.assert_allclose(r["V"].T @ r["V"], np.eye(4), atol=1e-14)
    np.testing.assert_allclose(A @ r["V"], r["V"] * r["w"], atol=2 * tol)


@pytest.mark.parametrize("source, error", [
    ("input A[2, 3]\noutput w = eigvalsh(A)\n", diffdsl.ShapeError),
    ("input x[3]\noutput V = eigh(x)\n", diffdsl.ShapeError),
    ("input A[2, 2]\noutput V = eigh(A, A)\n", diffdsl.ArityError),
])
def test_errors(source, error):
    with pytest.raises(error) as e:
        diffdsl.compile(source, cache=False)
    assert "1:" in str(e.value) or "2:" in str(e.value)
