"""Formulas of programs that compare with a number SymPy cannot order: a NaN or a complex
constant (`asin(2)`, `sqrt(-1)`, `log(-1)`). The compiled comparison follows IEEE (false,
and true for `!=`; min and max take their second argument); the SymPy export must say the
same, not stop with SymPy's "Invalid NaN comparison" (the command line's internal error,
found by the `diff --cse` test's generated programs)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import diffdsl

UNORDERED = ["asin(2)", "sqrt(-1)", "log(-1)", "0 / 0 * x"]
TESTS = ["<", "<=", ">", ">=", "==", "!="]


@pytest.mark.parametrize("value", UNORDERED)
@pytest.mark.parametrize("form", TESTS + ["min", "max"])
def test_comparisons_with_unordered_numbers_export_as_they_run(value, form):
    if form in ("min", "max"):
        body = f"y = {form}(x * x, {value}) + x"
    else:
        body = f"y = if x {form} {value} then x * x else 3 * x"
    prog = diffdsl.compile(f"input x\n{body}\noutput y\n", cache=False)
    x = 0.7
    formulas = prog.symbolic_grad()["x"]
    symbol = next(iter(sp.sympify(formulas).free_symbols), None)
    exported = complex(sp.N(formulas.subs(symbol, x))) if symbol is not None else \
        complex(sp.N(formulas))
    compiled = float(prog.grad(x=x)["x"])
    if np.isnan(compiled):
        assert np.isnan(exported.real) or exported.imag != 0 or not np.isfinite(exported.real)
    else:
        assert exported.imag == 0 and exported.real == pytest.approx(compiled, rel=1e-12)
