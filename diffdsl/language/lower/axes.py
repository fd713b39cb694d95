"""Keyword arguments of calls: `axis=` of the reductions (`sum(A, axis=0)`), as in NumPy.

Only the reductions take a keyword, and only `axis`: a static integer (negative counts from
the end). The result has the array's shape without that axis; each of its elements is the
reduction of the elements along the axis, in order, as `sum(row)` reduces a row.
"""

from __future__ import annotations

from ...errors import ShapeError, StaticValueError, TypeMismatchError
from .. import syntax as s
from ..builtins.table import reduce_along
from ..values import describe
from .rows import along, elements, lazy, shape

AXIS_REDUCTIONS = ("sum", "prod", "min", "max", "mean", "logsumexp")


def keyword_call(lw, e: s.Call, scope):
    """A call with keyword arguments: a reduction along an axis, or a located error."""
    positional = [a for a in e.args if not isinstance(a, s.Keyword)]
    keywords = [a for a in e.args if isinstance(a, s.Keyword)]
    first = keywords[0]
    if e.func in lw.functions or e.func not in AXIS_REDUCTIONS:
        raise TypeMismatchError(f"{e.func}() takes no keyword argument '{first.name}'",
                                first.span,
                                hint=f"only {', '.join(AXIS_REDUCTIONS)} take one: axis=")
    if any(isinstance(a, s.Keyword) for a in e.args[:len(positional)]):
        raise TypeMismatchError("a keyword argument comes after the positional ones",
                                first.span)
    for k in keywords:
        if k.name != "axis":
            raise TypeMismatchError(f"{e.func}() takes no keyword argument '{k.name}'", k.span,
                                    hint="the keyword it takes is axis=")
    if len(keywords) > 1:
        raise TypeMismatchError("axis= is given twice", keywords[1].span)
    if len(positional) != 1:
        raise TypeMismatchError(f"{e.func}(A, axis=k) takes one array, got {len(positional)} "
                                "positional arguments", e.span)
    value = lw.whole_expr(positional[0], scope)
    dims = shape(value)
    if not dims:
        raise ShapeError(f"{e.func}(..., axis=) needs an array, got {describe(value)}",
                         positional[0].span)
    axis = lw.expr(first.value, scope)
    if type(axis) is not int:
        raise StaticValueError(f"axis= is a static integer, got {describe(axis)}",
                               first.value.span)
    if not -len(dims) <= axis < len(dims):
        raise ShapeError(f"axis {axis} is out of range for an array of shape "
                         f"{list(dims)}", first.value.span,
                         hint=f"the axes are {-len(dims)} to {len(dims) - 1}")
    if lazy(value):
        done = along(lw, e.func, value, axis % len(dims), e.span)
        if done is not None:
            return done
        value = elements(lw, value)
    return reduce_along(lw.v, e.func, value, axis % len(dims), e.span)
