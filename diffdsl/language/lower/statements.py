"""The lowering rule of each statement: `RULES` for statements in any block, `TOP_LEVEL` for
the declarations that stand only at the top of the file. Both are keyed by syntax class.

A rule takes the lowerer, the statement and the scope, which it changes in place: names are
bound to values (static numbers, `Dyn` node references, arrays of them); inputs, consts and
outputs are recorded on the lowerer. Loops unroll, a static `if` runs its branch, and a name
assigned in both branches of a dynamic `if` becomes a select.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import AssignmentError, ShapeError, StaticValueError
from ...graph.ir import Port
from .. import syntax as s
from ..values import Dyn, is_array
from . import padded, rows
from .indices import iterate, need_static_int, range_length, subscripts
from .names import lookup_value
from .rows import elements
from .scans import lower_scan, scan_range
from .while_loop import lower_while
from .wholes import WholeInput

# Declarations ---------------------------------------------------------------------------------


def declare_input(lw, st: s.InputDecl, scope: dict) -> None:
    _not_taken(lw, st.name, st.span)
    if st.name in scope:
        raise AssignmentError(f"'{st.name}' is already a local name", st.span)
    dims = []
    for d in st.dims:
        value = lw.expr(d, scope)
        need_static_int(lw.v, value, d.span, "a dimension of an input")
        if value < 1:
            raise ShapeError(f"input dimensions must be at least 1, got {value}", d.span)
        dims.append(value)
    shape = tuple(dims)
    size = math.prod(shape)
    lw.v.check_rank(len(shape), st.span, f"input '{st.name}'")
    if size > lw.v.limits.unroll and st.name not in lw.wrt:
        # Read in place by loops: one node, its elements made only where they are needed.
        node = lw.b.array(st.name, size)
        lw.inputs[st.name] = Port(shape, (), st.span, (node, 0))
        lw.input_values[st.name] = WholeInput(st.name, shape, node, st.span)
        return
    lw.v.check_size(size, st.span, f"input '{st.name}'")
    ids = tuple(lw.b.input(st.name, k) for k in range(size))
    lw.inputs[st.name] = Port(shape, ids, st.span)
    if shape:
        arr = np.empty(size, dtype=object)
        for k, i in enumerate(ids):
            arr[k] = lw.v.dyn(i)
        value = arr.reshape(shape)
    else:
        value = lw.v.dyn(ids[0])
    lw.input_values[st.name] = lw.bound(st.name, value)  # the ports keep the input's nodes


def declare_const(lw, st: s.ConstDecl, scope: dict) -> None:
    _not_taken(lw, st.name, st.span)
    if st.name in scope:
        raise AssignmentError(f"'{st.name}' is already a local name", st.span)
    value = lw.expr(st.value, scope)
    if not lw.v.is_static(value):
        raise StaticValueError(
            f"const '{st.name}' must be static, but its value depends on an input",
            st.value.span, hint="use a plain assignment `name = ...` for dynamic values")
    lw.consts[st.name] = value


def declare_output(lw, st: s.Output, scope: dict) -> None:
    if st.name is not None:
        name = st.name
    elif isinstance(st.value, s.Name):
        name = st.value.id
    else:
        name = "out"
    if name in lw.outputs:
        raise AssignmentError(f"output '{name}' is declared twice", st.span)
    value = lw.whole_expr(st.value, scope)
    port = rows.output(lw, value, st.span)  # an array over the data: one loop, not listed
    if port is not None:
        lw.outputs[name] = port
        return
    value = elements(lw, value)
    if is_array(value):
        shape = value.shape
        ids = tuple(lw.v.node(x, st.value.span) for x in value.flat)
    else:
        shape = ()
        ids = (lw.v.node(value, st.value.span),)
    lw.outputs[name] = Port(tuple(shape), ids, st.span)


def hoisted_def(lw, st: s.Def, scope: dict) -> None:
    """Nothing to do where a def stands: the program's defs were collected before its first
    statement, so that one may be called above its line."""


def top_level_return(lw, st: s.Return, scope: dict) -> None:
    raise AssignmentError("`return` is allowed only at the end of a def", st.span)


def _not_taken(lw, name: str, span) -> None:
    if name in lw.inputs or name in lw.consts:
        kind = "an input" if name in lw.inputs else "a const"
        raise AssignmentError(f"'{name}' is already declared as {kind}", span)


# Statements -----------------------------------------------------------------------------------


def assign(lw, st: s.Assign, scope: dict) -> None:
    value = lw.whole_expr(st.value, scope)  # a vector with a tail of one value stays one
    _bind(lw, st.name, value if isinstance(value, padded.Padded) else elements(lw, value),
          scope, st.span)


def whole_assign(lw, st: s.Assign, scope: dict) -> None:
    """An assignment of the program's top level, outside every block: a value kept whole
    (an input read in place, an array expression kept by rows) is bound as it is, its
    elements listed only where a later use needs them."""
    if st.name in lw.wrt:  # bound to a tag of each element (bindings.py)
        assign(lw, st, scope)
        return
    _bind(lw, st.name, lw.whole_expr(st.value, scope), scope, st.span)


def index_assign(lw, st: s.IndexAssign, scope: dict) -> None:
    new = lw.expr(st.value, scope)
    old = lookup_value(lw, st.name, scope, st.span, whole=True)
    index = subscripts(lw, st.subscripts, scope)
    _bind(lw, st.name, _setitem(lw, old, index, new, st.span), scope, st.span)


def aug_assign(lw, st: s.AugAssign, scope: dict) -> None:
    old = lookup_value(lw, st.name, scope, st.span, whole=True)
    rhs = lw.whole_expr(st.value, scope)
    if st.subscripts is None:
        kept = padded.elementwise(lw, lambda a, b: lw.v.arith(st.op, a, b, st.span),
                                  [old, rhs], st.span) if isinstance(old, padded.Padded) else None
        _bind(lw, st.name, kept if kept is not None else lw.v.arith(
            st.op, elements(lw, old), elements(lw, rhs), st.span), scope, st.span)
        return
    rhs = elements(lw, rhs)
    index = subscripts(lw, st.subscripts, scope)
    current = padded.element(old, index[0][0]) if padded.static_index(old, index) else \
        lw.v.getitem(elements(lw, old), index, st.span)
    new = lw.v.arith(st.op, current, rhs, st.span)
    _bind(lw, st.name, _setitem(lw, old, index, new, st.span), scope, st.span)


def _setitem(lw, old, index: list, new, span):
    """`old` with `old[index] = new`: a vector with a tail of one value keeps it where the
    index is one static integer in range (`y[0] = x0` after `y = zeros(n)`)."""
    if padded.static_index(old, index) and not is_array(new):
        return padded.setitem(old, index[0][0], new)
    return lw.v.setitem(elements(lw, old), index, new, span)


def for_statement(lw, st: s.For, scope: dict) -> None:
    steps = scan_range(lw, st, scope)
    if steps is None:
        items = iterate(lw, st.iter, scope)
    else:  # a long loop: after its first iteration, the rest may stay a loop (scans.py)
        # Its steps count as the loop written out would: a loop of 10**9 steps is refused
        # either way (it would run as long, on every evaluation).
        lw.v.budget.charge(range_length(steps), st.iter.span, "this loop")
        _bind(lw, st.name, steps[0], scope, st.span)
        lw.block(st.body, scope)
        if lower_scan(lw, st, steps, scope, lambda name, v: _bind(lw, name, v, scope, st.span)):
            return
        items = steps[1:]
    for item in items:
        _bind(lw, st.name, item, scope, st.span)
        lw.block(st.body, scope)


def if_statement(lw, st: s.If, scope: dict) -> None:
    _branches(lw, list(st.branches), st.orelse, scope)


def while_statement(lw, st: s.While, scope: dict) -> None:
    lower_while(lw, st, scope)


def misplaced_return(lw, st: s.Return, scope: dict) -> None:
    raise AssignmentError("`return` must be the last statement of a def", st.span)


def _bind(lw, name: str, value, scope: dict, span) -> None:
    _not_taken(lw, name, span)
    if name in lw.wrt:  # a derivative's variable: tagged element by element (bindings.py)
        value = elements(lw, value)
    scope[name] = lw.bound(name, value)


def _branches(lw, branches: list, orelse, scope: dict) -> None:
    """`if`/`elif`/`else`: a static test runs one branch; for a dynamic one both run, on
    copies of the scope, and each name bound in both becomes a select of the two values."""
    if not branches:
        if orelse:
            lw.block(orelse, scope)
        return
    test_node, body = branches[0]
    test = lw.v.condition(lw.expr(test_node, scope), test_node.span)
    if not isinstance(test, Dyn):
        if test:
            lw.block(body, scope)
        else:
            _branches(lw, branches[1:], orelse, scope)
        return
    then_scope = type(scope)(scope)
    lw.block(body, then_scope)
    else_scope = type(scope)(scope)
    _branches(lw, branches[1:], orelse, else_scope)
    lw.note_one_branch(then_scope, else_scope, scope, test_node.span)
    for name in list(then_scope):
        if name not in else_scope:
            continue  # first defined in only some branches: undefined after the if
        a, b = then_scope[name], else_scope[name]
        if a is not b:  # a value kept whole before the `if`, assigned in a branch
            a, b = elements(lw, a), elements(lw, b)
        if a is b:
            scope[name] = a
            continue
        scope[name] = lw.bound(name, lw.v.merge(test, a, b, name, test_node.span))


TOP_LEVEL = {
    s.InputDecl: declare_input,
    s.ConstDecl: declare_const,
    s.Def: hoisted_def,
    s.Output: declare_output,
    s.Return: top_level_return,
}

RULES = {
    s.Assign: assign,
    s.IndexAssign: index_assign,
    s.AugAssign: aug_assign,
    s.For: for_statement,
    s.If: if_statement,
    s.While: while_statement,
    s.Return: misplaced_return,
}
