"""`for` loops that stay loops (DESIGN.md, decision 9): a long `for i in range(n)` whose body
is regular is lowered once, as the body of a scan, a region that carries the names the loop
assigns from one iteration to the next.

The first iteration is written out, in the program's own scope, as the loop written out would
run it; it shows which names the loop carries (those its body assigns, as they stand after
it) and their shapes. When each of them holds only values that vary (a static number would
fold differently written out: `s = 0` then `s * x[i]` is 0 there, a product as a loop), the
iterations from the second to the one before the last are lowered once into a
`BodyBuilder`, the carried names bound to the state the body reads, the loop variable to an
`Index` (1 + i); the last iteration is written out too, so that a gradient seeds every state
element the body reads, with no guards. Anything a region cannot express (see regions.py)
drops the attempt, and the rest of the loop is written out.
"""

from __future__ import annotations

from collections import ChainMap

import numpy as np

from .. import syntax as s
from ..loop_index import Index
from ..values import Dyn, is_array
from .regions import Irregular, Unread, in_body, range_bounds
from .rows import elements


def assigned(body) -> set[str]:
    """The names statements in `body` (and the blocks inside them) assign."""
    names: set[str] = set()
    for st in body:
        if isinstance(st, (s.Assign, s.IndexAssign, s.AugAssign)):
            names.add(st.name)
        elif isinstance(st, s.For):
            names.add(st.name)
            names |= assigned(st.body)
        elif isinstance(st, s.While):
            names |= assigned(st.body)
            if st.label is not None:  # `label.steps` and `label.converged`
                names |= {st.label, f"{st.label}.steps", f"{st.label}.converged"}
        elif isinstance(st, s.If):
            for _, block in st.branches:
                names |= assigned(block)
            names |= assigned(st.orelse or ())
    return names


def scan_range(lw, st: s.For, scope) -> range | None:
    """The values of `for NAME in range(stop)` or `range(start, stop)` past `limits.unroll`
    iterations (a loop this module may keep); None for any other loop."""
    bounds = range_bounds(lw, st.iter, scope)
    if bounds is None or bounds[1] - bounds[0] <= lw.v.limits.unroll:
        return None
    return range(*bounds)


def varying(value) -> bool:
    """Whether every element of `value` varies (a `Dyn`): a static number folds differently
    written out than as a loop's state."""
    if is_array(value):
        return value.size > 0 and all(isinstance(x, Dyn) for x in value.flat)
    return isinstance(value, Dyn)


def carried_values(lw, values: list, ids: list) -> list:
    """Values of the shapes of `values`, their elements the nodes `ids` in order: a scan's
    state as its body reads it, or as the graph after it does."""
    out, at = [], 0
    for v in values:
        size = v.size if is_array(v) else 1
        items = [lw.v.dyn(i) for i in ids[at:at + size]]
        out.append(np.array(items, dtype=object).reshape(v.shape) if is_array(v) else items[0])
        at += size
    return out


def final_state(parent, region: int) -> list[int]:
    """Part nodes of scan node `region`'s final state."""
    r = parent.nodes[region].attr
    return [parent.part(region, r.carry_value(k)) for k in range(r.carry)]


def lower_scan(lw, st: s.For, steps: range, scope, bind) -> bool:
    """Lower the loop from its second iteration to the one before its last as a scan, the
    first already run in `scope`, and write the last out; False (nothing changed) where it
    must be written out. `bind(name, value)` binds a name in `scope` as the loop statement
    does."""
    n = len(steps) - 1  # the iterations after the first: the scan's, then the last
    if n < 2 or st.name in lw.wrt:  # differentiated by: a variable, as written out
        return False
    names = sorted(name for name in assigned(st.body) - {st.name} if name in scope)
    values = [elements(lw, scope[name]) for name in names]
    written = [name for name, v in zip(names, values, strict=True) if not varying(v)]
    names = [name for name in names if name not in written]
    values = [elements(lw, scope[name]) for name in names]
    if not names or any(name in lw.wrt for name in names + written):
        return False  # a name differentiated by is tagged where bound: written out
    parent = lw.v.b
    statics = {}  # a written-only name's value: one for every iteration

    def build(bb):
        sizes = [v.size if is_array(v) else 1 for v in values]
        state = bb.carried(sum(sizes))
        inside = {st.name: Index.of(bb).plus(steps.start + 1)}
        inside.update((name, Unread(name)) for name in written)
        inside.update(zip(names, carried_values(lw, values, state), strict=True))
        body_scope = type(scope)(scope)  # a copy, as a dynamic `if` copies its scope
        body_scope.update(inside)
        lw.block(st.body, body_scope)
        nexts = []
        for name, v in zip(names, values, strict=True):
            new = body_scope[name]
            if is_array(v) != is_array(new) or (is_array(v) and v.shape != new.shape):
                raise Irregular(f"'{name}' changes shape in the loop")
            nexts += [lw.v.dyn(lw.v.node(x)) if isinstance(x, Index) else x
                      for x in (new.flat if is_array(new) else [new])]
        initial = [lw.v.node(x) for v in values for x in (v.flat if is_array(v) else [v])]
        for name in written:
            new = body_scope[name]
            if isinstance(new, Unread) or (is_array(new) and any(
                    isinstance(x, Unread) for x in new.flat)):
                raise Irregular(f"'{name}' assigned in only some iterations")
            flat = list(new.flat) if is_array(new) else [new]
            if lw.v.is_static(new) and not any(isinstance(x, Index) for x in flat):
                statics[name] = new
                continue
            # Varying from the second iteration on: state the body writes and never reads,
            # its final value the last iteration's (the initial one is never read).
            bb.carried(len(flat), start=len(nexts))
            nexts += [lw.v.dyn(lw.v.node(x)) if isinstance(x, Index) else x for x in flat]
            initial += [parent.const(0.0)] * len(flat)
            names.append(name)
            values.append(new)
        return bb.finish([], [], state=(initial, nexts))

    # the second iteration to the one before the last; its index checked over all of them
    region = in_body(lw, n - 1, build, checked=(-1, n))
    if region is None:
        return False
    for name, value in zip(names, carried_values(lw, values, final_state(parent, region)),
                           strict=True):
        bind(name, value)
    for name, value in statics.items():
        bind(name, value)
    # The last iteration written out: a gradient then seeds every state element the body
    # reads, where the scan's pullback would otherwise carry zeros for those the outputs do
    # not read, under guards (2.6 times the cost, measured on an LSTM).
    bind(st.name, steps[-1])
    lw.block(st.body, scope)
    return True


def region_product(lw, e: s.GenCall, n: int, scope):
    """`prod` of a generator of more than `limits.unroll` terms as a scan that carries the
    product from 1: the left fold of the terms written out (1 * a0 is a0: the same numbers),
    whose gradient the scan's pullback takes through the running products, right where a
    term is 0 (no division by it). None where it is written out: short, a term static in
    every iteration (a static product), an array, or a body a loop cannot hold."""
    clause = e.clauses[0]
    if n <= lw.v.limits.unroll or clause.name in lw.wrt:
        return None
    parent = lw.v.b
    one = parent.const(1.0)

    def build(bb):
        start = range_bounds(lw, clause.iter, scope)[0]
        term = lw.expr(e.elt, ChainMap({clause.name: Index.of(bb).plus(start)}, scope))
        if is_array(term) or not bb.varies():
            raise Irregular("a product of arrays or of static terms")
        if isinstance(term, Index):
            term = lw.v.dyn(lw.v.node(term))
        product = lw.v.arith("*", lw.v.dyn(bb.carried(1)[0]), term, e.span)
        return bb.finish([], [], state=([one], [product]))
    region = in_body(lw, n, build)
    return None if region is None else lw.v.dyn(final_state(parent, region)[0])
