"""`diffdsl check` evaluates SymPy formulas numerically; an input's name must never be read as
one of SymPy's or mpmath's names (issue 10): inputs are renamed before evaluation."""

from __future__ import annotations

import math

import mpmath
import pytest
import sympy as sp

from diffdsl.symbolic import check

NAMES = ["pi", "E", "I", "N", "S", "mpf", "oo", "zoo", "nan", "Float", "select", "mpmath",
         "math", "exp", "sin", "x0", "x1", "builtins", "range", "lambda_", "Dummy", "_Dummy_1"]


@pytest.mark.parametrize("name", NAMES)
def test_no_input_name_clashes_in_numeric_evaluation(name):
    s = sp.Symbol(name, real=True)
    x = sp.Symbol("x", real=True)
    exprs = [2 * s + sp.pi + sp.E, sp.exp(s) * x + sp.Float("0.25"),
             sp.Piecewise((s, x > 0), (-s, True)) + sp.cos(s * x)]
    values = check.evaluate(exprs, [s, x], [[0.5, 1.5]])[0]
    want = [1 + math.pi + math.e, math.exp(0.5) * 1.5 + 0.25, 0.5 + math.cos(0.75)]
    for got, expect in zip(values, want, strict=True):
        assert abs(complex(got) - expect) < 1e-12, (name, got, expect)
    assert all(isinstance(v, (mpmath.mpf, mpmath.mpc)) for v in values)
