"""SymPy export with loops kept (symbolic/sums.py, symbolic/lines.py; issue 22, item 6).

The oracles: SymPy's own evaluation of the `Sum` form (`doit`, `lambdify`), the written-out
export of the same program (`unrolled=True`, the loops unrolled by `loops.expand`), and the
compiled program's values and gradients.
"""

import random
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import diffdsl
from diffdsl.cli import main
from diffdsl.graph import loops
from diffdsl.symbolic import lines as symbolic_lines
from diffdsl.symbolic import loop_formulas

SQUARES = """input x[{n}]
input y[{n}]
output d = sum((x[i] - y[i])^2 for i in range({n}))
"""


def bases(prog) -> dict:
    """The SymPy atom of each input: IndexedBase (with shape) or Symbol."""
    return {name: sp.IndexedBase(name, shape=tuple(shape), real=True) if shape else
            sp.Symbol(name, real=True) for name, shape in prog.inputs.items()}


def numeric(prog, expr, point: dict) -> float:
    """`expr` evaluated by SymPy's lambdify (a Sum as a Python loop) at `point`."""
    atoms = bases(prog)
    f = sp.lambdify(list(atoms.values()), expr, "math")
    return float(f(*[np.asarray(point[n]) if np.ndim(point[n]) else point[n] for n in atoms]))


def random_point(prog, rng) -> dict:
    return {name: rng.uniform(0.2, 1.5, size=shape) if shape else float(rng.uniform(0.2, 1.5))
            for name, shape in prog.inputs.items()}


def close(a: float, b: float, rtol: float = 1e-11) -> bool:
    return abs(a - b) <= rtol * max(1.0, abs(a), abs(b))


# ---------------------------------------------------------------------------------------------
# The sum of squares, as the brief has it


def test_sum_is_a_sum_and_doit_is_the_written_out_form():
    prog = diffdsl.compile(SQUARES.format(n=100), cache=False)
    assert loops.has_regions(prog.graph)
    kept = prog.to_sympy()["d"]
    x, y = sp.IndexedBase("x", shape=(100,), real=True), sp.IndexedBase("y", shape=(100,),
                                                                        real=True)
    i = sp.Symbol("i", integer=True, nonnegative=True)
    assert kept == sp.Sum((x[i] - y[i]) ** 2, (i, 0, 99))
    written = prog.to_sympy(unrolled=True)["d"]
    assert not written.has(sp.Sum)
    assert sp.expand(kept.doit() - written) == 0


def test_gradient_of_a_sum_prints_as_one_line_per_input(capsys):
    prog = diffdsl.compile(SQUARES.format(n=1000), cache=False)
    jac = prog.derivative("jacobian", "d")
    got = symbolic_lines.derivative_lines(jac, ["d:x", "d:y"])
    assert [(line.name, line.span) for line in got] == [("d:x", (0, 999)), ("d:y", (0, 999))]
    x, y = sp.IndexedBase("x", shape=(1000,), real=True), sp.IndexedBase("y", shape=(1000,),
                                                                         real=True)
    i = got[0].symbol
    for line, wrt, sign in zip(got, (x, y), (1, -1), strict=True):
        expected = sp.diff((x[i] - y[i]) ** 2, wrt[i])  # SymPy's own derivative
        assert sp.expand(line.expr - expected) == 0, (line.expr, sign)


def test_diff_prints_the_gradient_of_a_sum_in_its_index(tmp_path, capsys):
    path = tmp_path / "squares.dd"
    path.write_text(SQUARES.format(n=1000))
    assert main(["diff", str(path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["d d / d x[i] = 2*x[i] - 2*y[i]    (i = 0 .. 999)",
                   "d d / d y[i] = -2*x[i] + 2*y[i]    (i = 0 .. 999)"]
    # Written out on request: the limit that keeps loops, raised
    assert main(["diff", str(path), "--limit", "unroll=100000"]) == 0
    written = capsys.readouterr().out.strip().splitlines()
    assert len(written) == 2000 and written[7] == "d d / d x[7] = 2*x[7] - 2*y[7]"
    assert main(["diff", str(path), "--latex"]) == 0
    assert "(i = 0, \\ldots, 999)" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# Generated programs: small (Sum.doit against the written-out export) and large (lambdify
# against the compiled values)

TERMS = ["x[i] * y[i]", "sin(x[i]) * s", "x[i] * x[i + 1]", "A[i, 1] * A[i, 2]",
         "(x[i] - s)^2", "log(1 + x[i]^2)", "tanh(y[i]) * x[i]", "i * x[i]",
         "max(x[i], y[i])", "z[i] * y[i]", "sum(A[i, k] * x[i] for k in range(3))",
         "exp(-x[i]) / (1 + y[i + 1])"]


def generated(seed: int, n: int, selects: bool = True) -> str:
    """A program of three of `TERMS` summed; without max where `selects` is false (the
    guards of its gradient make large formulas slow in SymPy)."""
    rnd = random.Random(seed)
    terms = rnd.sample([t for t in TERMS if selects or "max" not in t], 3)
    return (f"input x[{n}]\ninput y[{n}]\ninput A[{n}, 3]\ninput s\n"
            f"z = [exp(x[i]) * s for i in range({n})]\n"
            f"output d = s * sum({' + '.join(terms)} for i in range({n - 1}))\n")


def lines_at(line, k: int):
    return line.expr if line.span is None else line.expr.xreplace({line.symbol: k})


@pytest.mark.parametrize("seed", range(10))
def test_generated_small_programs_agree_with_the_written_out_form(seed):
    prog = diffdsl.compile(generated(seed, 6), cache=False, limits={"unroll": 2})
    assert loops.has_regions(prog.graph)
    kept, written = prog.to_sympy()["d"], prog.to_sympy(unrolled=True)["d"]
    assert kept.has(sp.Sum) and not written.has(sp.Sum)
    rng = np.random.default_rng(seed)
    point = random_point(prog, rng)
    assert close(numeric(prog, kept.doit(), point), numeric(prog, written, point))
    # Every element of the gradient, from its line, against the written-out export's
    jac_written = prog.symbolic_jacobian("d", unrolled=True)
    jac = prog.derivative("jacobian", "d")
    names = [f"d:{name}" for name in prog.inputs]
    for line in symbolic_lines.derivative_lines(jac, names):
        want = jac_written[line.name[2:]]
        first, last = line.span or (None, None)
        for k in range(first, last + 1) if line.span else [None]:
            index = tuple(k if isinstance(j, sp.Symbol) else j for j in line.index)
            expected = want[index] if index else want
            ours = lines_at(line, k)
            assert close(numeric(prog, ours, point), numeric(prog, expected, point)), \
                (line.name, index, ours, expected)


@pytest.mark.parametrize("seed", range(4))
def test_generated_large_programs_against_compiled_values(seed):
    n = 300
    prog = diffdsl.compile(generated(seed, n, selects=False), cache=False)
    kept = prog.to_sympy()["d"]
    assert kept.has(sp.Sum)
    rng = np.random.default_rng(seed)
    point = random_point(prog, rng)
    assert close(numeric(prog, kept, point), float(prog.evaluate(point)["d"]))
    grad = prog.grad(point, of="d")
    jac = prog.derivative("jacobian", "d")
    names = [f"d:{name}" for name in prog.inputs]
    got = symbolic_lines.derivative_lines(jac, names)
    assert len(got) < 40  # each input's gradient in a few lines, not 300
    for line in got:
        for k in ([line.span[0], line.span[1], (line.span[0] + line.span[1]) // 2]
                  if line.span else [None]):
            index = tuple(k if isinstance(j, sp.Symbol) else j for j in line.index)
            want = np.asarray(grad[line.name[2:]])[index] if index else grad[line.name[2:]]
            assert close(numeric(prog, lines_at(line, k), point), float(want), 1e-9), \
                (line.name, index)


def test_what_is_not_a_loop_is_written_out():
    # A min combined over the iterations and a scan stay written out, as they were.
    src = """input x[80]
y = x[0]
for t in range(70) {
    y = y * 0.5 + x[t + 1]
}
output d = min(x[i] * 2 for i in range(80)) + y
"""
    prog = diffdsl.compile(src, cache=False)
    kept = prog.to_sympy()["d"]
    assert not kept.has(sp.Sum)
    assert sp.expand(kept - prog.to_sympy(unrolled=True)["d"]) == 0


# ---------------------------------------------------------------------------------------------
# Loops with a max inside: a mixture's logsumexp


def test_a_sum_keeps_its_branches_where_they_are():
    """A Piecewise in a summand stays in it (SymPy's Sum folds it outwards, multiplying out
    the conditions of a logsumexp's max for minutes), and the sum is still the sum."""
    i, z = sp.Symbol("i", integer=True), sp.Symbol("z", real=True)
    x = sp.IndexedBase("x", shape=(6,))
    term = x[i] + 2 * sp.Piecewise((x[i] * z, x[i] > z), (z, True))
    assert not isinstance(sp.Sum(term, (i, 0, 5)).function, sp.Add)  # folded: Piecewise
    made = loop_formulas.summed(term, i, 6)
    assert isinstance(made, sp.Sum) and made.function == term
    assert made.limits == ((i, 0, 5),)
    point = {x[k]: sp.Rational(k, 3) for k in range(6)} | {z: sp.Rational(4, 5)}
    assert made.doit().xreplace(point) == sum(term.xreplace({i: k}) for k in range(6)).xreplace(
        point)


def test_an_iteration_put_into_a_formula_folds_numbers_alone():
    """`put` (a loop's map output at one iteration) folds what becomes a number (an index
    i + 1), leaves a max of a symbol unevaluated as the export built it, and keeps a sum
    that binds the same index as it is."""
    i, z = sp.Symbol("i", integer=True), sp.Symbol("z", real=True)
    x = sp.IndexedBase("x", shape=(9,))
    inner = loop_formulas.summed(x[i] * z, i, 9)
    formula = sp.Max(x[i + 1] * z, z + i, evaluate=False) + inner
    got = loop_formulas.put(formula, i, sp.Integer(3), {})
    (max_term,) = [a for a in got.args if isinstance(a, sp.Max)]
    r = sp.Rational(5, 7)
    assert {a.xreplace({z: r}) for a in max_term.args} == {x[4] * r, r + 3}
    assert inner in got.args


def test_a_mixtures_gradient_as_formulas_agrees_with_the_compiled_one():
    """GradBench's GMM (a logsumexp over the components inside the loop over the points):
    `diff` printed nothing for minutes; its gradient as formulas now agrees with the
    compiled gradient at a point."""
    text = (Path(__file__).resolve().parents[1] / "bench" / "gradbench" / "gmm.dd").read_text()
    text = text.replace("const n = 1000", "const n = 70").replace("const k = 5", "const k = 3")
    prog = diffdsl.compile(text, cache=False)
    derivs = prog.symbolic_jacobian(of="objective")
    rng = np.random.default_rng(11)
    point = random_point(prog, rng)
    grad = prog.grad(point, of="objective")
    for name in ("alpha", "mu", "l"):
        want = np.ravel(grad[name])
        got = np.ravel(np.array(derivs[name].tolist(), dtype=object)) \
            if hasattr(derivs[name], "tolist") else [derivs[name]]
        for k in (0, len(want) - 1):
            assert close(numeric(prog, got[k], point), float(want[k]), 1e-9), (name, k)
