"""The programs of examples/loops/ (issue 13): loops that stop on the data, with derivatives
taken inside them, against independent code.

- newton_lambertw.dd: the root of w exp(w) = p against SciPy's `lambertw`, and d w / d p and
  d2 w / d p2 against the implicit-function formulas;
- saddle.dd: the nested gradient loops of a min-max problem against the same loops in NumPy
  with the gradients written by hand, carrying the Jacobian with respect to the start along
  (the iteration is affine), and the saddle point against a linear solve;
- particle.dd: the Euler steps against NumPy with the potential's gradient written by hand;
  d miss / d q against central differences of that NumPy code, and SciPy steering the charge
  with the program's gradient until the particle lands on the target;
- pendulums.dd: 400 Runge-Kutta steps kept as a loop (a scan) against the same steps in NumPy,
  and its gradient against central differences of that NumPy code.

They run through the API and the command line, on the numpy and cpu backends. These programs
are not in examples/ itself: unrolled loops make graphs beyond what the tests of every
example assume (SymPy proofs of each derivative, straight-line CUDA kernels for Hessians).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import lambertw

import diffdsl

LOOPS = Path(__file__).resolve().parent.parent / "examples" / "loops"
BACKENDS = ["numpy", "cpu"]


@functools.lru_cache(maxsize=None)
def load(name: str, backend: str):
    """One program per file and backend for the whole module: it compiles each derivative
    once, and tests re-evaluate it on new data."""
    return diffdsl.load(LOOPS / name, backend=backend)


def cli(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "diffdsl", *args, "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_loop_example_is_tested_here():
    assert {p.name for p in LOOPS.glob("*.dd")} == {"newton_lambertw.dd", "saddle.dd",
                                                     "particle.dd", "pendulums.dd"}
    for path in LOOPS.glob("*.dd"):
        assert path.read_text().startswith(f"# {path.name}: ")


# --- Newton's method: the root and its derivatives by the implicit-function theorem -------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_newton_root_and_derivatives_match_lambertw_and_the_implicit_function(backend):
    prog = load("newton_lambertw.dd", backend)
    p = np.array([0.05, 0.5, 1.0, 2.7, 10.0, 60.0])
    w = lambertw(p).real
    np.testing.assert_allclose(prog(p=p), w, rtol=1e-13)
    # g(w, p) = w e^w - p = 0: dw/dp = -g_p / g_w = 1 / ((1 + w) e^w) = w / (p (1 + w))
    np.testing.assert_allclose(prog.grad(p=p)["p"], w / (p * (1 + w)), rtol=1e-11)
    # and its derivative, d2w/dp2 = -w^2 (w + 2) / (p^2 (1 + w)^3)
    second = -w ** 2 * (w + 2) / (p ** 2 * (1 + w) ** 3)
    np.testing.assert_allclose(prog.hessian(p=p)["p"]["p"], second, rtol=1e-9)


def test_newton_from_the_command_line_on_both_backends():
    for backend in BACKENDS:
        out = cli("grad", str(LOOPS / "newton_lambertw.dd"), "--inputs", "p=1",
                  "--backend", backend)
        assert out["value"] == pytest.approx(0.5671432904097838, rel=1e-14)  # the omega constant
        w = out["value"]
        assert out["grad"]["p"] == pytest.approx(w / (1 + w), rel=1e-12)


# --- the saddle point by nested loops ------------------------------------------------------------

A = np.array([[2.0, 0.5], [0.5, 1.0]])
B = np.array([[1.0, -0.3], [0.4, 0.8]])
C = np.array([[1.5, 0.2], [0.2, 2.0]])
a = np.array([0.3, -0.2])
c = np.array([0.1, 0.4])
TOL, DOWN, UP = 1e-3, 0.5, 0.55


def saddle_by_hand(x0, y0):
    """The loops of saddle.dd, with the gradients of f written out and the Jacobians of x and
    y with respect to (x0, y0) carried through each step; the step counts as well."""
    x, y = np.array(x0, float), np.array(y0, float)
    jx, jy = np.eye(4)[:2], np.eye(4)[2:]
    outer = 0
    while np.linalg.norm(A @ x + B @ y + a) > TOL and outer < 16:
        inner = 0
        while np.linalg.norm(B.T @ x - C @ y - c) > TOL and inner < 8:
            y, jy = y + UP * (B.T @ x - C @ y - c), jy + UP * (B.T @ jx - C @ jy)
            inner += 1
        assert inner < 8  # every inner loop stops on the tolerance too
        x, jx = x - DOWN * (A @ x + B @ y + a), jx - DOWN * (A @ jx + B @ jy)
        outer += 1
    value = 0.5 * x @ A @ x + x @ B @ y - 0.5 * y @ C @ y + a @ x - c @ y
    return x, y, value, jx, jy, outer


STARTS = [([0.5, 1.3], [1.4, 1.1]), ([1.2, 1.0], [1.4, 1.3]), ([-2.0, 3.0], [0.0, -1.0])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x0, y0", STARTS)
def test_saddle_loops_match_numpy_and_reach_the_saddle_point(x0, y0, backend):
    prog = load("saddle.dd", backend)
    x, y, value, jx, jy, outer = saddle_by_hand(x0, y0)
    assert outer < 16  # stopped on the tolerance, not on the most steps
    out = prog(x0=x0, y0=y0)
    np.testing.assert_allclose(out["x"], x, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["y"], y, rtol=1e-12, atol=1e-14)
    assert out["value"] == pytest.approx(value, rel=1e-12)
    # The exact saddle point: grad_x f = 0 and grad_y f = 0, a linear system.
    kkt = np.block([[A, B], [B.T, -C]])
    exact = np.linalg.solve(kkt, np.concatenate([-a, c]))
    np.testing.assert_allclose(np.concatenate([out["x"], out["y"]]), exact, atol=5e-3)
    # d (x, y) / d (x0, y0): the products of the steps' linear maps, by hand
    for name, want in (("x", jx), ("y", jy)):
        jac = prog.jacobian(x0=x0, y0=y0, of=name)
        np.testing.assert_allclose(np.hstack([jac["x0"], jac["y0"]]), want, rtol=1e-10,
                                   atol=1e-15)


def test_saddle_gradient_of_the_value_matches_finite_differences():
    prog = load("saddle.dd", "cpu")
    x0, y0 = np.array([0.7, 0.9]), np.array([1.1, 0.6])
    grads = prog.grad(x0=x0, y0=y0, of="value")
    h = 1e-6
    for k in range(4):
        step = h * np.eye(4)[k]
        fd = (saddle_by_hand(x0 + step[:2], y0 + step[2:])[2]
              - saddle_by_hand(x0 - step[:2], y0 - step[2:])[2]) / (2 * h)
        got = grads["x0"][k] if k < 2 else grads["y0"][k - 2]
        assert got == pytest.approx(fd, rel=1e-5, abs=1e-10)


def test_saddle_from_the_command_line():
    for backend in BACKENDS:
        out = cli("jacobian", str(LOOPS / "saddle.dd"), "--of", "x", "--wrt", "y0",
                  "--inputs", "x0=[0.5, 1.3]", "y0=[1.4, 1.1]", "--backend", backend)
        x, _, _, jx, _, _ = saddle_by_hand([0.5, 1.3], [1.4, 1.1])
        np.testing.assert_allclose(out["value"], x, rtol=1e-12)
        np.testing.assert_allclose(out["jacobian"]["y0"], jx[:, 2:], rtol=1e-10, atol=1e-15)


# --- the charged particle ------------------------------------------------------------------------

CHARGES = np.array([[1.5, -0.5, 0.3], [3.0, 2.0, -0.2]])
GRAVITY = np.array([0.0, -1.0])
DT, TARGET = 0.1, 2.5


def particle_by_hand(q, v0):
    """particle.dd in NumPy: the gradient of sum(s / |p - k|) is -sum(s (p - k) / |p - k|^3)."""
    p, v = np.array([0.0, 1.0]), np.array(v0, float)
    last = p
    for _ in range(40):
        if not p[1] >= 0:
            break
        last = p
        d = p - CHARGES[:, :2]
        r = np.hypot(d[:, 0], d[:, 1])
        grad_potential = -(CHARGES[:, 2:] * d / r[:, None] ** 3).sum(axis=0)
        v = v + DT * (GRAVITY - q * grad_potential)
        p = p + DT * v
    landing = last[0] + (p[0] - last[0]) * last[1] / (last[1] - p[1])
    return landing, (landing - TARGET) ** 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("q, v0", [(1.14, [0.77, 0.54]), (0.52, [1.31, 1.41]),
                                   (1.44, [1.32, 0.50]), (-0.8, [1.0, 1.0])])
def test_particle_matches_numpy_and_finite_differences(q, v0, backend):
    prog = load("particle.dd", backend)
    landing, miss = particle_by_hand(q, v0)
    out = prog(q=q, v0=v0)
    assert out["landing"] == pytest.approx(landing, rel=1e-12)
    assert out["miss"] == pytest.approx(miss, rel=1e-12)
    h = 1e-6
    fd = (particle_by_hand(q + h, v0)[1] - particle_by_hand(q - h, v0)[1]) / (2 * h)
    assert prog.grad(q=q, v0=v0, of="miss", wrt="q")["q"] == pytest.approx(fd, rel=1e-6)


def test_particle_steered_onto_the_target_by_its_gradient():
    """The controller: SciPy minimises the miss over the charge, with the program's exact
    gradient; the NumPy simulation then lands on the target."""
    prog = load("particle.dd", "cpu")
    v0 = np.array([1.2, 1.0])
    o = prog.objective(wrt="q", of="miss", q=0.5, v0=v0)
    best = minimize(o.fun, o.x0, jac=o.jac, method="BFGS", options={"gtol": 1e-10})
    assert particle_by_hand(best.x[0], v0)[0] == pytest.approx(TARGET, abs=1e-5)
    assert best.nfev < 40


def test_particle_from_the_command_line():
    for backend in BACKENDS:
        out = cli("grad", str(LOOPS / "particle.dd"), "--of", "miss", "--wrt", "q",
                  "--inputs", "q=1.14", "v0=[0.77, 0.54]", "--backend", backend)
        assert out["value"] == pytest.approx(particle_by_hand(1.14, [0.77, 0.54])[1], rel=1e-12)


# --- every loop example: the two backends agree on batches, Jacobians and Hessians ---------------

@pytest.mark.parametrize("name, scalar", [("newton_lambertw.dd", "w"), ("saddle.dd", "value"),
                                          ("particle.dd", "miss")])
def test_cpu_equals_the_interpreter(name, scalar):
    """Jacobians of every output and the Hessian of one, on a batch of random points."""
    ref, fast = load(name, "numpy"), load(name, "cpu")
    rng = np.random.default_rng(3)
    inputs = {n: rng.uniform(0.5, 1.5, (4, *s)) for n, s in ref.inputs.items()}
    for of in ref.outputs:
        want, got = ref.jacobian(inputs, of=of), fast.jacobian(inputs, of=of)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-13)
    want, got = ref.hessian(inputs, of=scalar), fast.hessian(inputs, of=scalar)
    for k in want:
        for m in want[k]:
            np.testing.assert_allclose(got[k][m], want[k][m], rtol=1e-9, atol=1e-11)


# --- Pendulums: a for loop kept as a loop, against NumPy ------------------------------------

def _pendulums(q0, stiff, steps=400, dt=0.01):
    """pendulums.dd in NumPy: the energy the velocities gather over the steps."""
    def f(s):
        return np.concatenate([s[4:], -stiff * np.sin(s[:4]) - 0.1 * s[4:]])
    s = np.concatenate([q0, np.full(4, 0.1)])
    energy = 0.0
    for _ in range(steps):
        k1 = f(s)
        k2 = f(s + dt / 2 * k1)
        k3 = f(s + dt / 2 * k2)
        k4 = f(s + dt * k3)
        s = s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        energy += dt * np.sum(s[4:] ** 2)
    return energy


@pytest.mark.parametrize("backend", BACKENDS)
def test_pendulums_scan_against_numpy_and_central_differences(backend):
    prog = load("pendulums.dd", backend)
    assert any(node.op == "region" and node.attr.carry for node in prog.graph.nodes)
    q0, stiff = np.array([0.3, 0.2, 0.1, 0.0]), np.array([1.0, 2.0, 3.0, 4.0])
    assert np.isclose(prog(q0=q0, stiff=stiff), _pendulums(q0, stiff), rtol=1e-12)
    grad = prog.grad(q0=q0, stiff=stiff)
    for name, x in (("q0", q0), ("stiff", stiff)):
        for k in range(4):
            up, down = x.copy(), x.copy()
            up[k] += 1e-6
            down[k] -= 1e-6
            args = {"q0": q0, "stiff": stiff}
            fd = (_pendulums(**{**args, name: up}) - _pendulums(**{**args, name: down})) / 2e-6
            assert abs(grad[name][k] - fd) <= 1e-6 * max(1.0, abs(fd))
