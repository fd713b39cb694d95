"""The parts of a program that must be known when it is compiled: indices, slice bounds, the
values a loop takes. Each is evaluated like any expression and then refused, at its own span,
if it depends on an input or is not an integer.
"""

from __future__ import annotations

from ...errors import ShapeError, StaticValueError, TypeMismatchError
from .. import syntax as s
from ..loop_index import Index
from ..values import Dyn, describe, is_array


def need_static_int(v, value, span, what: str) -> None:
    """Refuse `value` unless it is a static integer; `v` is the value algebra, `what` names
    the part of the program in the message ("an index")."""
    if isinstance(value, Dyn) or (is_array(value) and not v.is_static(value)):
        raise StaticValueError(f"{what} must be static, but this one depends on an input",
                               span)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeMismatchError(f"{what} must be an integer, got {describe(value)}", span)


def subscripts(lw, subs, scope) -> list:
    """The subscripts of `A[...]` as (index or slice, span) pairs for the value algebra; `lw`
    is the lowerer (its value algebra `v` and `expr`)."""
    out = []
    for sub in subs:
        if isinstance(sub, s.Slice):
            parts = []
            for part in (sub.start, sub.stop, sub.step):
                if part is None:
                    parts.append(None)
                    continue
                value = lw.expr(part, scope)
                need_static_int(lw.v, value, part.span, "a slice bound")
                parts.append(value)
            if parts[2] == 0:
                raise ShapeError("slice step cannot be zero", sub.span)
            out.append((slice(*parts), sub.span))
        else:
            value = lw.expr(sub, scope)
            if is_array(value):
                if not all(isinstance(x, int) and not isinstance(x, bool)
                           for x in value.flat):
                    raise StaticValueError("an index array must hold static integers",
                                           sub.span)
            elif not isinstance(value, Index):  # an Index: a loop kept as a loop reads it
                need_static_int(lw.v, value, sub.span, "an index")
            out.append((value, sub.span))
    return out


def iterate(lw, e, scope) -> list:
    """The values a loop or a generator clause takes, each a step charged before the list
    is made: `range(10**9)` is refused at once, not after filling memory."""
    if isinstance(e, s.Call) and e.func == "range" and "range" not in lw.functions:
        bounds = [lw.expr(a, scope) for a in e.args]
        values = lw.v.range(bounds, e)
        lw.v.budget.charge(range_length(values), e.span, "this loop")
        return list(values)
    value = lw.expr(e, scope)
    if is_array(value):
        lw.v.budget.charge(len(value), e.span, "this loop")
        return list(value)
    raise TypeMismatchError(f"can only loop over range(...) or an array, not {describe(value)}",
                            e.span)


def range_length(r: range) -> int:
    """len(r), also past sys.maxsize (where len() raises OverflowError)."""
    if r.step > 0:
        return max(0, (r.stop - r.start + r.step - 1) // r.step)
    return max(0, (r.start - r.stop - r.step - 1) // -r.step)
