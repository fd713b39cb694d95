"""Derivatives as expressions of a program: `grad(e, x)`, `jacobian(e, x)`, `hessian(e, x)`.

`e` is the function of the name `x` alone, as `jax.grad` treats a closure: only the occurrences
of the name `x` inside `e` vary. Lowering makes that function explicit:

1. `e` is lowered once more with `x` bound to fresh leaves: input nodes under a name no program
   can declare (`@wrt...`), so hash-consing never merges them with x's value, or with another
   name that holds an equal value (`a = sin(z); b = sin(z); grad(a * b, a)` is `sin(z)`);
2. the result is differentiated with respect to the leaves by autodiff's sweeps, graph to graph,
   inside the program's own builder;
3. the leaves are replaced by x's current value, node by node, in what the derivative needs.

What comes out is ordinary nodes, so the program's own grad, hessian, vjp and jvp, and the
symbolic export, go through it like any other expression; and the forms nest, since an inner
derivative replaces only its own leaves and leaves an outer one's in place.
"""

from __future__ import annotations

import math
from collections import ChainMap

import numpy as np

from ...errors import ArityError, ShapeError, StaticValueError, TypeMismatchError
from ...graph.autodiff import active_nodes, forward, reverse
from .. import syntax as s
from ..values import describe, is_array

DERIVATIVES = ("grad", "jacobian", "hessian")


def lower_derivative(lw, call: s.Call, scope):
    """The value of `grad(e, x)`, `jacobian(e, x)` or `hessian(e, x)`; `lw` is the lowerer
    (its value algebra `v`, builder `b`, `expr` and `lookup_value`)."""
    kind = call.func
    if len(call.args) != 2:
        raise ArityError(f"{kind}() takes 2 arguments, an expression and the name to "
                         f"differentiate by, got {len(call.args)}", call.span)
    body, var = call.args
    if not isinstance(var, s.Name):
        raise TypeMismatchError(
            f"the second argument of {kind}() must be a name, the variable it differentiates "
            "by", var.span, hint="to differentiate by a part of an array, name it first "
            "(`t = A[0]`) and write the expression in terms of that name")
    point = lw.lookup_value(var.id, scope, var.span)
    _check_point(point, kind, var)
    v, b = lw.v, lw.b
    lo = len(b.nodes)
    shape = point.shape if is_array(point) else ()
    leaves = [b.input(f"@wrt{lo}", k) for k in range(math.prod(shape))]
    try:
        value = lw.expr(body, ChainMap({var.id: _shaped(v, leaves, shape)}, scope))
    except StaticValueError as exc:
        if exc.hint is None:
            exc.hint = (f"{kind}() treats '{var.id}' as a variable: a value computed from it "
                        "cannot be a shape, an index, a bound or a const")
        raise
    if kind != "jacobian" and is_array(value):
        raise ShapeError(f"{kind}(e, x) needs a scalar e, got {describe(value)}", body.span,
                         hint="use jacobian(e, x) for an array e")
    outs = [v.node(x) for x in value.flat] if is_array(value) else [v.node(value)]
    out_shape = value.shape if is_array(value) else ()
    result_shape = {"grad": shape, "jacobian": out_shape + shape, "hessian": shape + shape}[kind]
    v.check_size(math.prod(result_shape), call.span, f"this {kind}()")
    v.budget.charge(math.prod(result_shape), call.span, f"this {kind}()")
    if kind == "hessian":  # forward over reverse, as autodiff.hessian
        ids = _jacobian(b, _jacobian(b, outs, leaves, lo, "reverse"), leaves, lo, "forward")
    else:
        ids = _jacobian(b, outs, leaves, lo, "auto")
    flat = point.flat if is_array(point) else [point]
    ids = substitute(b, dict(zip(leaves, (v.node(x) for x in flat), strict=True)), ids, lo)
    return _shaped(v, ids, result_shape)


def _check_point(point, kind: str, var: s.Name) -> None:
    """x's value must be a real or an array of reals (static or dynamic), as in JAX."""
    items = point.flat if is_array(point) else [point]
    if any(isinstance(x, bool) for x in items):
        what = "an array of conditions" if is_array(point) else "a condition"
        raise TypeMismatchError(f"{kind}() differentiates by a real or an array of reals; "
                                f"'{var.id}' is {what}", var.span)


def _shaped(v, ids: list, shape: tuple):
    """Node ids as a value: a scalar for shape (), else an array (constants become static)."""
    if not shape:
        return v.dyn(ids[0])
    out = np.empty(len(ids), dtype=object)
    for k, i in enumerate(ids):
        out[k] = v.dyn(i)
    return out.reshape(shape)


def _jacobian(b, outs: list, leaves: list, lo: int, mode: str) -> list:
    """d outs / d leaves as node ids, row-major (outputs, then leaves); nodes below `lo` do
    not depend on the leaves. "auto" takes the mode with fewer sweeps, as autodiff.jacobian."""
    one, zero = b.const(1.0), b.const(0.0)
    stop = len(b.nodes)
    active = active_nodes(b, set(leaves), lo)
    if mode == "auto":
        mode = "reverse" if len(outs) <= len(leaves) else "forward"
    if mode == "reverse":
        rows = [reverse(b, stop, active, [(o, one)], lo) for o in outs]
        return [row.get(leaf, zero) for row in rows for leaf in leaves]
    columns = [forward(b, stop, active, {leaf: one}, lo) for leaf in leaves]
    return [column.get(o, zero) for o in outs for column in columns]


def substitute(b, mapping: dict[int, int], roots: list[int], lo: int) -> list[int]:
    """`roots` with each node of `mapping` replaced by its image: every node at or above `lo`
    that a root needs and that reaches a replaced node is built again on the images (interned,
    folded and simplified by the builder, so it merges with equal nodes already there)."""
    nodes = b.nodes
    hi = len(nodes)
    need = bytearray(max(0, hi - lo))
    for r in roots:
        if r >= lo:
            need[r - lo] = 1
    for i in range(hi - 1, lo - 1, -1):  # backwards: node ids point backwards
        if need[i - lo]:
            for a in nodes[i].args:
                if a >= lo:
                    need[a - lo] = 1
    new = dict(mapping)
    for i in range(lo, hi):
        if need[i - lo] and i not in new:
            args = nodes[i].args
            if any(a in new for a in args):
                new[i] = b.op(nodes[i].op, *(new.get(a, a) for a in args))
    return [new.get(r, r) for r in roots]
