"""Calls while lowering: of a `def` (inlined, memoised), a builtin, a derivative form, or a
reduction of a generator. `RULES` holds the rules of `Call` and `GenCall`, keyed by syntax
class.

A `def` is pure, so a call seen before (same def, same node ids and static values passed in)
returns its earlier result without being expanded again; this is what turns the n! expansion
of the determinant by minors into about n·2ⁿ steps (DESIGN.md, decision 1).
"""

from __future__ import annotations

import numpy as np

from ...errors import ArityError, RecursionLimitError, TypeMismatchError, UnknownNameError
from .. import syntax as s
from ..builtins.table import BUILTINS, ELEMENTWISE, GENERATOR_BUILTINS, reduce_items
from ..values import memo_key
from . import padded, rows
from .axes import keyword_call
from .derivatives import DERIVATIVES, lower_derivative
from .exprs import generate
from .names import ABSENT, FunctionScope, local, suggest_function
from .regions import region_reduce, regular_range
from .rows import elements, lazy
from .scans import region_product
from .statements import whole_assign

RECURSION_LIMIT = 1000


def call(lw, e: s.Call, scope):
    if s.Keyword in map(type, e.args):  # not any(isinstance(...)): a generator per call
        return keyword_call(lw, e, scope)
    if e.func in lw.functions:  # arguments kept whole: the def's body may keep them so
        args = [lw.whole_expr(a, scope) for a in e.args]
        return lw.call(lw.functions[e.func], args, e)
    if local(scope, e.func) is not ABSENT or e.func in lw.consts:
        raise TypeMismatchError(f"'{e.func}' is a value, not a function", e.func_span)
    if e.func in DERIVATIVES:
        return lower_derivative(lw, e, scope)
    builtin = BUILTINS.get(e.func)
    if e.func == "range":
        raise TypeMismatchError("range(...) gives the values of a loop; use it after `in` in "
                                "a for loop or a comprehension", e.func_span)
    if builtin is None:
        raise UnknownNameError(f"unknown function '{e.func}'", e.func_span,
                               hint=suggest_function(lw, e.func))
    if e.func in REDUCERS and len(e.args) == 1 and isinstance(e.args[0], s.Comprehension):
        done = _reduced_comprehension(lw, e, scope)
        if done is not None:
            return done
    if e.func not in KEPT:
        args = [lw.expr(a, scope) for a in e.args]
        if e.func in FILLED and len(args) == 1 and type(args[0]) is int:
            done = padded.filled(lw, args[0], FILLED[e.func], e.span)
            if done is not None:  # a long vector: one value, until the program fills it in
                return done
        return builtin(lw.v, args, e)
    # an input read in place, or an array expression over one, stays whole where it can
    args = [lw.whole_expr(a, scope) for a in e.args]
    if any(lazy(a) for a in args):
        done = _kept(lw, e, builtin, args)
        if done is not None:
            return done
        args = [elements(lw, a) for a in args]
    return builtin(lw.v, args, e)


# Reductions of a comprehension kept as their generator's loop; not logsumexp, whose loop
# form lowers the item twice (for the max, then the shifted sum): GMM's at k = 100, each
# item d² work, ran 1.5 to 2.3 times as long so.
REDUCERS = ("sum", "mean", "min", "max")


def _reduced_comprehension(lw, e: s.Call, scope):
    """`min([f(j) for j in range(k)])` of scalars: the same left fold as the generator
    `min(f(j) for j in range(k))`, so it is kept as that loop (a min-combined reduce, whose
    pullback goes to the winning iteration) rather than as a map whose k values are folded
    node by node. None where the loop is short or its items are arrays (the list is made)."""
    comp = e.args[0]
    n = regular_range(lw, comp.clauses, scope, e.func)
    if n is None:
        return None
    as_generator = s.GenCall(e.func, comp.elt, comp.clauses, e.span, e.func_span)
    return region_reduce(lw, as_generator, n, scope)


FILLED = {"zeros": 0.0, "ones": 1.0}
SHAPES = ("len", "rows", "cols", "size")  # builtins that read an array's shape alone
KEPT = set(SHAPES) | set(ELEMENTWISE) | {"sum", "mean", "min", "max", "logsumexp", "softmax"}


def _kept(lw, e: s.Call, builtin, args: list):
    """A builtin of lazy arguments kept lazy (rows.py): its shape alone, an elementwise
    builtin by rows, a reduction as a loop; None where it is not (the caller lists them)."""
    if e.func in SHAPES and len(args) == 1:  # its shape alone: its elements are not listed
        return builtin(lw.v, [np.broadcast_to(np.empty((), dtype=object), args[0].shape)], e)
    if e.func in ELEMENTWISE or (e.func in ("min", "max") and len(args) > 1):
        return rows.elementwise(lw, lambda *xs: builtin(lw.v, list(xs), e), args, e.span)
    if e.func == "softmax" and len(args) == 1:
        return rows.softmax(lw, args[0], e.span)
    if len(args) == 1:
        return rows.reduce(lw, e.func, args[0], e.span)
    return None


def generator_call(lw, e: s.GenCall, scope):
    if e.func in lw.functions:
        raise TypeMismatchError(f"'{e.func}' is a def; a generator argument works only with "
                                f"{', '.join(GENERATOR_BUILTINS)}", e.func_span)
    if e.func not in GENERATOR_BUILTINS:
        raise TypeMismatchError(f"'{e.func}' does not take a generator; only "
                                f"{', '.join(GENERATOR_BUILTINS[:-1])} and "
                                f"{GENERATOR_BUILTINS[-1]} do", e.func_span)
    if e.func in ("sum", "mean", "min", "max", "logsumexp", "prod"):
        n = regular_range(lw, e.clauses, scope, e.func)
        if n is not None:  # long and perhaps regular: tried as a loop that stays a loop
            total = region_product(lw, e, n, scope) if e.func == "prod" else \
                region_reduce(lw, e, n, scope)
            if total is not None:
                return total
    items: list = []
    generate(lw, e.elt, e.clauses, 0, scope, items)
    return reduce_items(lw.v, e.func, items, e.span)


def call_def(lw, fn: s.Def, args: list, e: s.Call):
    """The value of `fn(*args)`: its body lowered in a scope of its own, or the value of an
    earlier call with equal arguments."""
    if len(args) != len(fn.params):
        raise ArityError(
            f"{fn.name}() takes {len(fn.params)} argument{'s' * (len(fn.params) != 1)}, "
            f"got {len(args)}", e.span)
    key = (fn.name, tuple(memo_key(a) for a in args))
    found = lw.memo.get(key)
    if found is not None:
        return found
    lw.v.budget.charge(1, e.span, f"this call of '{fn.name}'")
    if lw.depth >= RECURSION_LIMIT:
        raise RecursionLimitError(
            f"recursion of '{fn.name}' is deeper than {RECURSION_LIMIT} calls", e.span,
            hint="recursion must end on static conditions such as shapes or const values; "
                 "a condition that depends on an input never stops it")
    lw.depth += 1
    try:
        local = FunctionScope((p, lw.bound(p, elements(lw, a) if p in lw.wrt else a))
                              for p, a in zip(fn.params, args, strict=True))
        for st in fn.body:
            if isinstance(st, s.Return):
                result = lw.whole_expr(st.value, local)
                break
            lw.statement(st, local, whole_assign if type(st) is s.Assign else None)
        else:
            result = lw.whole_expr(fn.result, local)
    finally:
        lw.depth -= 1
    lw.memo[key] = result
    return result


RULES = {
    s.Call: call,
    s.GenCall: generator_call,
}
