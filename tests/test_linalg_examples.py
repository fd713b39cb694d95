"""The programs of examples/linalg/ (issue 26) against independent implementations: SciPy's
multivariate normal and PyTorch's autograd (float64) for the Gaussian log-likelihood, NumPy's
slogdet and the change-of-variables gradient for the linear flow, NumPy's eigh and
(v_i - v_j)^2 for the graph's connectivity, SciPy's expm and expm_frechet for the oscillator;
on the default backend and the numpy interpreter; and one of them through `diffdsl check`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.linalg as sl
from scipy.stats import multivariate_normal

import diffdsl
from diffdsl.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "linalg"
BACKENDS = [None, "numpy"]  # None: the default backend
RNG = np.random.default_rng(2601)


def load(name):
    return diffdsl.load(str(EXAMPLES / name))


def test_every_example_is_tested_here():
    tested = {"gaussian_loglik.dd", "linear_flow.dd", "fiedler.dd", "linear_ode.dd"}
    assert {p.name for p in EXAMPLES.glob("*.dd")} == tested


@pytest.mark.parametrize("backend", BACKENDS)
def test_gaussian_loglik(backend):
    torch = pytest.importorskip("torch")
    p = load("gaussian_loglik.dd")
    X = RNG.standard_normal((3, 3))
    S, x, mu = X @ X.T + np.eye(3), RNG.standard_normal(3), RNG.standard_normal(3)
    ll = p(S=S, x=x, mu=mu, backend=backend)
    assert ll == pytest.approx(multivariate_normal(mu, S).logpdf(x), rel=1e-13)
    g = p.grad(S=S, x=x, mu=mu, backend=backend)
    St, xt, mut = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (S, x, mu))
    dist = torch.distributions.MultivariateNormal(mut, covariance_matrix=St)
    dist.log_prob(xt).backward()
    np.testing.assert_allclose(g["x"], xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(g["mu"], mut.grad.numpy(), rtol=1e-12)
    # along symmetric directions (both read S as a symmetric matrix, each its own way)
    for _ in range(3):
        E = RNG.standard_normal((3, 3))
        E = E + E.T
        assert np.sum(g["S"] * E) == pytest.approx(np.sum(St.grad.numpy() * E), rel=1e-11)


@pytest.mark.parametrize("backend", BACKENDS)
def test_linear_flow(backend):
    p = load("linear_flow.dd")
    for scale in (1.0, 1e-70, 1e70):  # det W about 1e-350 and 1e350 at the ends
        W = RNG.standard_normal((5, 5)) * scale
        b, x = RNG.standard_normal(5), RNG.standard_normal(5)
        r = p(W=W, b=b, x=x, backend=backend)
        y = W @ x + b
        sign, logabs = np.linalg.slogdet(W)
        want = -0.5 * y @ y - 2.5 * np.log(2 * np.pi) + logabs
        assert r["logp"] == pytest.approx(want, rel=1e-12) and r["orientation"] == sign
    W = RNG.standard_normal((5, 5))
    g = p.grad(W=W, b=b, x=x, of="logp", backend=backend)
    y = W @ x + b
    np.testing.assert_allclose(g["W"], -np.outer(y, x) + np.linalg.inv(W).T, rtol=1e-11)
    np.testing.assert_allclose(g["b"], -y, rtol=1e-12)
    np.testing.assert_allclose(g["x"], -W.T @ y, rtol=1e-12)


EDGES = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 2), (0, 4)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_fiedler(backend):
    p = load("fiedler.dd")
    w = RNG.uniform(0.5, 2.0, 7)
    L = np.zeros((5, 5))
    for (i, j), wk in zip(EDGES, w, strict=True):
        L[[i, j], [i, j]] += wk
        L[i, j] -= wk
        L[j, i] -= wk
    lam, V = np.linalg.eigh(L)
    v = V[:, 1] * np.sign(V[np.abs(V[:, 1]).argmax(), 1])
    r = p(w=w, backend=backend)
    assert r["connectivity"] == pytest.approx(lam[1], rel=1e-13)
    np.testing.assert_allclose(r["split"], v, atol=1e-13)
    g = p.grad(w=w, of="connectivity", backend=backend)["w"]
    np.testing.assert_allclose(g, [(v[i] - v[j]) ** 2 for i, j in EDGES], rtol=1e-11,
                               atol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_linear_ode(backend):
    p = load("linear_ode.dd")
    k, c = 2.3, 0.4
    A = np.array([[0.0, 1.0], [-k, -c]])
    times, seen = [0.5, 1.5, 4.0], [0.85, 0.15, -0.2]
    r = [(sl.expm(t * A) @ [1.0, 0.0])[0] - s for t, s in zip(times, seen, strict=True)]
    assert p(k=k, c=c, backend=backend) == pytest.approx(sum(e * e for e in r), rel=1e-13)
    g = p.grad(k=k, c=c, backend=backend)
    for name, dA in (("k", [[0.0, 0.0], [-1.0, 0.0]]), ("c", [[0.0, 0.0], [0.0, -1.0]])):
        want = sum(2 * e * (sl.expm_frechet(t * A, t * np.array(dA), compute_expm=False)
                            @ [1.0, 0.0])[0] for t, e in zip(times, r, strict=True))
        assert g[name] == pytest.approx(want, rel=1e-11)


def test_check_on_an_example(capsys):
    status = main(["check", str(EXAMPLES / "linear_ode.dd"), "--domain", "k=1:3",
                   "--domain", "c=0.1:1"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "d/dk of miss" in out and "d/dc of miss" in out and "ok" in out


def test_every_new_builtin_on_the_cuda_backend():
    """The CUDA backend (under Numba's simulator where there is no GPU, as tests/conftest.py
    sets) against the numpy interpreter: values and a gradient through every new builtin."""
    from diffdsl.backends import cuda

    if not cuda.available():
        pytest.skip("no CUDA GPU and no simulator")
    p = diffdsl.compile("input A[3, 3]\ninput S[3, 3]\ninput b[3]\n"
                        "output l = logabsdet(A) + signdet(A) + logdet(S)\n"
                        "output x = solve_triangular(A, b) + solve_triangular_upper(A, b)\n"
                        "output w = eigvalsh(S)\noutput V = eigh(S)\noutput E = expm(A)\n"
                        "output f = sum(diag(eigh(S)) * eigvalsh(S)) + trace(expm(A)) + "
                        "logdet(S) + sum(outer(b, b))\n", cache=False)
    X = RNG.standard_normal((3, 3))
    given = {"A": X + 3 * np.eye(3), "S": X @ X.T + np.eye(3), "b": RNG.standard_normal(3)}
    want, got = p(given, backend="numpy"), p(given, backend="cuda")
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-13, atol=1e-14)
    g_want = p.grad(given, of="f", backend="numpy")
    g_got = p.grad(given, of="f", backend="cuda")
    for name in g_want:
        np.testing.assert_allclose(g_got[name], g_want[name], rtol=1e-12, atol=1e-13)
