"""Derivatives as expressions of a program: `grad(e, x)`, `jacobian(e, x)`, `hessian(e, x)`.

`x` names a binding, and the derivative follows the names (bindings.py): every value computed
from x's binding varies, everything else is a constant. Each binding of a name that a form
of the same function differentiates by was tagged as it was made (`value + ε`), so here:

1. `e` is lowered as any expression, in the scope where it stands;
2. it is differentiated with respect to the ε nodes of x's elements by autodiff's sweeps,
   graph to graph, inside the program's own builder (the sweeps start at the lowest ε: no
   node below it depends on x's binding).

What comes out is ordinary nodes, so the program's own grad, hessian, vjp and jvp, and the
symbolic export, go through it like any other expression; and the forms nest: a derivative
by x is itself computed from x's binding, and one by another name chains through x's tag.
`x` may also be an element or a slice of a named array at static indices, `grad(C, S[0])`:
the derivative by those elements of S's binding.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ArityError, ShapeError, StaticValueError, TypeMismatchError
from ...graph.autodiff import active_nodes, forward, reverse
from ...graph.ir import Builder, Graph, Node
from ...graph.loops import LEAVES, leaf
from ...graph.reach import Reach
from .. import syntax as s
from ..values import Dyn, describe, is_array
from .bindings import DERIVATIVES, base_name

__all__ = ["DERIVATIVES", "lower_derivative"]


def lower_derivative(lw, call: s.Call, scope):
    """The value of `grad(e, x)`, `jacobian(e, x)` or `hessian(e, x)`; `lw` is the lowerer
    (its value algebra `v`, builder `b`, `expr` and the ε of each tag)."""
    kind = call.func
    if len(call.args) != 2:
        raise ArityError(f"{kind}() takes 2 arguments, an expression and the name to "
                         f"differentiate by, got {len(call.args)}", call.span)
    body, var = call.args
    name = base_name(var)
    if name is None:
        raise TypeMismatchError(
            f"the second argument of {kind}() must be a name, the variable it differentiates "
            "by, or an element of one such as S[0]", var.span,
            hint="to differentiate by a value computed in place, assign it to a name first "
                 "(`t = 2 * x`) and compute `e` from that name")
    if hasattr(lw.b, "parent"):  # in the body of a loop kept as a loop: unroll it instead
        raise StaticValueError(f"{kind}() inside a loop kept as a loop", call.span)
    point = lw.expr(var, scope)
    leaves = _leaves(lw, point, kind, var, name.id)
    v, b = lw.v, lw.b
    lo = min(leaves, default=len(b.nodes))
    shape = point.shape if is_array(point) else ()
    try:
        value = lw.expr(body, scope)
    except StaticValueError as exc:
        if exc.hint is None and name.id in lw.tagged_statics:
            exc.hint = (f"{kind}() makes '{name.id}' a variable: a value computed from it "
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
    return _shaped(v, _derivative(b, kind, outs, leaves, lo), result_shape)


def _derivative(b, kind: str, outs: list, leaves: list, lo: int) -> list:
    """The derivative's node ids. The sweeps walk every node from `lo` (x's binding) on;
    where `e` needs few of them (a derivative by an input taken again and again in a long
    loop), they run on a copy of what `e` needs instead, so that each costs the size of `e`
    rather than of all that was lowered since x was bound."""
    cone, outer = _cone(b, outs, leaves, lo)
    if 2 * len(cone) > len(b.nodes) - lo:
        return _forms(b, kind, outs, leaves, lo)
    nodes, from_sub = _copy(b, outer, cone)
    sub = Builder.from_graph(Graph(tuple(nodes), {}, {}), b.max_nodes)
    to_sub = {old: k for k, old in enumerate(from_sub)}
    start = len(nodes) - len(cone)  # nothing below the cone depends on the leaves
    ids = _forms(sub, kind, [to_sub[o] for o in outs], [to_sub[i] for i in leaves], start)
    return _copy_back(b, sub, from_sub, ids)


def _forms(b, kind: str, outs: list, leaves: list, lo: int) -> list:
    if kind == "hessian":  # forward over reverse, as autodiff.hessian
        return _jacobian(b, _jacobian(b, outs, leaves, lo, "reverse"), leaves, lo, "forward")
    return _jacobian(b, outs, leaves, lo, "auto")


def _cone(b, outs: list, leaves: list, lo: int) -> tuple[list, list]:
    """The nodes at or above `lo` that `outs` need, with the leaves, in id order; and those
    below `lo` that they use (with the outputs below it), in id order."""
    nodes = b.nodes
    seen = set(leaves)
    below = {o for o in outs if o < lo}
    stack = [o for o in outs if o >= lo and o not in seen]
    seen.update(stack)
    while stack:
        for a in nodes[stack.pop()].args:
            if a < lo:
                below.add(a)
            elif a not in seen:
                seen.add(a)
                stack.append(a)
    return sorted(seen), sorted(below)


def _copy(b, below: list, cone: list) -> tuple[list, list]:
    """Nodes for a builder of their own: the nodes below `lo` that the cone uses, over their
    own arguments as opaque inputs (constants stay constants), so that the builder's rules,
    which look one node deep, see what they see in `b`; then the cone. Returns the nodes and
    the id in `b` of each."""
    nodes, from_sub, to_sub = [], [], {}
    used = set(below)
    second = {a for i in below for a in b.nodes[i].args} - used
    for i in sorted(used | second) + cone:
        node = b.nodes[i]
        if i in second:
            if node.op != "const":
                node = Node("input", (), ("@outer", i))
        elif node.args:
            node = Node(node.op, tuple(to_sub[a] for a in node.args), node.attr)
        to_sub[i] = len(nodes)
        nodes.append(node)
        from_sub.append(i)
    return nodes, from_sub


def _copy_back(b, sub, from_sub: list, ids: list) -> list:
    """`ids` of builder `sub` as nodes of `b`: the copied nodes are theirs in `b`, and what
    the sweeps made is made again in `b` (interned and simplified there)."""
    base = len(from_sub)
    nodes = sub.nodes
    need = bytearray(max(0, len(nodes) - base))
    for i in ids:
        if i >= base:
            need[i - base] = 1
    for i in range(len(nodes) - 1, base - 1, -1):
        if need[i - base]:
            for a in nodes[i].args:
                if a >= base:
                    need[a - base] = 1
    new = list(from_sub) + [-1] * (len(nodes) - base)
    for i in range(base, len(nodes)):
        if not need[i - base]:
            continue
        node = nodes[i]
        args = [new[a] for a in node.args]
        if node.op in LEAVES:  # a sweep reads an input's element (a part of an array node)
            new[i] = leaf(b, node)
        elif node.op == "region":
            new[i] = b.region(node.attr, args)
        elif node.op == "part":
            new[i] = b.part(args[0], node.attr)
        else:
            new[i] = b.op(node.op, *args)
    return [new[i] for i in ids]


def _leaves(lw, point, kind: str, var, name: str) -> list[int]:
    """The ε node of each element of x's value, row-major. x must hold reals, as in JAX, and
    each must be a binding the program made (a const or `pi` is fixed when the file is
    compiled: nothing computed from it can vary)."""
    items = list(point.flat) if is_array(point) else [point]
    if any(isinstance(x, bool) for x in items):
        what = "an array of conditions" if is_array(point) else "a condition"
        raise TypeMismatchError(f"{kind}() differentiates by a real or an array of reals; "
                                f"'{name}' is {what}", var.span)
    leaves = []
    for x in items:
        epsilon = lw.epsilon.get(x.id) if isinstance(x, Dyn) else None
        if epsilon is None:
            raise _not_a_binding(lw, kind, var, name)
        leaves.append(epsilon)
    return leaves


def _not_a_binding(lw, kind: str, var, name: str) -> TypeMismatchError:
    if name in lw.consts:
        what, hint = (f"'{name}' is a const, fixed when the file is compiled",
                      f"to differentiate by it, make it a plain assignment (`{name} = ...`) "
                      "or an input")
    elif name in ("pi", "inf"):
        what, hint = f"'{name}' is a constant", None
    else:  # an element read at an index that depends on an input, or a loop kept as a loop
        what, hint = (f"this element of '{name}' is not one the program bound",
                      "differentiate by the whole array, or by an element at a static index")
    return TypeMismatchError(f"{kind}() differentiates by a value the program binds; {what}",
                             var.span, hint=hint)


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
    reach = Reach(b, stop, active, lo)
    columns = [forward(b, stop, active, {leaf: one}, lo, reach=reach) for leaf in leaves]
    return [column.get(o, zero) for o in outs for column in columns]
