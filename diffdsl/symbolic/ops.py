"""Each op of the table as SymPy: the rows' `sympy` spellings (ops.py) compiled once into
rules over the exported arguments, for symbolic.py's export loop."""

from __future__ import annotations

from typing import Callable

import sympy as sp
from sympy.core.logic import fuzzy_and

from ..graph.ops import OPS


class Arg:
    """An argument of an op as exported.

    `x` is its expression. `alt` is the same value written without Piecewise, for conditions
    to use: SymPy rewrites a condition that holds a Piecewise into ITE form, which doubles at
    every step of a max reduction or of a loop of dynamic ifs (and fails outright on some).
    In `alt`, min and max are SymPy's Min and Max (equal in value), and a select is `select`.
    `rel` is its relation when it is a comparison or a logical combination of them.
    """

    __slots__ = ("x", "alt", "rel")

    def __init__(self, x, alt, rel):
        self.x = x
        self.alt = alt
        self.rel = rel

    @property
    def cond(self):
        """The argument as a condition: nonzero is true."""
        return self.rel if self.rel is not None else sp.Ne(self.alt, 0)


class select(sp.Function):  # noqa: N801 - printed as the IR op it stands for
    """`select(c, a, b)`: `a` where the condition `c` holds, else `b`.

    The value of a select where it appears inside a condition (see `Arg`); elsewhere a
    select is a Piecewise. It collapses to a branch as soon as `c` is decided, as when
    numbers are substituted.
    """

    def _eval_is_extended_real(self):
        return fuzzy_and(branch.is_extended_real for branch in self.args[1:])

    def _eval_is_finite(self):
        return fuzzy_and(branch.is_finite for branch in self.args[1:])

    @classmethod
    def eval(cls, c, a, b):
        if c == sp.true:
            return a
        if c == sp.false:
            return b
        if a == b:
            return a
        return None


def _apply(function, *args):
    """`function(*args)` unevaluated unless every argument is a number.

    SymPy's automatic evaluation of a function asks questions such as `is_number` of its
    argument that recurse to the bottom of it and are not cached, so building a chain of n
    nested calls costs n**2 (a 1600-deep chain of tanh took 30 s; Min and Max factor their
    arguments' differences: 2 s for a chain of 100). The evaluations skipped are cosmetic
    (`sin(-x)` to `-sin(x)`); the IR has folded constant arguments already.
    """
    if all(arg.is_Number for arg in args):
        return function(*args)
    return function(*args, evaluate=False)


class _Ref:
    """Argument `k` of a rule as text: `{0}` in a row's spelling is `a[0].x`, `{0.cond}` is
    `a[0].cond`, `{0.alt}` is `a[0].alt` (see `Arg`)."""

    def __init__(self, k: int):
        self.cond = f"a[{k}].cond"
        self.alt = f"a[{k}].alt"
        self.x = f"a[{k}].x"

    def __format__(self, spec: str) -> str:
        return self.x


def compare(relation: str, a, b):
    """`sp.<relation>(a, b)`, or where SymPy cannot order the two (a NaN, a complex number:
    `x < asin(2)`) what the compiled comparison gives there, as IEEE orders NaN: false, and
    true for `Ne`."""
    try:
        return getattr(sp, relation)(a, b)
    except TypeError:
        return sp.true if relation == "Ne" else sp.false


def _rule(spelling: str, arity: int) -> Callable:
    """A row's SymPy spelling as a function of the list of `Arg`s: a SymPy function's name is
    that function applied (unevaluated) to the arguments' expressions."""
    if spelling.isidentifier():
        spelling = f"apply(sp.{spelling}, " + ", ".join(f"{{{k}}}" for k in range(arity)) + ")"
    body = spelling.format(*(_Ref(k) for k in range(arity)))
    return eval(f"lambda a: {body}", {"sp": sp, "apply": _apply, "select": select,
                                      "compare": compare})


# Keyed by op name. A rule takes the list of `Arg`s and returns an expression, or a SymPy
# Boolean for ops whose value is a condition (exported as 1 or 0).
SYMPY_FUNCS: dict[str, Callable] = {name: _rule(row.sympy, row.arity)
                                    for name, row in OPS.items() if row.arity}
# `alt` (see `Arg`) of the ops whose expression is a Piecewise. Ops whose value is a
# condition have `select(rel, 1, 0)`.
ALT_FUNCS: dict[str, Callable] = {name: _rule(row.sympy_alt, row.arity)
                                   for name, row in OPS.items() if row.sympy_alt}
