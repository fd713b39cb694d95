"""GradBench's bundle adjustment as bench/gradbench runs it: ba.dd, one observation, against a
NumPy transcription of GradBench's C++ (cpp/gradbench/evals/ba.hpp), and ba.py's sparse
Jacobian, assembled from batched per-observation blocks, against central differences of the
whole objective over every camera, point and weight, on problems whose cameras and points
differ (GradBench's own copies one camera and one point, which would hide a wrong column)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gradbench"
sys.path.insert(0, str(BENCH))
import ba  # noqa: E402


@pytest.fixture(scope="module")
def prog():
    return diffdsl.load(BENCH / "ba.dd", backend="cpu")


def project(cam: np.ndarray, X: np.ndarray) -> np.ndarray:
    """GradBench's project(), line by line."""
    rot, pt = cam[:3], X - cam[3:6]
    sqtheta = rot @ rot
    if sqtheta != 0:
        theta = np.sqrt(sqtheta)
        w = rot / theta
        tmp = (w @ pt) * (1 - np.cos(theta))
        xcam = pt * np.cos(theta) + np.cross(w, pt) * np.sin(theta) + w * tmp
    else:
        xcam = pt + np.cross(rot, pt)
    proj = xcam[:2] / xcam[2]
    rsq = proj @ proj
    proj = proj * (1 + cam[9] * rsq + cam[10] * rsq * rsq)
    return proj * cam[6] + cam[7:9]


def problem(n: int, m: int, p: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    # small rotations and points far in front: every point well inside the view, where
    # central differences are accurate to 1e-5
    cams = np.concatenate([rng.normal(scale=0.3, size=(n, 3)), rng.normal(size=(n, 3)),
                           rng.uniform(300, 500, size=(n, 1)), rng.normal(size=(n, 2)),
                           rng.normal(scale=0.01, size=(n, 2))], axis=1)
    X = rng.normal(size=(m, 3)) + [0, 0, 20]
    obs = np.stack([rng.integers(0, n, size=p), rng.integers(0, m, size=p)], axis=1)
    return {"cams": cams, "X": X, "w": rng.uniform(0.5, 1.5, size=p),
            "feats": rng.normal(scale=100, size=(p, 2)), "obs": obs}


def residuals(prog, data: dict) -> np.ndarray:
    out = prog.evaluate(ba.rows_of(data))
    return np.concatenate([out["err"].ravel(), out["w_err"]])


def dense(sparse: dict, shape: tuple) -> np.ndarray:
    J = np.zeros(shape)
    for r in range(shape[0]):
        for k in range(sparse["rows"][r], sparse["rows"][r + 1]):
            J[r, sparse["cols"][k]] += sparse["vals"][k]
    return J


def test_the_program_is_gradbench_s_objective(prog):
    data = problem(3, 5, 9, seed=1)
    data["cams"][1, :3] = 0  # the zero-angle branch
    out = prog.evaluate(ba.rows_of(data))
    for i, (c, j) in enumerate(data["obs"]):
        expected = data["w"][i] * (project(data["cams"][c], data["X"][j]) - data["feats"][i])
        np.testing.assert_allclose(out["err"][i], expected, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(out["w_err"], 1 - data["w"] ** 2, rtol=1e-15)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 4), m=st.integers(1, 5), p=st.integers(1, 12), seed=st.integers(0, 99))
def test_the_sparse_jacobian_is_the_objective_s_derivative(prog, n, m, p, seed):
    data = problem(n, m, p, seed)
    sparse = ba.jacobian(prog, data)
    width = ba.CAMERA * n + 3 * m + p
    assert sparse["rows"].shape == (3 * p + 1,) and sparse["cols"].shape == (31 * p,)
    assert np.all(np.diff(sparse["rows"]) == [15] * (2 * p) + [1] * p)
    J = dense(sparse, (3 * p, width))
    flat = np.concatenate([data["cams"].ravel(), data["X"].ravel(), data["w"]])

    def f(v):
        return residuals(prog, {**data, "cams": v[:ba.CAMERA * n].reshape(n, ba.CAMERA),
                                "X": v[ba.CAMERA * n:-p].reshape(m, 3), "w": v[-p:]})

    h = 1e-6 * np.maximum(1, np.abs(flat))
    for k in range(width):
        e = np.zeros(width)
        e[k] = h[k]
        fd = (f(flat + e) - f(flat - e)) / (2 * h[k])
        np.testing.assert_allclose(J[:, k], fd, rtol=1e-5, atol=1e-5 * (1 + np.abs(fd).max()))


def test_what_gradbench_is_shown(prog):
    data = problem(2, 3, 12, seed=3)  # 37 row offsets: each array has 31 entries to show
    sparse = ba.jacobian(prog, data)
    shown = ba.shown(sparse).reshape(3, 31)
    for k, key in enumerate(("rows", "cols", "vals")):
        assert np.array_equal(shown[k], np.concatenate([sparse[key][:30], sparse[key][-1:]]))
    value = ba.objective(prog, data)
    out = prog.evaluate(ba.rows_of(data))
    assert np.array_equal(value, [*out["err"][0], 12, out["w_err"][0], 12])
