"""Derivatives inside programs (issue 13): `grad(e, x)`, `jacobian(e, x)` and `hessian(e, x)`
as expressions, here with `e` written inline (where the derivative by x's binding, issue 23,
and the old reading of `e` as the function of the name `x` alone agree; test_grad_names.py
holds the cases where they differ).

The oracles are independent of the code under test: `sympy.diff` of the same formula written
in SymPy, derivatives worked out by hand, central finite differences, and, in the Hypothesis
test, the program's own gradient and Hessian (autodiff on the whole graph) of a program that
outputs `e` itself.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diffdsl

X, Y, Z = sp.symbols("x y z", real=True)
BACKENDS = ["numpy", "cpu"]


def compile_(source: str, backend: str = "numpy"):
    return diffdsl.compile(source, filename="t.dd", backend=backend, cache=False)


def at(expr, **values) -> float:
    symbols = {"x": X, "y": Y, "z": Z}
    return float(expr.subs({symbols[k]: v for k, v in values.items()}))


# --- each form against sympy.diff -------------------------------------------------------------

SCALAR_CASES = [
    ("x ** 3 * sin(x)", X ** 3 * sp.sin(X), [0.3, 1.7, -2.1]),
    ("exp(-x * x) / (1 + x * x)", sp.exp(-X * X) / (1 + X * X), [0.0, 0.8, -1.4]),
    ("atan2(x, 2) + hypot(x, 1) + log1p(x * x)",
     sp.atan2(X, 2) + sp.sqrt(X * X + 1) + sp.log(1 + X * X), [0.5, -3.0]),
    ("if x > 1 then log(x) * x else x ** 2", sp.Piecewise((sp.log(X) * X, X > 1), (X ** 2, True)),
     [0.5, 2.5, -1.0]),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("text, formula, points", SCALAR_CASES, ids=[c[0] for c in SCALAR_CASES])
def test_grad_and_hessian_of_a_scalar_match_sympy(text, formula, points, backend):
    prog = compile_(f"input x\noutput g = grad({text}, x)\noutput h = hessian({text}, x)",
                    backend)
    assert prog.outputs == {"g": (), "h": ()}
    first, second = sp.diff(formula, X), sp.diff(formula, X, 2)
    for x in points:
        out = prog(x=x)
        np.testing.assert_allclose(out["g"], at(first, x=x), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(out["h"], at(second, x=x), rtol=1e-12, atol=1e-14)


V = sp.IndexedBase("v", real=True)
FV = V[0] ** 2 * V[1] + sp.sin(V[1] * V[2]) + V[0] * V[1] * V[2]
FV_TEXT = "v[0] ** 2 * v[1] + sin(v[1] * v[2]) + prod(v)"
VPOINT = np.array([0.7, -1.2, 2.0])


def sympy_at(expr, point):
    return float(expr.subs({V[k]: point[k] for k in range(len(point))}))


@pytest.mark.parametrize("backend", BACKENDS)
def test_vector_forms_have_the_documented_shapes_and_values(backend):
    prog = compile_("input v[3]\n"
                    f"output g = grad({FV_TEXT}, v)\n"
                    f"output h = hessian({FV_TEXT}, v)\n"
                    "output j = jacobian([v[0] * v[1], exp(v[2]), sum(v)], v)\n"
                    "output m = jacobian([[v[0], v[1] * v[2]], [v[2] ** 2, 1]], v)\n"
                    f"output s = jacobian({FV_TEXT}, v)\n", backend)
    assert prog.outputs == {"g": (3,), "h": (3, 3), "j": (3, 3), "m": (2, 2, 3), "s": (3,)}
    out = prog(v=VPOINT)
    v = [V[k] for k in range(3)]
    grad = [sympy_at(sp.diff(FV, a), VPOINT) for a in v]
    hess = [[sympy_at(sp.diff(FV, a, b), VPOINT) for b in v] for a in v]
    np.testing.assert_allclose(out["g"], grad, rtol=1e-12)
    np.testing.assert_allclose(out["s"], grad, rtol=1e-12)
    np.testing.assert_allclose(out["h"], hess, rtol=1e-12)
    x0, x1, x2 = VPOINT
    np.testing.assert_allclose(out["j"], [[x1, x0, 0], [0, 0, np.exp(x2)], [1, 1, 1]],
                               rtol=1e-12)
    m = np.zeros((2, 2, 3))
    m[0, 0, 0] = 1
    m[0, 1, 1], m[0, 1, 2] = x2, x1
    m[1, 0, 2] = 2 * x2
    np.testing.assert_array_equal(out["m"], m)


def test_jacobian_of_an_array_by_a_scalar_goes_forward_and_is_right():
    """More outputs than variables: one forward sweep per variable element."""
    prog = compile_("input x\noutput j = jacobian([x, x * x, sin(x) * x], x)\n")
    assert prog.outputs == {"j": (3,)}
    x = 0.9
    np.testing.assert_allclose(prog(x=x), [1, 2 * x, np.cos(x) * x + np.sin(x)], rtol=1e-14)


# --- which values vary ---------------------------------------------------------------------------

def test_only_the_name_varies_even_where_hash_consing_merges_values():
    """Another name holding an equal value, computed without x's binding, is a constant."""
    prog = compile_("input z\na = sin(z)\nb = sin(z)\noutput y = grad(a * b, a)\n")
    z = 0.4
    assert prog(z=z) == pytest.approx(np.sin(z), rel=1e-15)  # not 2 sin(z)
    assert prog.grad(z=z)["z"] == pytest.approx(np.cos(z), rel=1e-15)


def test_a_value_computed_from_x_before_varies_with_it():
    """Issue 23: a local computed from x, an alias of x included, is a function of x's
    binding (the old closure rule gave 0 and 3 here, as `jax.grad(lambda x_: y)`)."""
    prog = compile_("input x\ny = x * x\nw = x\n"
                    "output slope = grad(y, x)\noutput alias = grad(x * w, x)\n")
    out = prog(x=3.0)
    assert out == {"slope": 6.0, "alias": 6.0}


def test_leaves_never_reach_the_graph():
    prog = compile_("input x\ninput v[2]\n"
                    "output y = grad(grad(x * sum(v) ** 2, v)[0] * x, x) + hessian(x ** 4, x)\n")
    assert set(prog.graph.inputs) == {"x", "v"}
    names = {n.attr[0] for n in prog.graph.nodes if n.op == "input"}
    assert names == {"x", "v"}


def test_a_static_variable_gives_a_static_derivative():
    """A local bound to a number is a variable of the derivatives by it; the derivative is a
    constant of the graph. (A const cannot be: see ERRORS.)"""
    prog = compile_("input x\nc = 3\nk = 2.5\n"
                    "output y = grad(c ** 2 * x, c) + grad(k * k, k)\n")
    assert prog(x=2.0) == pytest.approx(2 * 3 * 2.0 + 2 * 2.5)
    assert prog.graph.op_counts().get("input") == 1
    assert prog.grad(x=2.0)["x"] == pytest.approx(6.0)


# --- nesting ---------------------------------------------------------------------------------

def test_nested_derivatives_of_a_def_match_sympy():
    """The issue's form `grad(grad(f(x, y), y)[0], x)`, with y a vector."""
    prog = compile_("def f(a, b) = a ** 2 * b[0] * b[1] + sin(a * b[0])\n"
                    "input x\ninput y[2]\n"
                    "output m = grad(grad(f(x, y), y)[0], x)\n")
    y0, y1 = sp.symbols("y0 y1", real=True)
    f = X ** 2 * y0 * y1 + sp.sin(X * y0)
    mixed = sp.diff(f, y0, X)
    for x, y in [(0.7, [1.3, -0.4]), (-1.1, [0.2, 2.0])]:
        want = float(mixed.subs({X: x, y0: y[0], y1: y[1]}))
        assert prog(x=x, y=np.array(y)) == pytest.approx(want, rel=1e-13)


def test_derivatives_of_derivatives_by_the_same_name():
    prog = compile_("input x\n"
                    "output d2 = grad(grad(x ** 4, x), x)\n"
                    "output d3 = grad(grad(grad(sin(x) * x, x), x), x)\n"
                    "output h = hessian(grad(x ** 5, x), x)\n")
    x = 0.8
    out = prog(x=x)
    assert out["d2"] == pytest.approx(12 * x ** 2, rel=1e-14)
    assert out["d3"] == pytest.approx(float(sp.diff(sp.sin(X) * X, X, 3).subs(X, x)), rel=1e-13)
    assert out["h"] == pytest.approx(60 * x ** 2, rel=1e-14)


# --- inside defs, loops, comprehensions and dynamic branches ----------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_inside_a_def_a_loop_and_a_comprehension(backend):
    prog = compile_("def slope(t) = grad(t ** 3 + sin(t), t)\n"
                    "def f(p) = (p[0] - 1) ** 2 + 3 * (p[1] + 0.5) ** 2\n"
                    "input x\ninput v[3]\n"
                    "output s = slope(x) + slope(2 * x)\n"
                    "output c = [grad(sin(t) * t, t) for t in v]\n"
                    "p = [x, x]\n"
                    "for k in range(25) {\n"
                    "    p = p - 0.1 * grad(f(p), p)\n"
                    "}\n"
                    "output p\n", backend)
    x, v = 0.6, np.array([0.1, -2.0, 1.5])
    out = prog(x=x, v=v)

    def slope(t):
        return 3 * t ** 2 + np.cos(t)

    assert out["s"] == pytest.approx(slope(x) + slope(2 * x), rel=1e-14)
    np.testing.assert_allclose(out["c"], np.cos(v) * v + np.sin(v), rtol=1e-14)
    p = np.array([x, x])
    for _ in range(25):  # the gradient by hand
        p = p - 0.1 * np.array([2 * (p[0] - 1), 6 * (p[1] + 0.5)])
    np.testing.assert_allclose(out["p"], p, rtol=1e-14)
    # d p / d x by hand: each step multiplies by (1 - 0.2) and (1 - 0.6)
    np.testing.assert_allclose(prog.jacobian(x=x, v=v, of="p")["x"], [0.8 ** 25, 0.4 ** 25],
                               rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inside_a_dynamic_branch_no_nan_leaks(backend):
    """The branch not taken has a derivative that is NaN there (sqrt of a negative)."""
    prog = compile_("input x\n"
                    "y = 0\n"
                    "if x > 0 {\n    y = grad(sqrt(x) * x, x)\n}\n"
                    "output y\n"
                    "output z = if x > 0 then hessian(sqrt(x) ** 3, x) else x\n", backend)
    out = prog(x=-1.0)
    assert out == {"y": 0.0, "z": -1.0}
    for kind in ("grad", "hessian"):
        for of in ("y", "z"):
            result = getattr(prog, kind)(x=-1.0, of=of)["x"]
            value = result["x"] if kind == "hessian" else result
            assert value == (1.0 if (kind, of) == ("grad", "z") else 0.0), (kind, of)
    out = prog(x=4.0)
    assert out["y"] == pytest.approx(1.5 * 2.0) and out["z"] == pytest.approx(0.75 / 2.0)
    assert prog.grad(x=4.0, of="y")["x"] == pytest.approx(0.75 / 2.0)


# --- the program's own derivatives and the symbolic export through them ------------------------

SOURCE_3 = "input x\ninput y\noutput g = grad(x ** 3 * y + exp(x * y), x)\n"
F3 = X ** 3 * Y + sp.exp(X * Y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hessian_of_a_program_with_grad_is_a_third_derivative(backend):
    prog = compile_(SOURCE_3, backend)
    g = sp.diff(F3, X)
    point = {"x": 0.6, "y": -0.9}
    grads = prog.grad(**point)
    hess = prog.hessian(**point)
    for a, sa in (("x", X), ("y", Y)):
        assert grads[a] == pytest.approx(at(sp.diff(g, sa), **point), rel=1e-13)
        for b, sb in (("x", X), ("y", Y)):
            assert hess[a][b] == pytest.approx(at(sp.diff(g, sa, sb), **point), rel=1e-12)
    jac = prog.jacobian(**point)
    assert prog.jvp({"x": 2.0, "y": -1.0}, **point) == pytest.approx(2 * jac["x"] - jac["y"])
    assert prog.vjp(3.0, **point)["y"] == pytest.approx(3 * jac["y"])


def test_symbolic_export_through_grad():
    prog = compile_(SOURCE_3)
    (g,) = prog.to_sympy().values()
    x, y = sorted(g.free_symbols, key=lambda s: s.name)
    assert sp.simplify(g - sp.diff(F3, X).subs({X: x, Y: y})) == 0
    second = prog.symbolic_grad()
    assert sp.simplify(second["x"] - sp.diff(F3, X, 2).subs({X: x, Y: y})) == 0
    assert sp.simplify(second["y"] - sp.diff(F3, X, Y).subs({X: x, Y: y})) == 0


def test_cli_diff_and_check_on_a_program_with_grad(tmp_path):
    path = tmp_path / "g.dd"
    path.write_text(SOURCE_3)
    done = subprocess.run([sys.executable, "-m", "diffdsl", "diff", str(path), "--wrt", "y"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "exp" in done.stdout
    done = subprocess.run([sys.executable, "-m", "diffdsl", "check", str(path), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"ok": true' in done.stdout


# --- shadowing and errors ----------------------------------------------------------------------

def test_a_declared_name_shadows_the_builtin():
    prog = compile_("input x\ndef grad(a, b) = a + b\noutput y = grad(x, 2)\n")
    assert prog(x=1.0) == 3.0
    with pytest.raises(diffdsl.TypeMismatchError, match="'hessian' is a value"):
        compile_("input x\nhessian = 2\noutput y = hessian(x, x)\n")


ERRORS = [
    ("input x\noutput y = grad(x * x)\n", diffdsl.ArityError, (2, 12), "takes 2 arguments"),
    ("input x\noutput y = grad(x * x, 2 * x)\n", diffdsl.TypeMismatchError, (2, 24),
     "must be a name"),
    ("input x\noutput y = grad([x, x], x)\n", diffdsl.ShapeError, (2, 17), "needs a scalar e"),
    ("input x\noutput y = hessian([x, x], x)\n", diffdsl.ShapeError, (2, 20),
     "needs a scalar e"),
    ("input x\noutput y = grad(x, z)\n", diffdsl.UnknownNameError, (2, 20), "unknown name 'z'"),
    ("input x\nc = 1 < 2\noutput y = grad(x, c)\n", diffdsl.TypeMismatchError, (3, 20),
     "'c' is a condition"),
    ("input x\nn = 2\noutput y = grad(sum(x for k in range(n)), n)\n",
     diffdsl.StaticValueError, (3, 38), "range bounds must be static"),
    ("input x\nconst n = 2\noutput y = grad(n * x, n)\n", diffdsl.TypeMismatchError, (3, 24),
     "'n' is a const"),
    ("input x\ndef f(a) = grad(a * x, a)\noutput y = f(x)\n", diffdsl.UnknownNameError,
     (2, 21), "in a function"),
    ("input x\noutput y = gard(x, x)\n", diffdsl.UnknownNameError, (2, 12), "'grad'"),
]


@pytest.mark.parametrize("source, error, where, words", ERRORS, ids=[e[3] for e in ERRORS])
def test_errors_are_located(source, error, where, words):
    with pytest.raises(error) as caught:
        compile_(source)
    span = caught.value.span
    assert (span.line, span.column) == where
    assert words in str(caught.value)


def test_cli_error_exits_2_without_a_traceback(tmp_path):
    path = tmp_path / "bad.dd"
    path.write_text("input x\noutput y = grad([x, x], x)\n")
    done = subprocess.run([sys.executable, "-m", "diffdsl", "eval", str(path), "--inputs",
                           "x=1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "bad.dd:2:17: error" in done.stderr and "Traceback" not in done.stderr


# --- Hypothesis: grad(e, x) inside a program is the program's own gradient of e ---------------

@st.composite
def polynomials(draw, depth=3):
    """A polynomial (with a few smooth functions) over x, y and v[0], v[1], as `.dd` text."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(["x", "y", "v[0]", "v[1]", "2", "0.5", "-1.5"]))
    a, b = draw(polynomials(depth - 1)), draw(polynomials(depth - 1))
    kind = draw(st.sampled_from(["+", "-", "*", "*", "pow", "sin"]))
    if kind == "pow":
        return f"({a}) ** {draw(st.sampled_from(['2', '3']))}"
    if kind == "sin":
        return f"sin({a})"
    return f"({a} {kind} {b})"


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(e=polynomials(), x=st.floats(-1.5, 1.5), y=st.floats(-1.5, 1.5),
       v=st.lists(st.floats(-1.5, 1.5), min_size=2, max_size=2))
def test_inner_derivatives_equal_the_programs_own(e, x, y, v):
    head = "input x\ninput y\ninput v[2]\n"
    inner = compile_(head + f"output gx = grad({e}, x)\noutput gv = grad({e}, v)\n"
                     f"output hv = hessian({e}, v)\noutput jy = jacobian([{e}, y * ({e})], y)\n")
    outer = compile_(head + f"output f = {e}\n")
    point = {"x": x, "y": y, "v": np.array(v)}
    got = inner(**point)
    grads = outer.grad(**point)
    hess = outer.hessian(**point, wrt="v")["v"]["v"]
    np.testing.assert_allclose(got["gx"], grads["x"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["gv"], grads["v"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["hv"], hess, rtol=1e-12, atol=1e-12)
    f = float(outer(**point))
    np.testing.assert_allclose(got["jy"], [grads["y"], f + y * grads["y"]], rtol=1e-12,
                               atol=1e-12)
