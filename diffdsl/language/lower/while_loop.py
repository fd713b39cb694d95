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

`while c max N as label { ... }` names the loop, and after it `label.steps` is the number of
steps that ran (the body started) and `label.converged` whether the loop stopped on its own,
its condition false or a `break if` taken, rather than at `max` with `c` still true (tested
once more after the last step, so a loop that reaches its goal at step N has converged). They
are values in the scope under names no program can write (`label.steps`), so they follow the
scoping of names, through branches and loops. Both are piecewise constant: `steps` is built
from selects between static counts and `converged` is a condition, so their derivatives are
exactly zero.
"""

from __future__ import annotations

import difflib

from ...errors import (
    DiffDSLError,
    ShapeError,
    Span,
    StaticValueError,
    TypeMismatchError,
    UnknownNameError,
)
from .. import syntax as s
from ..values import Dyn, describe, is_array, shape_of
from .regions import Irregular, in_body
from .rows import elements
from .scans import assigned, carried_values, final_state, varying

ATTRIBUTES = ("steps", "converged")


def lower_while(lw, st: s.While, scope) -> None:
    """Run the loop `st` on `scope` (changed in place); `lw` is the lowerer (its value
    algebra `v`, `expr` and `statement`)."""
    v = lw.v
    limit = _step_limit(lw.expr(st.limit, scope), st.limit.span)
    v.budget.charge(limit, st.limit.span, "this loop")
    running = True
    steps = 0
    for k in range(limit):
        if k == 1 and isinstance(running, Dyn) and limit - 1 > v.limits.unroll:
            kept = _as_scan(lw, st, scope, limit - 1, running, steps)
            if kept is not None:  # the steps after the first, one loop
                running, steps = kept
                test = None
                break
        test = v.condition(lw.expr(st.test, scope), st.test.span)
        running = _both(v, running, test)
        if running is False:
            break
        steps = _count(v, running, steps, st.span)
        if running is True:
            stop = _step(lw, st.body, scope)
        else:
            step = type(scope)(scope)
            stop = _step(lw, st.body, step)
            _merge(lw, running, step, scope, st.span)
        running = _both(v, running, _not(v, stop))
    else:  # `max` steps ran: still running only if the condition holds after the last one
        test = None
    if test is None and st.label is not None and running is not False:
        running = _both(v, running, v.condition(lw.expr(st.test, scope), st.test.span))
    if st.label is not None:
        scope[f"{st.label}.steps"] = steps
        scope[f"{st.label}.converged"] = _not(v, running)


def _as_scan(lw, st: s.While, scope, n: int, running, steps):
    """The `n` steps after the first as a scan (scans.py), which carries the names the body
    assigns, the running flag and, for a named loop, the count of steps: each step is the
    guarded step above, lowered once. The new (running, steps), the names rebound in
    `scope`; None (nothing changed) where the loop must be written out: a name it carries
    still static after the first step, a body a loop cannot hold (regions.py)."""
    v = lw.v
    names = sorted(name for name in assigned(st.body) if name in scope)
    if any(name in lw.wrt for name in names):
        return None  # differentiated by: tagged where bound, as written out
    values = [elements(lw, scope[name]) for name in names]
    counted = st.label is not None
    flags = [running] + ([steps] if counted else [])
    if not all(varying(x) for x in values + flags):
        return None
    initial = [v.node(x) for x in values for x in (x.flat if is_array(x) else [x])]
    initial += [v.node(x) for x in flags]

    def build(bb):
        state = bb.carried(len(initial))
        body_scope = type(scope)(scope)  # a copy, as a dynamic `if` copies its scope
        body_scope.update(zip(names, carried_values(lw, values, state), strict=True))
        at = len(state) - len(flags)
        now = _both(v, v.dyn(state[at]), v.condition(lw.expr(st.test, body_scope),
                                                      st.test.span))
        count = v.dyn(state[at + 1]) if counted else None
        if now is False:
            raise Irregular("a loop whose steps after the first never run")
        if counted:
            count = _count(v, now, count, st.span)
        step = type(body_scope)(body_scope)
        stop = _step(lw, st.body, step)
        _merge(lw, now, step, body_scope, st.span)
        now = _both(v, now, _not(v, stop))
        nexts = [x for name in names for x in flat(elements(lw, body_scope[name]))]
        nexts += [now] + ([count] if counted else [])
        nexts = [float(x) if isinstance(x, bool) else x for x in nexts]
        if len(nexts) != len(initial):
            raise Irregular("a name changes shape in the loop")
        return bb.finish([], [], state=(initial, nexts))

    parent = v.b
    region = in_body(lw, n, build)
    if region is None:
        return None
    final = final_state(parent, region)
    for name, value in zip(names, carried_values(lw, values, final), strict=True):
        scope[name] = lw.bound(name, value)
    at = len(final) - len(flags)
    running = v.dyn(final[at])
    return running, (v.dyn(final[at + 1]) if counted else steps)


def flat(value) -> list:
    return list(value.flat) if is_array(value) else [value]


def loop_value_error(lw, name: str, scope, span) -> DiffDSLError:
    """The error for `label.attr` (one token, `name`) not in scope: a misspelt attribute, a
    label that is a value, or no loop of that name here."""
    label, attr = name.split(".", 1)
    at_label = Span(span.filename, span.line, span.column, span.line,
                    span.column + len(label), span.source)
    if attr not in ATTRIBUTES:
        close = difflib.get_close_matches(attr, ATTRIBUTES, n=1)
        at_attr = Span(span.filename, span.line, span.column + len(label) + 1, span.end_line,
                       span.end_column, span.source)
        return UnknownNameError(
            f"a while loop has no '{attr}'", at_attr,
            hint=f"did you mean '{label}.{close[0]}'?" if close else
            f"a named loop has {label}.steps and {label}.converged")
    if label in scope or label in lw.consts or label in lw.input_values:
        return TypeMismatchError(f"'{label}' is a value, not a named while loop", at_label,
                                 hint=f"name a loop `while c max N as {label} {{ ... }}` to "
                                      f"read {name}")
    return UnknownNameError(f"unknown while loop '{label}'", at_label,
                            hint=lw.one_branch.get(name) or
                            f"name a loop `while c max N as {label} {{ ... }}` above this line")


def _count(v, running, steps, span):
    """`steps + 1` where the step runs: a select between static counts (derivative zero)."""
    more = v.scalar_arith("+", steps, 1, span)
    return more if running is True else v.merge(running, more, steps, None, span)


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
        _merge(lw, _not(v, test), rest, scope, st.span)
        return test if later is False else v.logic("or", test, later)
    return False


def _merge(lw, cond, changed, scope, span) -> None:
    """Each name of `scope` that `changed` assigned becomes `select(cond, new, old)`, a new
    binding of the name (bindings.py).

    A name first assigned in `changed` is dropped: it is local to the step, undefined after
    the loop, as after a dynamic `if` (where the loop never ran it has no value)."""
    v = lw.v
    for name, new in changed.items():
        if name not in scope:  # for the error where it is used (names.py)
            lw.one_branch[name] = (f"'{name}' is assigned only inside the `while` loop at line "
                                   f"{span.line}, which may run no step: assign it before the "
                                   "loop")
            continue
        old = scope.get(name)
        if new is old:
            continue
        old, new = elements(lw, old), elements(lw, new)  # a value kept whole: its elements
        if shape_of(new) != shape_of(old):
            raise ShapeError(f"'{name}' has shape {shape_of(old)} before a step of the loop "
                             f"and {shape_of(new)} after it", span,
                             hint="a while loop keeps the shape of each name it assigns")
        scope[name] = lw.bound(name, v.merge(cond, new, old, name, span))


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
