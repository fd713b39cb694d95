"""Formulas in Jupyter: `symbolic_grad` and `symbolic_jacobian` give dicts that show as LaTeX,
checked against `sympy.latex` of derivatives worked out by hand."""

from __future__ import annotations

import re

import sympy as sp

import diffdsl
from diffdsl.symbolic import oracle

x = sp.Symbol("x", real=True)
# An input's base carries its shape, as export writes it.
v = sp.IndexedBase("v", shape=(2,), real=True)
A = sp.IndexedBase("A", shape=(2, 2), real=True)


def _expected(of: str, parts: dict) -> str:
    """The display Jupyter should get: one aligned line an input, formulas by SymPy."""
    lines = [f"\\frac{{\\partial {of}}}{{\\partial {name}}} &= {sp.latex(value)}"
             for name, value in parts.items()]
    return "$\\begin{aligned}" + " \\\\ ".join(lines) + "\\end{aligned}$"


def _well_formed(text: str) -> bool:
    """Braces balance (never below zero), every \\begin has its \\end in order, one $...$."""
    depth = 0
    # `\\` (a new row) first, so that `\\{A}` is not read as an escaped brace
    for ch in text.replace("\\\\", " ").replace("\\{", "").replace("\\}", ""):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            return False
    stack = []
    for kind, env in re.findall(r"\\(begin|end)\{(\w+)\}", text):
        if kind == "begin":
            stack.append(env)
        elif not stack or stack.pop() != env:
            return False
    return depth == 0 and not stack and text.count("$") == 2 and text[0] == text[-1] == "$"


def test_grad_of_scalar_vector_and_matrix_inputs_shows_as_latex():
    prog = diffdsl.compile("input x\ninput v[2]\ninput A[2, 2]\n"
                           "output f = x * x + v[0] * v[1] + A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]")
    grads = prog.symbolic_grad()
    # by hand: df/dx = 2x, df/dv = (v1, v0), df/dA is the cofactor matrix of A
    want = {"x": 2 * x, "v": sp.Array([v[1], v[0]]),
            "A": sp.Array([[A[1, 1], -A[1, 0]], [-A[0, 1], A[0, 0]]])}
    assert grads._repr_latex_() == _expected("f", want)
    assert _well_formed(grads._repr_latex_())
    assert isinstance(grads, dict) and dict(grads) == want  # still the dict it was


def test_jacobian_of_a_vector_output_is_a_matrix_with_a_row_per_output_element():
    prog = diffdsl.compile("input v[2]\noutput w = [v[0] * v[1], sin(v[0])]")
    jac = prog.symbolic_jacobian()
    want = {"v": sp.Array([[v[1], v[0]], [sp.cos(v[0]), 0]])}
    assert jac._repr_latex_() == _expected("w", want) and _well_formed(jac._repr_latex_())
    assert jac.of == "w" and jac.out_shape == (2,)


def test_a_one_element_array_output_and_names_that_latex_spells_differently():
    prog = diffdsl.compile("input alpha\ninput x_1\noutput y_2 = [[alpha * x_1]]")
    grads = prog.symbolic_grad()
    alpha, x1 = sp.Symbol("alpha", real=True), sp.Symbol("x_1", real=True)
    assert grads._repr_latex_() == _expected("y_{2}", {"\\alpha": x1, "x_{1}": alpha})


def test_formulas_too_big_to_show_fall_back_to_plain_text(monkeypatch):
    prog = diffdsl.load("examples/det3.dd")
    grads = prog.symbolic_grad()
    assert _well_formed(grads._repr_latex_())
    monkeypatch.setattr(oracle.Derivatives, "LATEX_TERMS", 10)
    assert grads._repr_latex_() is None  # Jupyter then shows the dict's text
