"""Hessian-vector products, the Hessian's diagonal, batch gradients reduced over rows, and
symbolic_jacobian: each against an independent oracle (finite differences of the gradient,
NumPy sums, sympy.diff)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl

ROOT = Path(__file__).resolve().parent.parent
SRC = """
input x[3]
input w
output f = sum(sin(x) * x) * w * w + x[0] * x[1] * exp(w) + log(1 + x[2] * x[2])
output g = [x[0] * w, x[1] + w]
"""


@pytest.fixture(scope="module", params=["numpy", "cpu"])
def prog(request):
    return diffdsl.compile(SRC, backend=request.param, cache=False)


def _fd_hvp(prog, x, w, vx, vw, h=1e-5):
    """Central differences of the gradient along (vx, vw)."""
    plus = prog.grad(x=x + h * vx, w=w + h * vw, of="f")
    minus = prog.grad(x=x - h * vx, w=w - h * vw, of="f")
    return {k: (plus[k] - minus[k]) / (2 * h) for k in plus}


vectors = st.lists(st.floats(-2, 2), min_size=4, max_size=4)


@settings(max_examples=25, deadline=None)
@given(point=vectors, direction=vectors)
def test_hvp_is_the_derivative_of_the_gradient_along_v(prog, point, direction):
    x, w = np.array(point[:3]), point[3]
    vx, vw = np.array(direction[:3]), direction[3]
    got = prog.hvp({"x": vx, "w": vw}, x=x, w=w, of="f")
    want = _fd_hvp(prog, x, w, vx, vw)
    scale = 1 + max(np.abs(want["x"]).max(), abs(want["w"]))
    np.testing.assert_allclose(got["x"], want["x"], atol=1e-5 * scale)
    assert got["w"] == pytest.approx(want["w"], abs=1e-5 * scale)


def test_missing_tangents_are_zero_and_wrt_limits_the_result(prog):
    x, w = np.array([0.3, -1.2, 2.0]), 0.7
    vx = np.array([1.0, 0.5, -1.0])
    full = prog.hvp({"x": vx, "w": 0.0}, x=x, w=w, of="f")
    part = prog.hvp({"x": vx}, x=x, w=w, of="f")
    assert set(part) == {"x", "w"}
    np.testing.assert_array_equal(part["x"], full["x"])
    only_x = prog.hvp({"x": vx}, x=x, w=w, of="f", wrt="x")
    assert set(only_x) == {"x"}
    with pytest.raises(diffdsl.DiffDSLError, match="tangent is given for 'w'"):
        prog.hvp({"w": 1.0}, x=x, w=w, of="f", wrt="x")


def test_hvp_on_a_batch(prog):
    rng = np.random.default_rng(3)
    X, W, V = rng.normal(size=(4, 3)), rng.normal(size=4), rng.normal(size=(4, 3))
    got = prog.hvp({"x": V}, x=X, w=W, of="f")
    for r in range(4):
        one = prog.hvp({"x": V[r]}, x=X[r], w=W[r], of="f")
        np.testing.assert_allclose(got["x"][r], one["x"], rtol=1e-13)


def test_hessian_diagonal_against_finite_differences(prog):
    x, w = np.array([0.3, -1.2, 2.0]), 0.7
    diag = prog.hessian(x=x, w=w, of="f", diagonal=True)
    for k in range(3):
        e = np.eye(3)[k]
        assert diag["x"][k] == pytest.approx(_fd_hvp(prog, x, w, e, 0.0)["x"][k], abs=1e-6)
    assert diag["w"] == pytest.approx(_fd_hvp(prog, x, w, 0 * x, 1.0)["w"], abs=1e-6)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_reduce_over_rows_for_shared_and_batched_inputs(prog, reduce):
    rng = np.random.default_rng(7)
    X, w = rng.normal(size=(5, 2, 3)), 0.9  # w shared by every row of a (5, 2) batch
    rows = prog.grad(x=X, w=w, of="f")
    value, got = prog.value_and_grad(x=X, w=w, of="f", reduce=reduce)
    n = 10 if reduce == "mean" else 1
    assert value == pytest.approx(prog(x=X, w=w)["f"].sum() / n)
    assert np.shape(got["w"]) == ()
    assert got["w"] == pytest.approx(rows["w"].sum() / n)
    np.testing.assert_allclose(got["x"], rows["x"] / n)  # batched: each row its own
    assert prog.grad(x=X[0, 0], w=w, of="f", reduce="sum")["w"] == \
        pytest.approx(prog.grad(x=X[0, 0], w=w, of="f")["w"])  # one point: unchanged
    with pytest.raises(diffdsl.DiffDSLError, match="reduce"):
        prog.grad(x=X, w=w, of="f", reduce="max")


def test_symbolic_grad_needs_one_element_and_names_symbolic_jacobian(prog):
    with pytest.raises(diffdsl.DiffDSLError, match="symbolic_jacobian"):
        prog.symbolic_grad(of="g")
    jac = prog.symbolic_jacobian(of="g")
    assert str(jac["w"][0]) == "x[0]" and jac["w"][1] == 1
    assert jac["x"].shape == (2, 3)
    grad = prog.symbolic_grad(of="f")
    f = prog.to_sympy()["f"]
    symbols = {str(s): s for s in f.free_symbols}
    assert sympy.simplify(grad["w"] - sympy.diff(f, symbols["w"])) == 0
    for k in range(3):
        assert sympy.simplify(grad["x"][k] - sympy.diff(f, symbols[f"x[{k}]"])) == 0


def test_cli_hvp_matches_the_api(tmp_path):
    path = tmp_path / "p.dd"
    path.write_text(SRC)
    done = subprocess.run([sys.executable, "-m", "diffdsl", "hvp", str(path), "--of", "f",
                           "--inputs", "x=[0.3,-1.2,2.0]", "w=0.7", "--tangents",
                           "x=[1,0.5,-1]", "--json"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) == {"of", "value", "hvp"}
    prog = diffdsl.compile(SRC, backend="numpy", cache=False)
    want = prog.hvp({"x": np.array([1, 0.5, -1.0])}, x=np.array([0.3, -1.2, 2.0]), w=0.7,
                    of="f")
    np.testing.assert_allclose(out["hvp"]["x"], want["x"], rtol=1e-12)
