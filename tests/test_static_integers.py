"""Static integer arithmetic stays integer, through operators and builtins alike.

LANGUAGE.md: "Integer arithmetic on static integers stays integer". A builtin whose value at
integers is an integer (min, max, abs, sign, floor, ceil, pow with a natural exponent) gives
an integer on static integers, so it may bound a `range` or index an array; every other
builtin gives a real, as Python's `math` does. floor and ceil of a static real stay real.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.errors import TypeMismatchError
from diffdsl.graph.ops import UNARY_BUILTINS
from diffdsl.language.builtins.table import BUILTINS

INTEGER_VALUED = {"min", "max", "abs", "sign", "floor", "ceil", "pow"}
BINARY = {"atan2": "(3, 2)", "hypot": "(3, 4)", "pow": "(3, 2)", "min": "(3, 2)",
          "max": "(3, 2)", "logaddexp": "(3, 2)"}


def as_range_bound(expr: str) -> str:
    """A program that needs `expr` to be a static integer: it bounds a range."""
    return (f"input x\nconst c = {expr}\n"
            f"output y = x + sum(k for k in range(c, c + 1))\n")


@pytest.mark.parametrize("name", sorted(set(UNARY_BUILTINS) | set(BINARY)))
def test_every_elementwise_builtin_on_static_integers(name):
    assert name in BUILTINS
    expr = f"{name}{BINARY.get(name, '(-3)' if name in ('abs', 'sign') else '(2)')}"
    text = as_range_bound(expr)
    if name in INTEGER_VALUED:
        prog = diffdsl.compile(text)
        # as Python computes it on integers
        want = {"abs": 3, "sign": -1, "floor": 2, "ceil": 2, "pow": 9, "min": 2, "max": 3}
        assert prog(x=0.0) == want[name]
    else:
        with pytest.raises(TypeMismatchError, match="range bounds must be integers"):
            diffdsl.compile(text)


def test_issue_example_window_sums():
    prog = diffdsl.compile("const n = 6\ninput x[n]\noutput y = [sum(x[j] for j in "
                           "range(max(0, i - 2), min(n, i + 3))) for i in range(n)]\n")
    x = np.arange(1.0, 7.0)
    want = [x[max(0, i - 2):min(6, i + 3)].sum() for i in range(6)]
    np.testing.assert_array_equal(prog(x=x), want)


def test_floor_and_ceil_of_static_reals_stay_real():
    """An integer would lose the sign of ceil(-0.5) = -0.0: folding never changes a result."""
    with pytest.raises(TypeMismatchError, match="got the real 3.0"):
        diffdsl.compile("input x[4]\noutput y = x[floor(7 / 2)]\n")
    assert math.copysign(1.0, diffdsl.compile("output y = ceil(-0.5)\n")()) == -1.0


def test_reductions_of_static_integers_stay_integer():
    prog = diffdsl.compile(as_range_bound("min(3, 5, 1) + max([1, 7, 2]) + sum([1, 2]) "
                                          "+ prod([2, 3])"))
    assert prog(x=0.0) == 1 + 7 + 3 + 6


# Random static integer expressions, evaluated by Python alongside ------------------------
@st.composite
def integer_expressions(draw, depth=4):
    """`(text, value)` of a static integer expression."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        n = draw(st.integers(-6, 6))
        return (f"({n})", n)
    sub = integer_expressions(depth - 1)
    kind = draw(st.sampled_from(["+", "-", "*", "//", "%", "**", "min", "max", "abs", "sign",
                                 "floor", "ceil", "pow", "neg"]))
    a_text, a = draw(sub)
    if kind in ("abs", "sign", "floor", "ceil"):
        fn = {"abs": abs, "sign": lambda v: (v > 0) - (v < 0), "floor": int, "ceil": int}[kind]
        return (f"{kind}({a_text})", fn(a))
    if kind == "neg":
        return (f"(-{a_text})", -a)
    if kind in ("**", "pow"):
        k = draw(st.integers(0, 3))
        text = f"({a_text} ** {k})" if kind == "**" else f"pow({a_text}, {k})"
        return (text, a ** k)
    b_text, b = draw(sub)
    if kind in ("//", "%"):
        # a divisor that is never zero
        b_text, b = f"(abs({b_text}) + 1)", abs(b) + 1
        return (f"({a_text} {kind} {b_text})", a // b if kind == "//" else a % b)
    if kind in ("min", "max"):
        return (f"{kind}({a_text}, {b_text})", min(a, b) if kind == "min" else max(a, b))
    value = {"+": a + b, "-": a - b, "*": a * b}[kind]
    return (f"({a_text} {kind} {b_text})", value)


@settings(max_examples=150, deadline=None)
@given(integer_expressions())
def test_random_static_integer_expressions_stay_integer(case):
    text, value = case
    prog = diffdsl.compile(as_range_bound(text))
    assert prog(x=0.0) == float(value), text


@settings(max_examples=300, deadline=None)
@given(op=st.sampled_from(["add", "sub", "mul", "div", "pow"]),
       x=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
       y=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True))
def test_static_reals_fold_to_numpys_bits(op, x, y):
    """A static real folds as NumPy's float64 computes it (the compiled program's IEEE
    arithmetic): +, - and * take Python's float operations, the rest NumPy's; the bits
    agree, but for NaN's sign, which no compiled code keeps either."""
    import struct

    from diffdsl.language.static import static_real
    with np.errstate(all="ignore"):
        expected = float({"add": np.add, "sub": np.subtract, "mul": np.multiply,
                          "div": np.divide, "pow": np.power}[op](np.float64(x), np.float64(y)))
    got = static_real(op, x, y)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert struct.pack("<d", got) == struct.pack("<d", expected)
