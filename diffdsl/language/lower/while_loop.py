"""`while c max N { ... }`: a loop with a dynamic exit, unrolled into N guarded steps.

The graph is static, so the loop is unrolled N times with a running flag:

    running_k = running_{k-1} and c(state_{k-1})
    state_k   = select(running_k, body(state_{k-1}), state_{k-1})

which is the merge of a dynamic `if` with no `else`, step after step. A select's pullback routes
the derivative to the branch taken and exactly zero to the other, so derivatives follow the
steps that ran, a NaN computed by a step that did not run never leaks, and the exit test (a
comparison) has derivative zero. `break if c` in the body ends the loop in the middle of a
step: the statements after it run as the branch of a dynamic `if not c`, and the flag becomes
false where `c` holds. While the flag is static, steps run or stop when the file is compiled,
as `for` and a static `if` do: a loop whose condition is static simply unrolls.
"""

from __future__ import annotations

from ...errors import ShapeError, StaticValueError, TypeMismatchError
from .. import syntax as s
from ..values import Dyn, describe, shape_of


def lower_while(lw, st: s.While, scope) -> None:
    """Run the loop `st` on `scope` (changed in place); `lw` is the lowerer (its value
    algebra `v`, `expr` and `statement`)."""
    v = lw.v
    limit = _step_limit(lw.expr(st.limit, scope), st.limit.span)
    v.budget.charge(limit, st.limit.span, "this loop")
    running = True
    for _ in range(limit):
        test = v.condition(lw.expr(st.test, scope), st.test.span)
        running = _both(v, running, test)
        if running is False:
            return
        if running is True:
            stop = _step(lw, st.body, scope)
        else:
            step = type(scope)(scope)
            stop = _step(lw, st.body, step)
            _merge(v, running, step, scope, st.span)
        running = _both(v, running, _not(v, stop))


def _step(lw, body: tuple, scope):
    """Run one step of the body on `scope`; returns the condition under which a `break if`
    ended it (False if none did). The statements after a dynamic `break if c` run as the
    branch of a dynamic `if not c`."""
    v = lw.v
    for k, st in enumerate(body):
        if not isinstance(st, s.Break):
            lw.statement(st, scope)
            continue
        test = v.condition(lw.expr(st.test, scope), st.test.span)
        if test is True:
            return True
        if test is False:
            continue
        rest = type(scope)(scope)
        later = _step(lw, body[k + 1:], rest)
        _merge(v, _not(v, test), rest, scope, st.span)
        return test if later is False else v.logic("or", test, later)
    return False


def _merge(v, cond, changed, scope, span) -> None:
    """Each name of `scope` that `changed` assigned becomes `select(cond, new, old)`.

    A name first assigned in `changed` is dropped: it is local to the step, undefined after
    the loop, as after a dynamic `if` (where the loop never ran it has no value)."""
    for name, new in changed.items():
        old = scope.get(name)
        if name not in scope or new is old:
            continue
        if shape_of(new) != shape_of(old):
            raise ShapeError(f"'{name}' has shape {shape_of(old)} before a step of the loop "
                             f"and {shape_of(new)} after it", span,
                             hint="a while loop keeps the shape of each name it assigns")
        scope[name] = v.merge(cond, new, old, name, span)


def _step_limit(value, span) -> int:
    """The `max` of a loop: a static integer >= 0."""
    if isinstance(value, Dyn) or (hasattr(value, "flat") and
                                  any(isinstance(x, Dyn) for x in value.flat)):
        raise StaticValueError("the most steps of a while loop (after `max`) must be static, "
                               "but this value depends on an input", span,
                               hint="the loop is unrolled that many times when the file is "
                                    "compiled; its condition is what stops it at run time")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeMismatchError(f"the most steps of a while loop (after `max`) must be an "
                                f"integer, got {describe(value)}", span)
    if value < 0:
        raise ShapeError(f"the most steps of a while loop cannot be negative, got {value}", span)
    return value


def _both(v, running, test):
    """`running and test` on a static bool or a `Dyn` each, folded where one is static."""
    if test is False or running is False:
        return False
    if test is True:
        return running
    if running is True:
        return test
    return v.logic("and", running, test)


def _not(v, cond):
    return v.op("not", cond) if isinstance(cond, Dyn) else not cond
