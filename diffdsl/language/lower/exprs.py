"""The lowering rule of each expression but calls (calls.py): `RULES`, keyed by syntax
class.

A rule takes the lowerer, the expression and its scope, and returns the expression's value:
a static number or bool, a `Dyn` node reference, or an array of them. Subexpressions go back
through `lw.expr`, which dispatches on `RULES`. A static condition picks its branch, so the
other is never lowered (it may not even be valid); a dynamic one becomes a select.
"""

from __future__ import annotations

from collections import ChainMap

import numpy as np

from ...errors import StaticValueError
from .. import syntax as s
from ..loop_index import Index
from ..values import Dyn
from . import padded, rows
from .indices import iterate, subscripts
from .mapped import comprehension as kept_comprehension
from .names import lookup_value
from .regions import regular_range
from .rows import elements, lazy
from .stream_reads import read
from .wholes import WholeInput, element, listed


def number(lw, e: s.Num, scope):
    return e.value


def variable(lw, e: s.Name, scope):
    return lookup_value(lw, e.id, scope, e.span)


def binary(lw, e: s.BinOp, scope):
    left = lw.whole_expr(e.left, scope)
    right = lw.whole_expr(e.right, scope)
    if lazy(left) or lazy(right):  # an input read in place: kept by rows where it can be
        done = rows.binary(lw, e.op, left, right, e.span)
        if done is not None:
            return done
        left, right = elements(lw, left), elements(lw, right)
    if e.op == "@":
        return lw.v.matmul(left, right, e.span)
    if e.op in ("//", "%"):
        return lw.v.int_op(e.op, left, right, e.span)
    return lw.v.arith(e.op, left, right, e.span)


def unary(lw, e: s.UnaryOp, scope):
    value = lw.whole_expr(e.operand, scope)
    if e.op == "+":
        return value
    if lazy(value):
        done = rows.elementwise(lw, lambda x: lw.v.negate(x, e.span), [value], e.span)
        if done is not None:
            return done
        value = elements(lw, value)
    return lw.v.negate(value, e.span)


def compare(lw, e: s.Compare, scope):
    return lw.v.compare(e.op, lw.expr(e.left, scope), lw.expr(e.right, scope), e.span)


def logic(lw, e: s.BoolOp, scope):
    left = lw.v.condition(lw.expr(e.left, scope), e.left.span)
    if not isinstance(left, Dyn):
        # Static short-circuit, as in Python: the other side may not even be valid.
        if (e.op == "and") != bool(left):
            return bool(left)
        return lw.v.condition(lw.expr(e.right, scope), e.right.span)
    right = lw.v.condition(lw.expr(e.right, scope), e.right.span)
    return lw.v.logic(e.op, left, right)


def negation(lw, e: s.Not, scope):
    value = lw.v.condition(lw.expr(e.operand, scope), e.operand.span)
    if isinstance(value, Dyn):
        return lw.v.dyn(lw.b.op("not", value.id))
    return not value


def conditional(lw, e: s.Cond, scope):
    test = lw.v.condition(lw.expr(e.test, scope), e.test.span)
    if not isinstance(test, Dyn):
        return lw.expr(e.then if test else e.orelse, scope)
    a = lw.expr(e.then, scope)
    b = lw.expr(e.orelse, scope)
    return lw.v.merge(test, a, b, None, e.span)


def array_literal(lw, e: s.ArrayLit, scope):
    return rows.stack(lw, [lw.whole_expr(x, scope) for x in e.elts], e.span)


def number_array(lw, e: s.NumberArray, scope):  # a literal the parser read in bulk
    return lw.v.stack(list(e.values), e.span)


def comprehension(lw, e: s.Comprehension, scope):
    n = regular_range(lw, e.clauses, scope)
    if n is not None:  # where the scope holds a Padded: written out up to a tail of one value
        value = padded.split(lw, e.elt, e.clauses[0], n, scope, e.span)
        if value is not None:
            return value
    if n is not None:  # long and perhaps regular: tried as a loop that stays a loop
        value = kept_comprehension(lw, e.elt, e.clauses[0], n, scope)
        if value is not None:
            return value
    items: list = []
    generate(lw, e.elt, e.clauses, 0, scope, items, e.span)
    return rows.stack(lw, items, e.span)


def index(lw, e: s.Index, scope):
    value = lw.whole_expr(e.value, scope)  # an input read in place stays whole if it can
    subs = subscripts(lw, e.subscripts, scope)
    if type(value) is np.ndarray and len(subs) <= value.ndim:
        # An element (or row) of a listed array at static integers in range, as `getitem`
        # gives it without its checks: the most common read when loops are written out.
        key = tuple([item for item, _ in subs])
        if all(type(i) is int and -d <= i < d
               for i, d in zip(key, value.shape[:len(key)], strict=True)):
            return value[key]
    elif padded.static_index(value, subs):  # the same for a vector with a tail of one value
        return padded.element(value, subs[0][0])
    if lazy(value) and subs:
        done = rows.index(lw, value, subs, e.span)
        if done is not None:
            return done
        if not isinstance(value, WholeInput):
            value = elements(lw, value)
    if any(isinstance(item, Index) for item, _ in subs):
        return read(lw, value, subs, e.span)  # in a loop kept as a loop
    if isinstance(value, WholeInput):
        one = element(lw, value, subs)
        if one is not None:
            return one
        value = listed(lw, value)
    return lw.v.getitem(value, subs, e.span)


def generate(lw, elt, clauses, k: int, scope, out: list, array=None) -> None:
    """Append the elements of a generator (its `for` and `if` clauses from the k-th on) to
    `out`; `array`: the span of a comprehension, whose length is checked against the elements
    limit as it grows."""
    if k == len(clauses):
        if array is not None:
            lw.v.check_size(len(out) + 1, array, "this comprehension")
        # a comprehension's items may be kept by rows (rows.stack), a generator's are listed
        out.append(lw.expr(elt, scope) if array is None else lw.whole_expr(elt, scope))
        return
    clause = clauses[k]
    if isinstance(clause, s.CompIf):
        test = lw.v.condition(lw.expr(clause.test, scope), clause.test.span)
        if isinstance(test, Dyn):
            raise StaticValueError(
                "a comprehension filter must be static, but this one depends on an input",
                clause.test.span, hint="use `if c then a else b` inside the element")
        if test:
            generate(lw, elt, clauses, k + 1, scope, out, array)
        return
    for item in iterate(lw, clause.iter, scope):
        generate(lw, elt, clauses, k + 1, ChainMap({clause.name: lw.bound(clause.name, item)},
                                                   scope), out, array)


RULES = {
    s.Num: number,
    s.Name: variable,
    s.BinOp: binary,
    s.UnaryOp: unary,
    s.Compare: compare,
    s.BoolOp: logic,
    s.Not: negation,
    s.Cond: conditional,
    s.ArrayLit: array_literal,
    s.NumberArray: number_array,
    s.Comprehension: comprehension,
    s.Index: index,
}
