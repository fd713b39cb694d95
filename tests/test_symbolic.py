"""SymPy export (`diffdsl.symbolic.export`) and `diffdsl check` (`diffdsl.symbolic.check`).

Every op of the table is exported, evaluated by SymPy against the NumPy interpreter, and its
derivative checked against `sympy.diff` and finite differences; the examples all pass `check`;
a derivative rule broken on purpose is caught.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import diffdsl
from diffdsl.backends import numpy as reference
from diffdsl.graph import autodiff, ops
from diffdsl.graph.ir import Builder, Port
from diffdsl.symbolic import export as symbolic
from diffdsl.symbolic import formulas as report_formulas
from diffdsl.symbolic import oracle
from diffdsl.symbolic.check import check
from diffdsl.symbolic.report import format_check

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.dd"))


def graph_of(source: str):
    return diffdsl.compile(source).graph


def real_indexed(name, shape):
    """An input's base as export writes it: real, with the input's shape."""
    return sp.IndexedBase(name, shape=shape, real=True)


# ---------------------------------------------------------------------------------------------
# to_sympy


def test_det2_exports_as_written():
    graph = graph_of((EXAMPLES[0].parent / "det2.dd").read_text())
    A = real_indexed("A", (2, 2))
    (d,) = symbolic.to_sympy(graph).values()
    expected = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]
    assert sp.expand(d - expected) == 0


def test_det3_by_minors_equals_the_matrix_determinant():
    graph = graph_of((EXAMPLES[0].parent / "det3.dd").read_text())
    A = real_indexed("A", (3, 3))
    expected = sp.Matrix(3, 3, lambda i, j: A[i, j]).det()
    assert sp.expand(symbolic.to_sympy(graph)["d"] - expected) == 0


def test_symbols_without_assumptions_match_plain_indexed_base():
    graph = graph_of("input A[2, 2]\noutput d = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]")
    A = sp.IndexedBase("A", shape=(2, 2))
    d = symbolic.to_sympy(graph, real=False)["d"]
    assert sp.expand(d - (A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0])) == 0


def test_scalar_inputs_are_symbols_and_arrays_keep_their_shape():
    graph = graph_of("input x\ninput v[3]\noutput f = sin(x) * v[1] + x**3 / 3\n"
                     "output w = v * x")
    x = sp.Symbol("x", real=True)
    v = real_indexed("v", (3,))
    out = symbolic.to_sympy(graph)
    assert sp.simplify(out["f"] - (sp.sin(x) * v[1] + x**3 / 3)) == 0
    assert isinstance(out["w"], sp.NDimArray) and out["w"].shape == (3,)
    assert list(out["w"]) == [v[0] * x, v[1] * x, v[2] * x]
    assert list(symbolic.to_sympy(graph, names="f")) == ["f"]
    with pytest.raises(diffdsl.UsageError):
        symbolic.to_sympy(graph, names="nope")


def test_if_then_else_exports_as_piecewise():
    graph = graph_of("input x\noutput y = if x > 0 then sqrt(x) else 0")
    x = sp.Symbol("x", real=True)
    y = symbolic.to_sympy(graph)["y"]
    assert y == sp.Piecewise((sp.sqrt(x), x > 0), (0, True))
    # The condition stays readable in the derivative too.
    dy = oracle.our_derivatives(graph)["x"]
    assert dy == sp.Piecewise((1 / (2 * sp.sqrt(x)), x > 0), (0, True))


def test_min_and_max_pick_the_first_argument_on_a_tie():
    graph = graph_of("input x\ninput y\noutput a = min(x, y)\noutput b = max(x, y)")
    x, y = sp.symbols("x y", real=True)
    out = symbolic.to_sympy(graph)
    assert out["a"] == sp.Piecewise((x, x <= y), (y, True))
    assert out["b"] == sp.Piecewise((x, x >= y), (y, True))


def test_a_max_reduction_stays_small():
    # SymPy rewrites a Piecewise inside a condition into ITE form, which doubles at every
    # step of a reduction; conditions hold Max instead.
    graph = graph_of("input x[8]\noutput m = max(x)")
    m = symbolic.to_sympy(graph)["m"]
    assert not m.has(sp.ITE)
    assert sp.count_ops(m) < 200


def test_a_loop_of_dynamic_ifs_stays_small_and_checks():
    # A select compared again (the next iteration's condition) is written `select(...)`
    # inside the condition, not as a Piecewise that SymPy would fold into ITE form.
    graph = graph_of("input x[6]\ny = 0\nfor i in range(6) {\n"
                     "    if x[i] > y { y = x[i] * y + 1 } else { y = y - x[i] }\n}\noutput y")
    y = symbolic.to_sympy(graph)["y"]
    assert not y.has(sp.ITE) and y.has(symbolic.select)
    report = check(graph, points=2)
    assert report["ok"], format_check(report)


def test_constants_take_their_exact_form():
    c = symbolic.constant
    assert c(3.0) == 3 and isinstance(c(3.0), sp.Integer)
    assert c(-0.0) == 0
    assert c(0.1) == sp.Rational(1, 10)
    assert c(1e-8) == sp.Rational(1, 10**8)
    assert c(1 / 3) == sp.Rational(1, 3)
    assert c(0.1 * 3) == sp.Rational(3, 10)  # one ulp away from 0.3
    assert c(math.pi) == sp.pi
    assert c(-math.pi / 2) == -sp.pi / 2
    assert c(math.log(2)) == sp.log(2)
    assert c(ops.LN10) == sp.log(10)
    assert c(ops.TWO_OVER_SQRT_PI) == 2 / sp.sqrt(sp.pi)
    assert c(1 / math.sqrt(2 * math.pi)) == 1 / sp.sqrt(2 * sp.pi)
    odd = math.exp(1.7)
    assert c(odd) == sp.Float(odd) and float(c(odd)) == odd
    assert c(math.inf) == sp.oo and c(-math.inf) == -sp.oo and c(math.nan) is sp.nan


def test_deep_chains_export_without_recursion_errors():
    b = Builder()
    x = b.input("x", 0)
    v = x
    for _ in range(10_000):
        v = b.op("tanh", b.op("sin", v))
    graph = b.graph({"x": Port((), (x,))}, {"y": Port((), (v,))})
    y = symbolic.to_sympy(graph)["y"]
    assert isinstance(y, sp.tanh)


# ---------------------------------------------------------------------------------------------
# every op of the table

# How each op's arguments are made from scalar inputs x, y, z drawn from [0.5, 1.5), so that
# the op is defined there and its interesting cases (negative arguments, both outcomes of a
# comparison) are reached.
def _shift(b, v):
    return b.sub(v, b.const(1.0))  # [-0.5, 0.5)


OP_ARGS = {
    "neg": lambda b, x, y, z: [x],
    "exp": lambda b, x, y, z: [x],
    "log": lambda b, x, y, z: [x],
    "log1p": lambda b, x, y, z: [_shift(b, x)],
    "expm1": lambda b, x, y, z: [_shift(b, x)],
    "log2": lambda b, x, y, z: [x],
    "log10": lambda b, x, y, z: [x],
    "sqrt": lambda b, x, y, z: [x],
    "cbrt": lambda b, x, y, z: [_shift(b, x)],
    "sin": lambda b, x, y, z: [x],
    "cos": lambda b, x, y, z: [x],
    "tan": lambda b, x, y, z: [x],
    "asin": lambda b, x, y, z: [_shift(b, x)],
    "acos": lambda b, x, y, z: [_shift(b, x)],
    "atan": lambda b, x, y, z: [_shift(b, x)],
    "sinh": lambda b, x, y, z: [_shift(b, x)],
    "cosh": lambda b, x, y, z: [_shift(b, x)],
    "tanh": lambda b, x, y, z: [_shift(b, x)],
    "asinh": lambda b, x, y, z: [_shift(b, x)],
    "acosh": lambda b, x, y, z: [b.add(x, b.const(1.0))],
    "atanh": lambda b, x, y, z: [_shift(b, x)],
    "abs": lambda b, x, y, z: [_shift(b, x)],
    "sign": lambda b, x, y, z: [_shift(b, x)],
    "floor": lambda b, x, y, z: [b.mul(x, b.const(3.0))],
    "ceil": lambda b, x, y, z: [b.mul(x, b.const(3.0))],
    "erf": lambda b, x, y, z: [_shift(b, x)],
    "lgamma": lambda b, x, y, z: [_shift(b, x)],
    "not": lambda b, x, y, z: [b.op("gt", x, y)],
    "add": lambda b, x, y, z: [x, y],
    "sub": lambda b, x, y, z: [x, y],
    "mul": lambda b, x, y, z: [x, y],
    "div": lambda b, x, y, z: [x, y],
    "pow": lambda b, x, y, z: [x, y],
    "atan2": lambda b, x, y, z: [_shift(b, y), _shift(b, x)],
    "hypot": lambda b, x, y, z: [_shift(b, x), y],
    "logaddexp": lambda b, x, y, z: [_shift(b, x), y],
    "min": lambda b, x, y, z: [x, y],
    "max": lambda b, x, y, z: [x, y],
    "lt": lambda b, x, y, z: [x, y],
    "le": lambda b, x, y, z: [x, y],
    "gt": lambda b, x, y, z: [x, y],
    "ge": lambda b, x, y, z: [x, y],
    "eq": lambda b, x, y, z: [x, y],
    "ne": lambda b, x, y, z: [x, y],
    "and": lambda b, x, y, z: [b.op("gt", x, y), _shift(b, z)],
    "or": lambda b, x, y, z: [b.op("gt", x, y), b.op("gt", y, z)],
    "select": lambda b, x, y, z: [b.op("gt", x, y), b.mul(y, z), b.op("sin", z)],
}
# select on a plain value (nonzero is true), not a comparison
OP_EXTRA = {
    "select_on_value": ("select", lambda b, x, y, z: [_shift(b, x), b.mul(y, z), z]),
    "not_on_value": ("not", lambda b, x, y, z: [_shift(b, x)]),
}
OP_CASES = {name: (name, make) for name, make in OP_ARGS.items()} | OP_EXTRA


def test_every_op_has_a_case_and_a_sympy_rule():
    table = set(ops.OPS) - {"input", "const"}
    assert table == set(OP_ARGS)
    for name in table:
        assert name in symbolic.SYMPY_FUNCS, name


def op_graph(case: str):
    name, make = OP_CASES[case]
    b = Builder()
    x, y, z = (b.input(n, 0) for n in "xyz")
    out = b.op(name, *make(b, x, y, z))
    return b.graph({n: Port((), (i,)) for n, i in zip("xyz", (x, y, z), strict=True)},
                   {"out": Port((), (out,))})


@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_op_exports_to_the_value_numpy_computes(case):
    graph = op_graph(case)
    expr = symbolic.to_sympy(graph)["out"]
    rng = np.random.default_rng(1)
    for _ in range(4):
        point = {n: float(rng.uniform(0.5, 1.5)) for n in "xyz"}
        want = reference.evaluate(graph, {n: np.array([v]) for n, v in point.items()})["out"][0]
        got = expr.xreplace({sp.Symbol(n, real=True): sp.Float(v) for n, v in point.items()})
        assert float(got.evalf(30)) == pytest.approx(want, rel=1e-13, abs=1e-15), case


@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_op_derivative_matches_sympy_and_finite_differences(case):
    report = check(op_graph(case), points=3, seed=2)
    assert report["ok"], format_check(report)
    for name, entry in report["symbolic"]["out"].items():
        # lgamma's derivative is digamma by a series accurate to about 1e-15, not exactly
        want = ("proven", "numeric50") + (("rounding",) if case == "lgamma" else ())
        assert entry["status"] in want, (case, name, entry)


def test_our_derivatives_equal_sympy_derivatives_for_a_matrix_program():
    graph = graph_of((EXAMPLES[0].parent / "matrix.dd").read_text())
    for of in graph.outputs:
        ours = oracle.our_derivatives(graph, of=of)
        theirs = oracle.sympy_derivatives(graph, of=of)
        assert ours.keys() == theirs.keys() == {"A", "v"}
        for name in ours:
            assert ours[name].shape == theirs[name].shape
            assert all(sp.expand(a - b) == 0 for a, b in zip(
                sp.flatten(ours[name]), sp.flatten(theirs[name]), strict=True))


# ---------------------------------------------------------------------------------------------
# check


# Examples defined where no box of independent ranges reaches: gauss.dd's covariance must be
# positive definite. They are checked at these points (two, shared mu), and at random ones
# check must say that it compared nothing rather than pass.
GIVEN_POINTS = {"gauss.dd": {"S": [[[2, 1, 0], [1, 2, 1], [0, 1, 2]],
                                   [[4, -7, 9], [1, 3, -2], [0.5, 1, 2]]],  # read below
                             "x": [[1, 0, 1], [0.3, -2, 0.7]], "mu": [0.5, 0.25, -1]}}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_check_passes_on_every_example(path):
    prog = diffdsl.load(path)
    if path.name in GIVEN_POINTS:
        drawn = check(prog.graph)
        assert drawn["status"] == "unchecked" and drawn["checked"] == 0, format_check(drawn)
        report = prog.check(points=GIVEN_POINTS[path.name])
        assert report.given == 2
    else:
        report = check(prog.graph)
    assert report["ok"] and report["status"] == "ok", format_check(report)
    assert report["unchecked"] == [] and report["checked"] > 0
    for per_out in report["symbolic"].values():
        for entry in per_out.values():
            assert entry["status"] in ("proven", "numeric50") or (
                path.name in GIVEN_POINTS and entry["status"] == "skipped"), entry
    for per_out in report["numeric"].values():
        for entry in per_out.values():
            assert entry["ok"] and entry["checked"] > 0


def test_check_catches_a_wrong_pullback(monkeypatch):
    wrong = dataclasses.replace(
        ops.OPS["sin"], pullback=lambda g, a, out, ct: (g.mul(ct, g.op("sin", a[0])),))
    monkeypatch.setitem(ops.OPS, "sin", wrong)
    graph = graph_of("input x[2]\noutput f = sin(x[0]) * x[1]")
    report = check(graph)
    assert report["ok"] is False
    sym = report["symbolic"]["f"]["x"]
    assert sym["status"] == "mismatch"
    assert [m["element"] for m in sym["mismatches"]] == [[0]]
    assert "cos" in sym["mismatches"][0]["sympy"] and "cos" not in sym["mismatches"][0]["ours"]
    assert report["numeric"]["f"]["x"]["ok"] is False
    assert report["numeric"]["f"]["x"]["worst_element"] == [0]
    text = format_check(report)
    assert "MISMATCH d/dx[0] of f:" in text and text.endswith("FAILED: derivatives disagree")


def test_check_catches_a_wrong_tangent_rule(monkeypatch):
    # Only forward mode uses `tangent`; the finite differences check both modes' Jacobians.
    wrong = dataclasses.replace(ops.OPS["min"], tangent=lambda g, a, out, t: ops._z(g, t[1]))
    monkeypatch.setitem(ops.OPS, "min", wrong)
    graph = graph_of("input x[2]\noutput m = [min(x[0], x[1]), x[0], x[1]]")
    report = check(graph)
    assert report["ok"] is False
    assert report["numeric"]["m"]["x"]["ok"] is False


def test_check_reports_shapes_and_elements():
    graph = graph_of("input A[2, 2]\ninput s\noutput w = A * s")
    report = check(graph, points=2)
    assert report["ok"]
    assert report["symbolic"]["w"]["A"]["elements"] == 16
    assert report["symbolic"]["w"]["s"]["elements"] == 4
    text = format_check(report)
    assert "d/dA of w: symbolic proven (16 elements), finite differences max rel err" in text
    assert text.splitlines()[-1] == "ok"


def test_check_skips_sympy_for_deep_graphs_but_still_differences():
    b = Builder()
    x = b.input("x", 0)
    v = x
    for _ in range(1000):
        v = b.op("sin", b.add(v, x))
    graph = b.graph({"x": Port((), (x,))}, {"y": Port((), (v,))})
    report = check(graph, points=2)
    assert report["ok"]
    assert report["symbolic"]["y"]["x"]["status"] == "skipped"
    assert report["numeric"]["y"]["x"]["checked"] > 0


def test_jacobian_modes_agree_with_the_check_points():
    # The numeric check evaluates the reverse and forward Jacobians; they must agree.
    graph = graph_of((EXAMPLES[0].parent / "special.dd").read_text())
    x0 = {"x": np.array([0.7, 1.1, 1.3]), "y": np.array([0.6, 0.9, 1.4])}
    for of in graph.outputs:
        rev = reference.evaluate(autodiff.jacobian(graph, of, mode="reverse"), x0)
        fwd = reference.evaluate(autodiff.jacobian(graph, of, mode="forward"), x0)
        for key in rev:
            np.testing.assert_allclose(rev[key], fwd[key], rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# printing


def test_format_derivatives_plain_latex_and_json():
    graph = graph_of("input A[2, 2]\noutput d = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]")
    derivs = oracle.our_derivatives(graph)
    assert report_formulas.format_derivatives(derivs).splitlines() == [
        "d d / d A[0, 0] = A[1, 1]",
        "d d / d A[0, 1] = -A[1, 0]",
        "d d / d A[1, 0] = -A[0, 1]",
        "d d / d A[1, 1] = A[0, 0]",
    ]
    latex = report_formulas.format_derivatives(derivs, latex=True).splitlines()
    assert latex[1] == r"\frac{\partial d}{\partial {A}_{0,1}} = - {A}_{1,0}"
    as_json = report_formulas.derivatives_json(derivs)
    assert as_json == {"A": [["A[1, 1]", "-A[1, 0]"], ["-A[0, 1]", "A[0, 0]"]]}


def test_json_strings_are_sympy_syntax():
    graph = graph_of("input x\ninput v[2]\noutput f = exp(x * v[0]) / v[1]")
    derivs = oracle.our_derivatives(graph, real=False)
    strings = report_formulas.derivatives_json(derivs)
    assert isinstance(strings["x"], str)  # a scalar output and input: one string
    names = {"x": sp.Symbol("x"), "v": sp.IndexedBase("v", shape=(2,))}
    assert sp.sympify(strings["x"], locals=names) == derivs["x"]
    for k in range(2):
        assert sp.sympify(strings["v"][k], locals=names) == derivs["v"][k]


def test_format_derivatives_of_an_array_output_labels_both_indices():
    graph = graph_of("input v[2]\noutput w = v * v[0]")
    text = report_formulas.format_derivatives(oracle.our_derivatives(graph))
    assert text.splitlines() == [
        "d w[0] / d v[0] = 2*v[0]",
        "d w[0] / d v[1] = 0",
        "d w[1] / d v[0] = v[1]",
        "d w[1] / d v[1] = v[0]",
    ]


def test_format_derivatives_with_cse_prints_shared_subexpressions_first():
    graph = graph_of("input x\ninput y\noutput f = sin(x * y) * exp(x * y)")
    text = report_formulas.format_derivatives(oracle.our_derivatives(graph), cse=True)
    lines = text.splitlines()
    assert lines[0].startswith("x0 = ")
    assert lines[-2].startswith("d f / d x = ") and lines[-1].startswith("d f / d y = ")
    assert lines[-1] == "d f / d y = x*x2"
    # An input named like the CSE symbols moves them out of its way, in LaTeX too.
    graph = graph_of("input x0\noutput f = sin(x0 * x0) * exp(x0 * x0)")
    text = report_formulas.format_derivatives(oracle.our_derivatives(graph), cse=True)
    assert text.splitlines()[0] == "t0 = x0**2"
    latex = report_formulas.format_derivatives(oracle.our_derivatives(graph), latex=True, cse=True)
    assert latex.splitlines()[0] == "t_{0} = x_{0}^{2}"
    assert r"\frac{\partial f}{\partial x_{0}} = 2 x_{0}" in latex
