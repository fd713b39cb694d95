"""GradBench's hand tracking as bench/gradbench runs it: ht.dd, one correspondence, against a
NumPy transcription of GradBench's C++ (cpp/gradbench/evals/ht.hpp) with the model ht.dd holds,
and ht.py's (3c, 28) Jacobian, from a batch, against central differences of the objective by
each correspondence's barycentric coordinates and by the pose."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import diffdsl

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gradbench"
sys.path.insert(0, str(BENCH))
import ht  # noqa: E402

TEXT = (BENCH / "ht.dd").read_text()


def const(name: str):
    found = re.search(rf"^const {name} = (.*?)(?=^\S)", TEXT, flags=re.M | re.S)
    return np.array(ast.literal_eval(found.group(1).split("#")[0].strip()))


@pytest.fixture(scope="module")
def prog():
    return diffdsl.load(BENCH / "ht.dd", backend="cpu")


def euler(xzy):
    tx, ty, tz = xzy[0], xzy[2], xzy[1]
    Rx = np.array([[1, 0, 0], [0, np.cos(tx), -np.sin(tx)], [0, np.sin(tx), np.cos(tx)]])
    Ry = np.array([[np.cos(ty), 0, np.sin(ty)], [0, 1, 0], [-np.sin(ty), 0, np.cos(ty)]])
    Rz = np.array([[np.cos(tz), -np.sin(tz), 0], [np.sin(tz), np.cos(tz), 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def angle_axis(r):
    norm = np.linalg.norm(r)
    if norm < 1e-4:
        return np.eye(3)
    x, y, z = r / norm
    s, c = np.sin(norm), np.cos(norm)
    return np.array([[x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s],
                     [x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s],
                     [x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c]])


def objective(theta, u, point, base, weights):
    """GradBench's objective for one correspondence, as its C++ computes it: pose parameters,
    posed relatives, absolutes down the parents, skinning, the global transform."""
    parents, bottom = const("parents"), [[0, 0, 0, 1]]
    relatives = [np.vstack([m, bottom]) for m in const("relatives")]
    inverse = [np.vstack([m, bottom]) for m in const("inverse_absolutes")]
    pose = np.zeros((3, 25))
    pose[:, 0], pose[:, 1], pose[:, 2] = theta[:3], 1, theta[3:6]
    i_theta, i_pose = 6, 5
    for _ in range(5):
        for i in range(2, 5):
            pose[0, i_pose] = theta[i_theta]
            i_theta += 1
            if i == 2:
                pose[1, i_pose] = theta[i_theta]
                i_theta += 1
            i_pose += 1
        i_pose += 1
    absolutes = []
    for b, parent in enumerate(parents):
        tr = np.eye(4)
        tr[:3, :3] = euler(pose[:, b + 3])
        rel = relatives[b] @ tr
        absolutes.append(rel if parent == -1 else absolutes[parent] @ rel)
    transforms = [a @ inv for a, inv in zip(absolutes, inverse, strict=True)]
    V = [sum(weights[v, b] * (transforms[b] @ base[v])[:3] for b in range(22)) for v in range(3)]
    V = [angle_axis(theta[:3]) @ x + theta[3:6] for x in V]
    return point - (u[0] * V[0] + u[1] * V[1] + (1 - u[0] - u[1]) * V[2])


def rows(c: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"theta": rng.normal(scale=0.4, size=26), "us": rng.uniform(0, 0.5, size=(c, 2)),
            "points": rng.normal(size=(c, 3)), "correspondences": rng.integers(0, 4, size=c),
            "triangles": rng.integers(0, 5, size=(4, 3)),
            "base_positions": np.c_[rng.normal(scale=0.1, size=(5, 3)), np.ones(5)],
            "weights": rng.dirichlet(np.ones(22), size=5)}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_program_is_gradbench_s_objective(prog, seed):
    data = rows(5, seed)
    if seed == 2:
        data["theta"][:3] = 0  # the global rotation's identity branch
    batch = ht.rows_of(data)
    got = ht.objective(prog, data).reshape(5, 3)
    for i in range(5):
        expected = objective(data["theta"], batch["u"][i], batch["point"][i], batch["base"][i],
                             batch["weights"][i])
        np.testing.assert_allclose(got[i], expected, rtol=1e-12, atol=1e-12)


def test_the_jacobian_by_each_row_s_coordinates_and_the_pose(prog):
    data = rows(4, seed=7)
    J = ht.jacobian(prog, data)
    assert J.shape == (12, 28)

    def f(us, theta):
        return ht.objective(prog, {**data, "us": us, "theta": theta})

    h = 1e-6
    for i in range(4):
        for k in range(2):
            e = np.zeros_like(data["us"])
            e[i, k] = h
            fd = (f(data["us"] + e, data["theta"]) - f(data["us"] - e, data["theta"])) / (2 * h)
            expected = np.zeros(12)
            expected[3 * i:3 * i + 3] = fd[3 * i:3 * i + 3]  # a row's u moves its errors alone
            np.testing.assert_allclose(fd, expected, atol=1e-12)
            np.testing.assert_allclose(J[3 * i:3 * i + 3, k], fd[3 * i:3 * i + 3], rtol=1e-6,
                                       atol=1e-8)
    for k in range(26):
        e = np.zeros(26)
        e[k] = h
        fd = (f(data["us"], data["theta"] + e) - f(data["us"], data["theta"] - e)) / (2 * h)
        np.testing.assert_allclose(J[:, 2 + k], fd, rtol=1e-6, atol=1e-8)
