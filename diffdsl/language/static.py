"""Builtins of static numbers, folded through the op table as the compiled program computes
them (values.py): a static real with the row's NumPy function (IEEE: `log(0)` is `-inf`), a
static integer kept an integer where the row says its value at integers is one."""

from __future__ import annotations

import numpy as np

from ..graph.ops import OPS
from ..graph.ufuncs import FUNCTIONS


def static_integer(name: str, xs: tuple) -> int | None:
    """The builtin `name` of static integers as an integer where its result is one, else None.

    These builtins (`keeps_integers` in the rows) keep static integers integer, as integer
    arithmetic does, so `range(max(0, i - 2), min(n, i + 3))` works. floor and ceil of a static
    real stay real: an integer would lose the sign of `ceil(-0.5)`, which is -0.0, and folding
    never changes a result.
    """
    row = OPS.get(name)
    if row is not None and row.keeps_integers and all(type(x) in (int, bool) for x in xs):
        return int(row.fold(*(int(x) for x in xs)))
    return None


# Python's own float +, - and * are IEEE double operations, rounded to nearest, with no
# exception on overflow or NaN: the same bits as NumPy's (but for the sign of NaN + NaN, which
# follows the operands' order, as in compiled code), without its error state (3 us).
_EXACT = {"add": float.__add__, "sub": float.__sub__, "mul": float.__mul__}


def static_real(name: str, *xs: float) -> float:
    """A static real computed with IEEE semantics, as the compiled program would."""
    exact = _EXACT.get(name)
    if exact is not None and type(xs[0]) is float and type(xs[1]) is float:
        return exact(xs[0], xs[1])
    with np.errstate(all="ignore"):
        return float(FUNCTIONS[name](*(np.float64(x) for x in xs)))
