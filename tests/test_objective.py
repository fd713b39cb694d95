"""Program.objective with scipy.optimize: the known minimum of Rosenbrock, a nonlinear
least-squares fit, the flat vector helpers, and the example scripts; Program's repr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import diffdsl
from diffdsl.runtime.objective import ravel, unravel

so = pytest.importorskip("scipy.optimize", reason="the optimize extra (scipy) is needed")
ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module", params=["numpy", "cpu"])
def rosen(request):
    return diffdsl.load(EXAMPLES / "rosenbrock.dd", backend=request.param)


@pytest.mark.parametrize("method, extra", [("trust-ncg", "hessp"), ("trust-exact", "hess"),
                                           ("BFGS", None)])
def test_minimize_reaches_the_minimum_of_rosenbrock(rosen, method, extra):
    o = rosen.objective(wrt="x", x=[-1.2, 1.0, -1.2, 1.0])
    kwargs = {extra: getattr(o, extra)} if extra else {}
    result = so.minimize(o.fun, o.x0, jac=o.jac, method=method, **kwargs)
    assert np.allclose(result.x, 1.0, atol=1e-4), result
    assert result.fun < 1e-8


def test_the_pieces_agree_with_independent_derivatives(rosen):
    o = rosen.objective(wrt="x", x=np.zeros(4))
    v = np.array([0.3, -0.7, 1.1, 0.2])
    h = 1e-6
    fd = np.array([(o.fun(v + h * e) - o.fun(v - h * e)) / (2 * h) for e in np.eye(4)])
    np.testing.assert_allclose(o.jac(v), fd, rtol=1e-6, atol=1e-6)
    H = o.hess(v)
    fd_h = np.array([(o.jac(v + h * e) - o.jac(v - h * e)) / (2 * h) for e in np.eye(4)])
    np.testing.assert_allclose(H, fd_h, rtol=1e-5, atol=1e-4)
    p = np.array([1.0, 2.0, -1.0, 0.5])
    np.testing.assert_allclose(o.hessp(v, p), H @ p, rtol=1e-12, atol=1e-10)


def test_least_squares_fit_of_an_exponential_decay():
    prog = diffdsl.load(EXAMPLES / "decay_fit.dd")
    t = np.linspace(0.0, 4.0, 12)
    rng = np.random.default_rng(0)
    y = 2.5 * np.exp(-1.3 * t) + 0.4 + 1e-3 * rng.normal(size=12)
    o = prog.objective(wrt="p", p=[1.0, 0.5, 0.0], t=t, y=y)
    assert o.jac(o.x0).shape == (12, 3)
    fit = so.least_squares(o.residuals, o.x0, jac=o.jac)
    # the normal equations hold at the optimum, and it is near the true parameters
    np.testing.assert_allclose(o.jac(fit.x).T @ o.residuals(fit.x), 0.0, atol=1e-9)
    np.testing.assert_allclose(fit.x, [2.5, 1.3, 0.4], atol=2e-2)
    assert o.fun(fit.x) == pytest.approx(0.5 * np.sum(o.residuals(fit.x) ** 2))


def test_several_variables_fixed_inputs_and_flat_vectors():
    prog = diffdsl.compile("input A[2, 2]\ninput b\ninput s\n"
                           "output f = sum(A[i, j] ** 2 for i in range(2) for j in range(2))"
                           " * s + b ** 4\n", cache=False)
    o = prog.objective(wrt=["A", "b"], A=[[1, 2], [3, 4]], b=2.0, s=3.0)
    assert o.x0.tolist() == [1, 2, 3, 4, 2]
    assert o.unravel(o.x0)["A"].tolist() == [[1, 2], [3, 4]]
    np.testing.assert_allclose(o.jac(o.x0), [6, 12, 18, 24, 32])
    assert np.allclose(o.hess(o.x0), np.diag([6, 6, 6, 6, 48]))
    with pytest.raises(diffdsl.DiffDSLError, match="'s'"):
        prog.objective(wrt=["A", "b"], A=np.eye(2), b=1.0)
    shapes = {"u": (2, 3), "w": ()}
    flat = np.arange(7.0)
    assert np.array_equal(ravel(unravel(flat, shapes), ["u", "w"]), flat)


@pytest.mark.parametrize("script", ["minimize_rosenbrock.py", "fit_decay.py"])
def test_example_scripts_run(script):
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_program_repr_for_the_terminal_and_notebooks():
    prog = diffdsl.load(EXAMPLES / "matrix.dd")
    text = repr(prog)
    assert "inputs A[3, 3], v[3]" in text and "outputs t, q, w[3]" in text
    md = prog._repr_markdown_()
    assert "| input | `A` | [3, 3] |" in md and "| output | `w` | [3] |" in md
    latex = diffdsl.load(EXAMPLES / "rosenbrock.dd")._repr_latex_()
    assert latex.startswith("$\\begin{aligned}f =")


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_numbers_lists_tuples_and_numpy_scalars_wherever_an_array_goes(backend):
    prog = diffdsl.compile("input x\ninput v[2]\noutput y = x * sum(v * v)\n",
                           backend=backend, cache=False)
    want = {"x": 5.0, "v": [4.0, 8.0]}
    for x in (2, 2.0, np.float32(2), np.int64(2), np.array(2.0), [2.0][0]):
        for v in ((1, 2), [1, 2], [np.int64(1), 2.0], np.array([1, 2], dtype=np.int32)):
            g = prog.grad(x=x, v=v)
            assert g["x"] == want["x"] and np.asarray(g["v"]).tolist() == want["v"]
    assert prog.jvp({"v": (1, 0)}, x=1, v=(1, 2)) == 2.0
    assert prog.vjp(np.float64(1), x=1, v=(1, 2))["v"].tolist() == [2.0, 4.0]
    assert prog.hvp({"x": 1}, x=1, v=[1, 2])["v"].tolist() == [2.0, 4.0]
