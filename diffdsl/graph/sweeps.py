"""The two sweeps every derivative is made of: reverse (cotangents) and forward (tangents),
over the nodes of a builder, with the guards that keep a select's untaken branch out
(DESIGN.md, decision 3). A region's rules are in loop_sweeps.py: its derivative is a region
whose body is the derivative of its body.
"""

from __future__ import annotations

import heapq
import sys
from functools import partial

from . import loop_sweeps, scan_sweeps
from .ir import Builder, Node
from .loops import materialize
from .ops import OPS
from .reach import Reach, read_parts
from .stencils import gathered
from .wholes import WholeCt

LEAVES = ("input", "const", "array")  # nodes without arguments: no pullback reads a guard

LOOPED = ("region", "part")
STENCIL = 8  # the widest overlapping window, in strides, whose input's gradient stays whole


def _self():
    """This module: a region's rules differentiate its body with these same sweeps."""
    return sys.modules[__name__]


def active_nodes(b: Builder, sources: set[int], start: int = 0) -> bytearray:
    """Nodes whose value depends, differentiably, on a node in `sources`; no source lies below
    `start`, so the walk begins there (a derivative inside a program, of a few new nodes at
    the end of a large builder)."""
    active = bytearray(len(b.nodes))
    nodes = b.nodes
    for i in range(start, len(nodes)):
        node = nodes[i]
        if i in sources:
            active[i] = 1
        elif node.op in LOOPED:
            active[i] = any(active[a] for a in node.args)
        elif node.args and OPS[node.op].pullback is not None:
            active[i] = any(active[a] for a in node.args)
    return active


def reverse(b: Builder, stop: int, active: bytearray, seeds: list[tuple[int, int]],
            start: int = 0, guards_out: dict | None = None,
            seed_guards: dict | None = None, wholes_out: dict | None = None) -> dict:
    """Reverse sweep over nodes in [start, stop): cotangent node of every node reached (nodes
    below `start` are not active, as for `active_nodes`).

    Beside each cotangent the sweep keeps a guard: the condition under which the node's value
    reaches a seed through the branches taken (None: always). Where a guard is false the
    cotangent is exactly 0, and the parts a pullback sends on are wrapped in
    `select(guard, part, 0)`, so a partial derivative that is infinite or NaN in the branch not
    taken never meets that 0, whatever the pattern of uses (sums, products, a value used in
    several branches, nested selects). Guards are built only below a dynamic select, min or max.

    The cotangents of an input read whole (an array node) go to `wholes_out` (array node ->
    `WholeCt`s), kept where the pullbacks' regions hold them.
    """
    ct: dict[int, int] = {}
    guard: dict[int, int | None] = {}
    for node_id, seed in seeds:
        if active[node_id]:
            # A seed may hold only where a condition does (a region's min or max: in the
            # iteration it came from); `seed_guards` says so, as a select's guard would.
            g = (seed_guards or {}).get(seed)
            first = node_id not in ct
            ct[node_id] = seed if first else b.add(ct[node_id], seed)
            guard[node_id] = g if first else _either(b, guard[node_id], g)
    reached: dict[int, dict[int, int]] = {}  # region -> {value: cotangent} of its parts
    whole_seeds: dict[int, list] = {}  # region -> `WholeCt`s of its values read whole
    part_guards: dict[int, dict] = {}  # region -> {value: the guard of its cotangent}
    # Part nodes already gathered for their region. A region's pullback that lists the values
    # of a region it streams whole (`_materialized`) makes part nodes after both regions, so
    # one taken already, for another reader, can get more: that goes to its region directly.
    taken: set[int] = set()
    # The nodes with a cotangent, latest first: a node's cotangent is complete when it is
    # taken, since only later nodes use it. Visiting these alone, not every node below `stop`,
    # keeps a sweep that reaches a few nodes (a Jacobian's row of an elementwise map) short.
    pending = [-i for i in ct if start <= i < stop]
    heapq.heapify(pending)
    while pending:
        i = -heapq.heappop(pending)
        node = b.nodes[i]
        if node.op == "part":  # gathered for its region, whose pullback takes them all
            if i in ct:
                taken.add(i)
                _gather(b, node, ct[i], guard[i], reached, part_guards, guard, pending)
            continue
        if node.op == "region":
            if i not in reached:
                continue
            node = _materialized(b, node, active, keep_arrays=not node.attr.carry)
            seeds = _whole_seeds(b, node.attr, whole_seeds.pop(i, []), reached[i],
                                 part_guards[i])
            if node.attr.carry:
                parts, shown = scan_sweeps.scan_pullback(b, i, node, reached.pop(i), active,
                                                         _self(), part_guards.pop(i))
            else:
                # The guards of its arguments' cotangents are read only by their own
                # pullbacks, or by a region around this sweep: for inputs and constants of
                # a graph that is no body they are never read, and not computed.
                wanted = guards_out is not None or any(
                    active[a] and b.nodes[a].op not in LEAVES for a in node.args)
                parts, shown = loop_sweeps.region_pullback(
                    b, i, node, reached.pop(i), active, _self(), part_guards.pop(i), wanted,
                    whole_seeds=seeds)
            routes = copies = False
        else:
            c = ct.get(i)
            if c is None:
                continue
            row = OPS[node.op]
            if row.pullback is None or not node.args:
                continue
            parts = row.pullback(b, node.args, i, c)
            routes, copies = row.routes, row.copies
            shown = None
        here = guard[i]
        for k, (a, part) in enumerate(zip(node.args, parts, strict=True)):
            if isinstance(part, WholeCt) and b.nodes[a].op == "region":  # its values, read whole
                if active[a]:
                    if a not in reached:
                        heapq.heappush(pending, -a)
                    reached.setdefault(a, {})
                    part_guards.setdefault(a, {})
                    seed = part.under(here, partial(_both, b))
                    whole_seeds.setdefault(a, []).append(seed)
                    guard[a] = seed.guard if a not in guard else _either(b, guard[a], seed.guard)
                continue
            if isinstance(part, WholeCt):  # of an input read whole: kept as it lies
                if wholes_out is None:  # a caller that takes inputs element by element
                    raise ValueError("a reverse sweep reached an input read whole")
                wholes_out.setdefault(a, []).append(part.under(here, partial(_both, b)))
                continue
            if part is None or not active[a] or b.value(part) == 0.0:
                continue
            edge = here
            if routes:  # the pullback's select says where the cotangent goes
                edge = _both(b, here, _routed_condition(b, part))
            elif here is not None and not copies:
                part = b.select(here, part, b.const(0.0))
            if shown is not None and shown[k] is not None:  # a region's guard, carried out
                edge = _both(b, edge, shown[k])
            if a in taken:
                _gather(b, b.nodes[a], part, edge, reached, part_guards, guard, pending)
            elif a not in ct:
                heapq.heappush(pending, -a)
            ct[a] = part if a not in ct else b.add(ct[a], part)
            guard[a] = edge if a not in guard else _either(b, guard[a], edge)
    if guards_out is not None:
        guards_out.update(guard)
    return ct


def _gather(b: Builder, node, c: int, g, reached: dict, part_guards: dict, guard: dict,
            pending: list) -> None:
    """Add cotangent `c` (guard `g`) of part node `node` to those its region's pullback
    takes, and queue the region."""
    r, k = node.args[0], node.attr
    if r not in reached:
        heapq.heappush(pending, -r)
    values, guards = reached.setdefault(r, {}), part_guards.setdefault(r, {})
    first = k not in values
    values[k] = c if first else b.add(values[k], c)
    guards[k] = g if first else _either(b, guards[k], g)
    guard[r] = g if r not in guard else _either(b, guard[r], g)


def _routed_condition(b: Builder, part: int) -> int | None:
    """The condition under which a routing pullback's `select(c, ct, 0)` passes `ct` on."""
    node = b.nodes[part]
    if node.op != "select":
        return None
    cond, taken, other = node.args
    if b.value(other) == 0.0:
        return cond
    if b.value(taken) == 0.0:
        return b.op("not", cond)
    return None


def _both(b: Builder, g: int | None, h: int | None) -> int | None:
    if g is None or g == h:
        return h
    if h is None:
        return g
    return b.op("and", g, h)


def _either(b: Builder, g: int | None, h: int | None) -> int | None:
    """`g or h`, seeing the common case of a value used in both branches of one select:
    `c or not c` is always, and `(g and c) or (g and not c)` is `g`."""
    if g is None or h is None or _complements(b, g, h):
        return None
    if g == h:
        return g
    left, right = b.nodes[g], b.nodes[h]
    if left.op == "and" and right.op == "and":
        for k in (0, 1):
            for m in (0, 1):
                if left.args[k] == right.args[m] and \
                        _complements(b, left.args[1 - k], right.args[1 - m]):
                    return left.args[k]
    return b.op("or", g, h)


def _complements(b: Builder, g: int, h: int) -> bool:
    """Whether one condition is `not` of the other."""
    left, right = b.nodes[g], b.nodes[h]
    return (left.op == "not" and left.args[0] == h) or (right.op == "not" and right.args[0] == g)


def forward(b: Builder, stop: int, active: bytearray, tangents: dict[int, int],
            start: int = 0, guards_out: dict | None = None,
            seed_guards: dict | None = None, wholes_out: dict | None = None,
            reach: Reach | None = None) -> dict:
    """Forward sweep over nodes in [start, stop): tangent node of every node reached.

    The mirror of `reverse`'s guards: beside each tangent, the condition under which it may be
    nonzero (None: always). A select's tangent takes the branch's tangent, so where the branch
    taken carries none the tangent is exactly 0; a partial derivative that is infinite there
    (`cbrt'(0)` of a value the select made constant) must not meet that 0 as 0 * inf = NaN,
    so each part a guarded tangent sends on is wrapped in `select(guard, part, 0)`.
    `reach`: the range's users, listed once for many sweeps; this one then visits only what
    its seeds reach.
    """
    t = dict(tangents)
    guard: dict[int, int | None] = dict.fromkeys(tangents)
    guard.update(seed_guards or {})  # a scan's carried tangent, 0 where its guard is false
    region_tangent: dict[int, int] = {}
    read = None  # the regions some of whose values a node in the sweep uses (`read_parts`)
    for i in range(start, stop) if reach is None else reach.order(tangents):
        if i in t or not active[i]:
            continue
        node = b.nodes[i]
        if node.op in LOOPED:
            if node.op == "part":
                _part_tangent(b, i, node, t, guard, region_tangent)
                continue
            if node.attr.whole:  # its streams' elements as parts, with their tangents
                node = _materialized(b, node, active)
                for a in node.args:
                    if a > i and b.nodes[a].op == "part" and a not in t:  # not yet reached
                        _part_tangent(b, a, b.nodes[a], t, guard, region_tangent)
            ts = [t.get(a) for a in node.args]
            if any(x is not None for x in ts):
                gs = [guard.get(a) if x is not None else None for a, x in zip(node.args, ts,
                                                                                strict=True)]
                ts = [x if x is None or g is None else b.select(g, x, b.const(0.0))
                      for x, g in zip(ts, gs, strict=True)]
                if node.attr.carry:
                    region_tangent[i] = scan_sweeps.scan_tangent(b, i, node, ts, _self(), gs)
                else:
                    if read is None:
                        read = read_parts(b, start, stop) if reach is None else reach.read()
                    # The guards of its values' tangents are read by the nodes that use
                    # them, or by a region around this sweep: a region whose values are
                    # only outputs (a gradient's tangent, for the Hessian) carries none.
                    region_tangent[i] = loop_sweeps.region_tangent(
                        b, i, node, ts, _self(), gs, guards_out is not None or i in read)
                guard[i] = _any_guard(b, ts, gs)
            continue
        row = OPS[node.op]
        if row.pullback is None or not node.args:
            continue
        ts = [t.get(a) for a in node.args]
        if all(x is None for x in ts):
            continue
        gs = [guard.get(a) if x is not None else None for a, x in zip(node.args, ts, strict=True)]
        if row.tangent is not None:
            result = row.tangent(b, node.args, i, ts)
            here = _routed_guard(b, result, ts, gs) if row.routes else _any_guard(b, ts, gs)
        else:
            result = None
            for k, tk in enumerate(ts):
                if tk is None:
                    continue
                part = row.pullback(b, node.args, i, tk)[k]
                if part is None or b.value(part) == 0.0:
                    continue
                if gs[k] is not None and not row.copies:
                    part = b.select(gs[k], part, b.const(0.0))
                result = part if result is None else b.add(result, part)
            here = _any_guard(b, ts, gs)
        if result is not None and b.value(result) != 0.0:
            t[i] = result
            guard[i] = here
    if guards_out is not None:
        guards_out.update(guard)
    return t


def _part_tangent(b: Builder, i: int, node, t: dict, guard: dict, region_tangent: dict):
    """The tangent of part node i, read from its region's tangent region, if it has one."""
    r = node.args[0]
    if r not in region_tangent:
        return
    rt, made = region_tangent[r]
    value_of = scan_sweeps.scan_tangent_value if made[0] == "scan" else \
        loop_sweeps.tangent_value
    found = value_of(b.nodes[r].attr, made, node.attr)
    if found is None:  # a winner of a min or max has no tangent
        return
    t[i] = b.part(rt, found[0])
    guard[i] = guard[r]
    if found[1] is not None:  # the body's guard, carried out
        shown = b.op("ne", b.part(rt, found[1]), b.const(0.0))
        guard[i] = _both(b, guard[r], shown)


def _whole_seeds(b: Builder, region, seeds: list, cts: dict, guards: dict) -> tuple:
    """Of the `WholeCt`s that give `region`'s map outputs cotangents, those its pullback
    streams as they lie (unguarded, tiling its values, or gathered by a loop where windows
    overlap: r[i], r[i + 1]); the others' are added into `cts` value by value, as parts."""
    if not seeds:
        return ()
    p, q, n = region.sums, region.maps, region.n
    kept = [] if region.carry else [w for w in seeds if w.guard is None and (
        w.first, w.offset, w.stride, w.width, w.n) == (p, 0, q, q, n)]
    rest = [w for w in seeds if w not in kept]
    gather = gathered(b, n * q, rest, {}, 0) if rest and not p and not region.carry else None
    if gather is not None:
        kept, rest = kept + [WholeCt(gather, 0, q, q, q, 0, n)], []
    for w in rest:
        for at, v in w.listed(b):
            at += w.first
            first = at not in cts
            cts[at] = v if first else b.add(cts[at], v)
            guards[at] = w.guard if first else _either(b, guards[at], w.guard)
    return tuple(kept)


def _materialized(b: Builder, node, active: bytearray, keep_arrays: bool = False):
    """Region `node` as it is, or, where a stream reads a region's values whole, the same
    region with those values as arguments: part nodes, made here and marked active as their
    region is (the sweeps take a region's arguments element by element). An input read whole
    (an array node) becomes its element nodes too, unless `keep_arrays` (a map's or a
    reduce's pullback keeps its cotangent whole: `WholeCt`), or it is not active."""
    if not node.attr.whole:
        return node
    made = []  # (region or array node, the nodes of its values read)
    region = node.attr
    # An input's stream stays whole where its windows are narrow: at most STENCIL strides
    # wide, of a stride that divides the input. Windows that tile it (each element read by one
    # iteration) are the pullback's values as they lie; windows that overlap (a stencil:
    # x[i] and x[i + 1]) are gathered (stencils.py). A wide window (X[0, j] and X[99, j], a
    # window of 9,901 elements of which 2 are read) is listed: its pullback gives the elements
    # read their parts alone.
    # An input read backwards (x[n - 1 - i]) stays whole so too (wholes.gradient_port).
    narrows = iter([(1 <= abs(s) and w <= STENCIL * abs(s) and length % abs(s) == 0, s > 0)
                    for j, ((length, s, _), w) in enumerate(zip(region.streams,
                                                                region.widths(), strict=True))
                    if region.source(j) >= 0 and not (keep_arrays and region.in_place(j))])

    def values_of(a, k, length):
        narrow, forwards = next(narrows)
        # An input that no derivative is taken by is data: read in place, never listed. So
        # are a loop's stored values (a comprehension's rows), whose cotangents a pullback
        # then leaves where they lie for the loop's own pullback (`_whole_seeds`).
        source = b.nodes[a]
        if source.op == "array" and ((narrow and keep_arrays) or not active[a]):
            return None
        if source.op == "region" and not source.attr.carry and narrow and forwards and \
                keep_arrays:
            return None
        made.append((a, [b.part(a, k + e) for e in range(length)]))
        return made[-1][1]

    # an array a body reads whole keeps it so where the pullback sums its cotangents
    region, args = materialize(region, node.args, values_of, in_place=keep_arrays)
    active.extend(bytes(len(b.nodes) - len(active)))
    for a, items in made:
        for j in items:
            active[j] |= active[a]
    return Node("region", tuple(args), region)


def _any_guard(b: Builder, ts: list, gs: list) -> int | None:
    """The guard of a sum of parts: nonzero where any part may be."""
    present = [g for x, g in zip(ts, gs, strict=True) if x is not None]
    out = present[0]
    for g in present[1:]:
        out = _either(b, out, g)
    return out


def _routed_guard(b: Builder, result: int, ts: list, gs: list) -> int | None:
    """The guard of a routing op's tangent `select(c, x, y)`: c where x may be nonzero, not c
    where y may be."""
    node = b.nodes[result]
    if node.op != "select":
        return _any_guard(b, ts, gs)
    cond, x, y = node.args

    def side(v):  # False: the branch carries no tangent
        if b.value(v) == 0.0:
            return False
        return next((g for tk, g in zip(ts, gs, strict=True) if tk == v), None)

    parts = [_both(b, c, g) for c, g in ((cond, side(x)), (b.op("not", cond), side(y)))
             if g is not False]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else _either(b, parts[0], parts[1])


