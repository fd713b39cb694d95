"""`diffdsl diff --cse` on derivatives too big for `sympy.cse` (issue 10: an RK4 integrator's
`--cse` ran for more than 12 minutes). Past `CSE_TERMS` written-out terms the graph's shared
nodes are named, in one pass over the graph; the rule is checked here by evaluating what is
printed, and what `export_shared` returns, against independent numbers."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from draws import examples
from fuzzing import programs
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.cli import main
from diffdsl.errors import DiffDSLError
from diffdsl.graph.loops import expand
from diffdsl.symbolic import export as symbolic
from diffdsl.symbolic import formulas as report_formulas
from diffdsl.symbolic.atoms import Symbols

ROOT = Path(__file__).parent.parent
WHOLE_TERMS = 20_000  # written-out terms up to which the unnamed formulas are evaluated too
# examples/data/ is left out: its loops over data, written out for formulas, are derivative
# graphs of 0.4 to 1.7 million nodes (k-means, the MLP, the mixture).
EXAMPLES = sorted((ROOT / "examples").glob("*.dd")) + sorted((ROOT / "examples").glob("loops/*.dd"))

RK4 = """input y0
input k
const h = 0.1
def f(y, k) = -k * y + sin(y)
y = y0
for i in range(STEPS) {
    a = f(y, k)
    b = f(y + h / 2 * a, k)
    c = f(y + h / 2 * b, k)
    d = f(y + h * c, k)
    y = y + h / 6 * (a + 2 * b + 2 * c + d)
}
output out = y
"""


def _numbers(assignments, exprs, env):
    """Substitute each assignment in order, then the expressions: floats (None: not real)."""
    env = dict(env)
    for sym, sub in assignments:
        value = sub.xreplace(env)
        env[sym] = sp.N(value, 30) if isinstance(value, sp.Expr) else value  # or a condition
    result = []
    for expr in exprs:
        value = sp.N(sp.sympify(expr).xreplace(env), 30)
        if value.is_finite and not value.is_real and value.is_complex:
            # A real value reached through complex intermediates (named parts that hold
            # log(-v), whose imaginary parts cancel) keeps a residue of the 30 digits.
            re, im = (float(part) for part in value.as_real_imag())
            if abs(im) <= 1e-20 * (1 + abs(re)):
                value = sp.Float(re, 30)
        result.append(float(value) if value.is_real and value.is_finite else None)
    return result


@pytest.mark.parametrize("steps", [3, 40])
def test_rk4_prints_named_parts_that_evaluate_to_the_gradient(tmp_path, capsys, steps):
    path = tmp_path / "rk4.dd"
    path.write_text(RK4.replace("STEPS", str(steps)))
    assert main(["diff", str(path), "--cse"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = {n: sp.Symbol(n, real=True) for n in ("y0", "k")}
    assignments, elements = [], {}
    for line in lines:
        left, right = line.split(" = ")
        if left.startswith("d out / d "):
            elements[left[len("d out / d "):]] = sp.sympify(right, locals=names)
        else:
            assert re.fullmatch(r"x\d+", left), line
            names[left] = sp.Symbol(left)
            assignments.append((names[left], sp.sympify(right, locals=names)))
    # linear in the steps: a few named parts a step, where the trees have 10**10 terms at 3
    assert len(assignments) < 20 * steps
    point = {"y0": 0.7, "k": 1.3}
    got = _numbers(assignments, [elements["y0"], elements["k"]],
                   {names[n]: v for n, v in point.items()})
    want = diffdsl.compile(path.read_text()).grad(**point)
    assert got == pytest.approx([want["y0"], want["k"]], rel=1e-12)


def test_small_derivatives_keep_sympys_cse(capsys):
    """Below CSE_TERMS, `sympy.cse` (which also simplifies) prints as before."""
    jac = diffdsl.load(ROOT / "examples" / "det3.dd").derivative("jacobian")
    assert not report_formulas.needs_graph_cse(jac)
    assert main(["diff", str(ROOT / "examples" / "det3.dd"), "--cse"]) == 0
    assert "d d / d A[0, 0] = A[1, 1]*A[2, 2] - A[1, 2]*A[2, 1]" in capsys.readouterr().out


def test_needs_graph_cse_from_the_terms_written_out():
    small = diffdsl.compile(RK4.replace("STEPS", "1")).derivative("jacobian")
    big = diffdsl.compile(RK4.replace("STEPS", "2")).derivative("jacobian")
    assert not report_formulas.needs_graph_cse(small)
    assert report_formulas.needs_graph_cse(big)


def _check_named(prog, rng) -> bool:
    """The named parts of prog's Jacobian, substituted back, equal the Jacobian as one
    expression a node (`export_nodes`) and, where finite, the compiled Jacobian. False
    where SymPy could not evaluate the formulas at the point drawn."""
    of = next(iter(prog.graph.outputs))
    jac = expand(prog.derivative("jacobian", of))  # loops kept as loops: as `diff` prints them
    syms = Symbols(jac)
    atom = lambda name, k: syms.public[name][k]  # noqa: E731
    ids = [i for name, port in jac.outputs.items() if name.startswith("d:") for i in port.ids]
    point = {name: rng.uniform(0.2, 1.2, port.shape) for name, port in jac.inputs.items()}
    env = {syms.public[name][k]: sp.Float(float(v), 30)
           for name, value in point.items() for k, v in enumerate(np.ravel(value))}
    assignments, named = symbolic.export_shared(jac, ids, atom, sp.numbered_symbols("t"))
    sizes, _ = symbolic.expression_sizes(jac, WHOLE_TERMS + 1)
    big = max(sizes[i] for i in ids) > WHOLE_TERMS  # a loop's trees: too big to evaluate
    # SymPy cannot order a complex or NaN value (`log(-x) < 1`: TypeError), nor build Min or
    # Max of an infinity without a sign (`v / 0` is zoo: ValueError): then no number is had.
    want = None
    try:
        if not big:
            want = _numbers([], [symbolic.export_nodes(jac, ids, atom)[i] for i in ids], env)
        got = _numbers(assignments, [named[i] for i in ids], env)
    except (TypeError, ValueError):
        if want is None:
            return False
        raise  # the named parts failed where the whole did not
    want = got if big else want
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = prog.jacobian(of=of, backend="numpy", **point)
    flat = [v for name in jac.inputs for v in np.ravel(compiled[name])]
    for g, w, c in zip(got, want, flat, strict=True):
        assert (g is None) == (w is None)
        if g is not None:
            assert g == pytest.approx(w, rel=1e-9, abs=1e-12)
            if math.isfinite(c):
                assert g == pytest.approx(c, rel=1e-6, abs=1e-9)
    return True


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_named_parts_of_every_example_evaluate_to_its_jacobian(path):
    assert _check_named(diffdsl.load(path), np.random.default_rng(1))


@pytest.mark.parametrize("source", [
    # found by the test below: the loop's guard `c` named, and `c and c` (which SymPy
    # makes `c`) was taken as a number, its condition `Ne(c, 0)`, true for c false
    "input x\ninput A[2, 2]\nt1 = 0\nwhile 0 > x max 2 {\n    t1 += A[0, 0] * 0.5\n}\n"
    "output y = t1\n",
    "input x\ninput y\nc = x > 0\nd = (c and c) or (x > 0 and x > 0)\n"
    "output z = (if d then x * y else y) + (if c and d then y else 2 * x)\n",
])
def test_a_named_condition_combined_with_itself_stays_a_condition(source):
    for seed in range(4):
        assert _check_named(diffdsl.compile(source), np.random.default_rng(seed))


@settings(max_examples=examples(50), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(source=programs(mutate=False), seed=st.integers(0, 2**32 - 1))
def test_named_parts_of_generated_programs_evaluate_to_their_jacobian(source, seed):
    try:
        prog = diffdsl.compile(source)
    except DiffDSLError:
        assume(False)
    assume(_check_named(prog, np.random.default_rng(seed)))
