"""Loops that stay loops (DESIGN.md, decision 9): a generator sum or a comprehension over a
long `range` whose body is regular is lowered once, as the body of a region, instead of once
per iteration.

The loop variable is bound to an `Index` (a*i + b of the region's iteration i) and the body is
lowered into a `BodyBuilder`, which gives its nodes ids of their own (above `LEVEL` times the
depth of nesting) so that values from outside the loop are told apart: an outside value used
in the body is captured, and `A[i, ...]` of an outside array at an affine index reads a stream
(the array's elements, a window of which each iteration sees). Anything else the body does
with the index (a bound, a static condition, an index the stream cannot express) makes the
loop irregular: the attempt is dropped and the loop is unrolled as before, which stays the
reference semantics (`limits.unroll` sets the trip count from which a loop is tried as a
region; a huge value unrolls every loop).
"""

from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass

import numpy as np

from ...errors import DiffDSLError
from ...graph.ir import Builder, Node, Port
from ...graph.loops import body_graph, make_region
from ...graph.ufuncs import FUNCTIONS
from .. import syntax as s
from ..builtins.common import Scalars
from ..loop_index import Index
from ..values import Dyn, is_array

LEVEL = 1 << 40  # ids of a body at nesting depth d start at d * LEVEL


class Irregular(Exception):
    """The body does something with its index that a region cannot express."""


class Unread:
    """What a name the loop assigns, static after the first iteration, holds in the body: the
    body may assign it (a temporary, the variable of an inner loop), never read it first,
    since its value would be static written out and one value for every iteration here.
    `names.lookup_value` refuses to read it, which makes the loop irregular."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class BodyBuilder:
    """The builder of a region's body, inside `parent` (the builder the region node goes to).

    It wraps a `Builder` of the body's own nodes (`inner`) with the interface lowering uses.
    Ids it hands out are the inner node ids plus `base`; an id below `base` belongs to an
    enclosing builder and is captured (a constant is copied, not captured)."""

    def __init__(self, parent, n: int, checked: tuple[int, int] | None = None):
        self.inner = Builder(parent.max_nodes)
        self.max_nodes = parent.max_nodes
        self.parent = parent
        self.base = getattr(parent, "base", 0) + LEVEL
        self.n = n
        self.captured: dict[int, int] = {}  # outer id -> inner "@c" input node
        self.streams: dict[tuple, int] = {}  # (outer ids, stride) -> stream number
        self.stream_items: list[tuple] = []
        self.strides: list[int] = []
        self.reads: list[set] = []  # offsets read, per stream
        self.in_place: dict[int, int] = {}  # stream read whole -> its inner array node
        self.fused: dict[tuple, list] = {}  # rows of comprehensions built in (mapped.py)
        self.padded_split = False  # a comprehension's tail, tried as one value (padded.py)
        self.widest: int | None = None  # see `listing`
        self.index = self._own(self.inner.input("@i", 0))
        # The values, in every iteration, of the body's nodes computed from the index alone,
        # which the loop written out folds to static numbers (see `op`); `checked`, the
        # range of the index to check them over (a scan's: its first and last iterations,
        # written out, too).
        low, high = checked or (0, n)
        self.by_index: dict[int, np.ndarray] = {
            self.index - self.base: np.arange(low, high, dtype=float)}

    def _own(self, i: int) -> int:
        return i + self.base

    def _inner(self, a: int) -> int:
        """Inner node id of handed-out id `a`, capturing an outer value on first use."""
        if a >= self.base:
            return a - self.base
        c = self.parent.value(a)
        if c is not None:
            return self.inner.const(c)
        found = self.captured.get(a)
        if found is None:
            found = self.captured[a] = self.inner.input("@c", len(self.captured))
        return found

    def const(self, value: float) -> int:
        return self._own(self.inner.const(value))

    def listing(self, size: int) -> None:
        """Called before an array of `size` elements is listed in this body (`check_size`).
        A short loop at the top of a program (`widest` set) whose body lists more than
        `widest` elements at once is written out there and then: written out, its array
        operations stay loops over their rows (rows.py), where in the body they are listed,
        element by element, and the body would be built only to be written out at its end
        (a GMM's 4 components of 10^5 points each: 27 s of lowering for a graph of 55 nodes)."""
        if self.widest is not None and size > self.widest:
            raise Irregular("an array operation too wide for a short loop's body")

    def input(self, name: str, index: int) -> int:
        raise Irregular("an input declared inside a loop")

    def value(self, i: int) -> float | None:
        if i < self.base:
            return self.parent.value(i)
        return self.inner.value(i - self.base)

    def is_const(self, i: int) -> bool:
        return self.value(i) is not None

    def op(self, name: str, *args: int) -> int:
        inner = [self._inner(a) for a in args]
        made = self.inner.op(name, *inner)
        if made not in self.by_index and self.inner.value(made) is None and \
                any(a in self.by_index for a in inner):
            self._from_index(name, inner, made)
        return self._own(made)

    def _from_index(self, name: str, inner: list, made: int) -> None:
        """Record node `made`'s value in every iteration where it is computed from the index
        alone. Written out, such a value is a static number, and the builder's identities
        (`x * 0 = 0`) or a static choice treat a NaN or an infinity there otherwise than at run
        time: a loop whose index gives one in some iteration is written out instead."""
        values = [self.by_index.get(a, self.inner.value(a)) for a in inner]
        if any(v is None for v in values):
            return
        with np.errstate(all="ignore"):
            got = np.broadcast_to(np.asarray(FUNCTIONS[name](*values), dtype=float),
                                  self.by_index[self.index - self.base].shape)
        if not np.all(np.isfinite(got)):
            raise Irregular("the index gives a number that is not finite in some iteration")
        self.by_index[made] = got

    # The builder's shorthands (`add`, `select`, ...), which call `op`: this one's.
    neg, add, sub, mul, div, pow, select = (Builder.neg, Builder.add, Builder.sub, Builder.mul,
                                            Builder.div, Builder.pow, Builder.select)

    def region(self, region, args) -> int:
        return self._own(self.inner.region(region, [self._inner(a) for a in args]))

    def part(self, region: int, k: int) -> int:
        return self._own(self.inner.part(self._inner(region), k))

    def read(self, items: tuple, stride: int, offset: int) -> int:
        """The element `offset + stride * i` of the outer elements `items` in iteration i."""
        key = (items, stride)
        j = self.streams.get(key)
        if j is None:
            j = self.streams[key] = len(self.stream_items)
            self.stream_items.append(items)
            self.strides.append(stride)
            self.reads.append(set())
        self.reads[j].add(offset)
        return self._own(self.inner.input(f"@s{j}", offset))

    def whole(self, items: WholeItems) -> int:
        """An array node of this body that is the parent's array `items` whole, for loops
        inside the body to stream (a stream of stride 0 that the body reads in place)."""
        key = (items, 0)
        j = self.streams.get(key)
        if j is None:
            j = self.streams[key] = len(self.stream_items)
            self.stream_items.append(items)
            self.strides.append(0)
            self.reads.append({0})
            self.in_place[j] = self.inner.array(f"@s{j}", items.size)
        return self._own(self.in_place[j])

    def carried(self, m: int, start: int = 0) -> list[int]:
        """Ids of a scan's state as the body reads it ("@h"), elements `start` on, `m`."""
        return [self._own(self.inner.input("@h", k)) for k in range(start, start + m)]

    def finish(self, sums: list, maps: list, combine: tuple = (), state=None) -> int:
        """The region node, built in the parent, of this body with outputs `sums` (added
        over the iterations) and `maps` (stacked); each a value of the body. A scan's `state`
        is (the parent's nodes of its initial value, the body's values of the next)."""
        sums = [self._inner(self._node(x)) for x in sums]
        maps = [self._inner(self._node(x)) for x in maps]
        nexts = None if state is None else [self._inner(self._node(x)) for x in state[1]]
        if state is None and not self.varies():
            # Nothing from outside varies: written out, the loop folds to static numbers
            # (`const c = prod([2 for i in range(65)])`), as a program may need it to.
            raise Irregular("a loop of static values")
        inner = self.inner
        nodes = list(inner.nodes)
        outer = self._captures_in_order(nodes)
        ports = {"@i": Port((1,), (self.index - self.base,)),
                 "@c": Port((len(outer),), tuple(self.captured[a] for a in outer))}
        if state is not None:
            ports["@h"] = Port((len(nexts),), tuple(inner._index[("input", (), ("@h", k))]
                                                    for k in range(len(nexts))))
        streams = []
        for j, items in enumerate(self.stream_items):
            if j in self.in_place:
                ports[f"@s{j}"] = Port((items.size,), (), None, (self.in_place[j], 0))
                streams.append((items.node, 0, 0, items.size))
                continue
            whole = type(items) is WholeItems
            low, high = min(self.reads[j]), max(self.reads[j])
            ids = []
            for k in range(high - low + 1):
                at = inner._index.get(("input", (), (f"@s{j}", low + k)))
                if at is None:  # a window element no iteration reads at that place
                    at = len(nodes)
                    nodes.append(None)
                nodes[at] = Node("input", (), (f"@s{j}", k))
                ids.append(at)
            ports[f"@s{j}"] = Port((len(ids),), tuple(ids))
            streams.append((items.node, self.strides[j], low, items.size) if whole else
                           (items, self.strides[j], low))
        body = body_graph(nodes, ports, sums, maps, nexts)
        initial = [] if state is None else list(state[0])
        region, args = make_region(self.n, body, outer, streams, combine, initial)
        self.made = region
        return self.parent.region(region, args)

    def varies(self) -> bool:
        """Whether the body reads a value from outside that varies (else, written out, the
        loop would fold to static numbers)."""
        return bool(self.captured) or any(
            type(items) is WholeItems or any(self.parent.value(a) is None for a in items)
            for items in self.stream_items)

    def _captures_in_order(self, nodes: list) -> list[int]:
        """The outer values captured, an input's elements first, in the input's order, then
        the others as first used (their "@c" input nodes in `nodes` renumbered to match): a
        loop's captures that are a run of an input's elements are copied by one memcpy, and
        elements read one by one in a body (GMM's factors at the triangle's indices) came
        in another order."""
        def key(a):
            b = self.parent
            while isinstance(b, BodyBuilder) and a < b.base:
                b = b.parent
            node = b.inner.nodes[a - b.base] if isinstance(b, BodyBuilder) else b.nodes[a]
            if node.op == "input" and not node.attr[0].startswith("@"):
                return (0, node.attr[0], node.attr[1])
            return (1, "", 0)
        outer = sorted(self.captured, key=key)  # stable: the others keep their order
        for k, a in enumerate(outer):
            nodes[self.captured[a]] = Node("input", (), ("@c", k))
        return outer

    def parent_node(self, x) -> int:
        """The parent's node of an element of an array from outside the loop."""
        if isinstance(x, Dyn):
            if x.id >= self.base:
                raise Irregular("an array made inside the loop, read at the loop's index")
            return x.id
        if isinstance(x, (bool, int, float)):
            return self.parent.const(float(x))
        raise Irregular("an element that is not a real")

    def _node(self, x) -> int:
        if isinstance(x, Dyn):
            return x.id
        if isinstance(x, (bool, int, float)):
            return self.const(float(x))
        raise Irregular("a loop's value is not a real")


def regular_range(lw, clauses, scope, reduction: str = "") -> int | None:
    """The trip count of a single `for NAME in range(...)` clause with step 1, to try as a
    loop that stays a loop: past `limits.unroll` iterations (`longest`), or a shorter one of
    `SHORTEST` iterations or more not yet written out here (kept if its body is large, see
    `lower_region`); else None."""
    if len(clauses) != 1 or not isinstance(clauses[0], s.CompFor):
        return None
    bounds = range_bounds(lw, clauses[0].iter, scope)
    if bounds is None:
        return None
    n = bounds[1] - bounds[0]
    if n > longest(lw, reduction) or (n >= SHORTEST and (id(clauses[0]), n) not in
                                        lw.written_out):
        return n
    return None


def longest(lw, reduction: str) -> int:
    """The most iterations of a loop written out whatever its body: `limits.unroll` (for a
    `min` or `max` inside a loop, an eighth of that: written out, its gradient is a chain of
    selects run in every iteration)."""
    if reduction in ("min", "max") and isinstance(lw.v.b, BodyBuilder):
        return lw.v.limits.unroll // ROUTED
    return lw.v.limits.unroll


ROUTED = 8  # k-means' nearest of k = 10 centroids, kept: 1.5 to 3 times faster a call
# A loop of `SHORTEST` to `limits.unroll` iterations stays a loop where written out it would
# be over `limits.unroll * WORK` nodes (its body large: GMM's k components of d^2 work each)
# and its items are `limits.unroll` values or fewer.
SHORTEST, WORK = 2, 64


def range_bounds(lw, it, scope) -> tuple[int, int] | None:
    """(start, stop) of `range(stop)` or `range(start, stop)` of static integers; None for
    any other iterable."""
    if not (isinstance(it, s.Call) and it.func == "range" and "range" not in lw.functions
            and len(it.args) in (1, 2)):
        return None
    try:
        bounds = [lw.expr(a, scope) for a in it.args]
    except DiffDSLError:
        return None  # reported when the loop is unrolled
    if any(type(b) is not int for b in bounds):
        return None
    return (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])


def in_body(lw, n: int, build, checked: tuple[int, int] | None = None, clause=None):
    """`build(bb)` with the lowerer building into `bb`, a new body of `n` iterations (its
    index's values checked over `checked`, see `BodyBuilder`): its result, or None where the
    body is irregular (the caller writes the loop out, and the budget is as it was; a
    `clause` so written out is not tried again for `n` iterations, see `regular_range`)."""
    parent, memo, budget_used = lw.v.b, lw.memo, lw.v.budget.used
    bb = BodyBuilder(parent, n, checked)
    lw.v.b = lw.b = bb
    lw.memo = {}  # memoised calls hold node ids of the builder they were made in
    try:
        return build(bb)
    except (Irregular, DiffDSLError, AttributeError, IndexError, TypeError, ValueError,
            KeyError):
        lw.v.budget.used = budget_used
        if clause is not None:
            lw.written_out.add((id(clause), n))
        return None
    finally:
        lw.v.b = lw.b = parent
        lw.memo = memo


def lower_region(lw, elt, clause, n: int, scope, kind: str, combine: str = "add", post=None,
                 reduction: str = ""):
    """`sum(elt for NAME in range(n))` (kind "sum"; `combine` "min" or "max" for those, and
    `post` a function of the element's value, lowered in the body) or
    `[elt for NAME in range(n)]` ("map") as a region; None when the body is irregular, or
    the loop short (`reduction` a builtin `longest` reads) and its body small (then the
    caller unrolls it)."""
    if clause.name in lw.wrt:  # differentiated by: a variable, as the loop written out says
        return None
    short = n <= longest(lw, reduction)

    def build(bb):
        if short and isinstance(bb.parent, Builder):
            bb.widest = lw.v.limits.unroll * WORK
        start = range_bounds(lw, clause.iter, scope)[0]
        value = lw.expr(elt, ChainMap({clause.name: Index.of(bb).plus(start)}, scope))
        if kind == "sum":
            if is_array(value):
                raise Irregular("a sum of arrays")
            if post is not None:
                value = post(value)
            made = ("sum", bb.finish([value], [], (combine,)))
        else:
            flat = list(value.flat) if is_array(value) else [value]
            shape = value.shape if is_array(value) else ()
            made = ("map", bb.finish([], flat), shape)
        if short and (bb.made.work <= lw.v.limits.unroll * WORK or
                      bb.made.maps > lw.v.limits.unroll):
            # Written out: a small body, or items of many elements, each a part node of
            # the region, which later array operations would read one by one
            raise Irregular("a short loop of a small body or large items")
        return made
    return in_body(lw, n, build, clause=clause if short else None)


def region_sum(lw, elt, clause, n: int, scope, combine: str = "add", post=None,
               reduction: str = ""):
    """The value of a generator sum (or min, or max) kept as a loop, or None (unroll it)."""
    done = lower_region(lw, elt, clause, n, scope, "sum", combine, post, reduction)
    if done is None:
        return None
    return lw.v.dyn(lw.b.part(done[1], 0))


def region_reduce(lw, e: s.GenCall, n: int, scope):
    """`sum`, `mean`, `min`, `max` or `logsumexp` of a generator kept as a loop, or None.
    The values are those of `builtins.reduce_items` on the loop written out: a left fold in
    iteration order; logsumexp shifts by the max rounded down (`Scalars.shift`) before `exp`."""
    clause = e.clauses[0]
    if e.func in ("sum", "mean", "min", "max"):
        combine = e.func if e.func in ("min", "max") else "add"
        total = region_sum(lw, e.elt, clause, n, scope, combine, reduction=e.func)
        if total is None or e.func != "mean":
            return total
        return lw.v.arith("/", total, n, e.span)
    if e.func != "logsumexp":
        return None
    m = region_sum(lw, e.elt, clause, n, scope, "max", reduction=e.func)
    if m is None:
        return None
    a = Scalars(lw.v, e.span)
    shift = a.shift(m)
    total = region_sum(lw, e.elt, clause, n, scope,
                       post=lambda x: a.f("exp", a.sub(x, shift)), reduction=e.func)
    if total is None:
        return None
    return a.add(shift, a.f("log", total))


@dataclass(frozen=True)
class WholeItems:
    """The items of a stream that reads an input whole: its array node and its size."""

    node: int
    size: int
