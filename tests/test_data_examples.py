"""The examples with their data inside (examples/data/): k-means, an MLP and a Gaussian
mixture, each against NumPy written from the math (not from the `.dd` text): values, and
gradients by hand where the closed form is short, else by central finite differences. The MLP
and the mixture are also written as in NumPy (`*_arrays.dd`), against the same oracles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

import diffdsl
from diffdsl.graph.loops import has_regions

DATA = Path(__file__).resolve().parent.parent / "examples" / "data"


def load(name: str):
    return diffdsl.load(str(DATA / name))


def draw(prog, seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.normal(size=shape) for name, shape in prog.inputs.items()}


def test_every_data_example_is_tested_here():
    assert sorted(p.name for p in DATA.glob("*.dd")) == [
        "gmm.dd", "gmm_arrays.dd", "kmeans.dd", "mlp.dd", "mlp_arrays.dd"]


@pytest.mark.parametrize("name", ["gmm.dd", "gmm_arrays.dd", "kmeans.dd", "mlp.dd",
                                  "mlp_arrays.dd"])
def test_the_loop_over_the_data_stays_a_loop(name):
    prog = load(name)
    assert has_regions(prog.graph)
    data = max(np.prod(shape, dtype=int) for shape in prog.inputs.values())
    # The data are read in place: the graph is much smaller than they are.
    assert len(prog.graph.nodes) < data / 5


def test_kmeans_cost_and_its_gradient():
    prog = load("kmeans.dd")
    v = draw(prog)
    P, C = v["P"], v["C"]
    dist = ((P[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    nearest = dist.argmin(axis=1)
    np.testing.assert_allclose(prog(v), dist.min(axis=1).sum(), rtol=1e-12)
    diff = P - C[nearest]
    dC = np.zeros_like(C)
    np.add.at(dC, nearest, -2 * diff)
    grads = prog.grad(v)
    np.testing.assert_allclose(grads["P"], 2 * diff, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads["C"], dC, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("name", ["mlp.dd", "mlp_arrays.dd"])
def test_mlp_loss_and_its_gradient_by_hand(name):
    prog = load(name)
    v = draw(prog, 1)
    X, Y, W1, b1, w2, b2 = (v[k] for k in ("X", "Y", "W1", "b1", "w2", "b2"))
    n = X.shape[0]
    H = np.tanh(X @ W1.T + b1)
    r = H @ w2 + b2 - Y
    np.testing.assert_allclose(prog(v), np.mean(r ** 2), rtol=1e-12)
    g = 2 * r / n
    dH = np.outer(g, w2) * (1 - H ** 2)
    expected = {"X": dH @ W1, "Y": -g, "W1": dH.T @ X, "b1": dH.sum(axis=0), "w2": H.T @ g,
                "b2": g.sum()}
    grads = prog.grad(v)
    for name, value in expected.items():
        np.testing.assert_allclose(grads[name], value, rtol=1e-10, atol=1e-12, err_msg=name)


def gmm_loglik(X, alpha, mu, q):
    n, d = X.shape
    scaled = np.exp(q)[None, :, :] * (X[:, None, :] - mu[None, :, :])  # (n, k, d)
    inner = alpha[None, :] + q.sum(axis=1)[None, :] - 0.5 * (scaled ** 2).sum(axis=2)
    return (logsumexp(inner, axis=1).sum() - n * logsumexp(alpha)
            - 0.5 * n * d * np.log(2 * np.pi))


@pytest.mark.parametrize("name", ["gmm.dd", "gmm_arrays.dd"])
def test_gmm_loglikelihood_against_numpy_and_finite_differences(name):
    prog = load(name)
    v = draw(prog, 2)
    v["q"] *= 0.3
    np.testing.assert_allclose(prog(v), gmm_loglik(v["X"], v["alpha"], v["mu"], v["q"]),
                               rtol=1e-12)
    grads = prog.grad(v)
    rng = np.random.default_rng(3)
    for name in ("alpha", "mu", "q", "X"):
        direction = rng.normal(size=v[name].shape)
        h = 1e-5
        up = gmm_loglik(**dict(v, **{name: v[name] + h * direction}))
        down = gmm_loglik(**dict(v, **{name: v[name] - h * direction}))
        np.testing.assert_allclose(np.sum(grads[name] * direction), (up - down) / (2 * h),
                                   rtol=1e-6, err_msg=name)
