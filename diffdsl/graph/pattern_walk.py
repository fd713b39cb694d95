"""The Hessian's pattern read off a graph whose loops stay loops (sparsity.py's rules, through
regions): a loop's body is walked once, not once per iteration.

The body is walked over columns of its own, one per body input (the index, each captured
value, each element of each stream's window): what each of its outputs depends on, and the
pairs of its columns that its nonlinear ops join. Iteration i puts the outer graph's bit sets
in place of its columns: a capture's are the same in every iteration, a stream element's are
those of the argument iteration i reads. Where no stream depends on the columns (the data a
loop runs over, not what it is differentiated by), every iteration gives the same sets, and
the loop costs one walk of its body; otherwise each iteration is put in place in turn, over
bit sets, never over the body's nodes.

A scan carries its state from one iteration to the next, so its iterations differ in ways
one walk of the body does not say: a graph with one is written out first (`summarisable`).
"""

from __future__ import annotations

import numpy as np

from .ir import Graph
from .loops import split_args
from .ops import OPS

# How an op passes dependence on: "none" (no pullback: derivative zero), else its row's
# curvature (ops.py).
KIND = {name: "none" if row.pullback is None else row.curvature for name, row in OPS.items()}


FEW_BITS = 32  # set bits taken one at a time below this many (a pattern's usual set)


def bits(x: int) -> np.ndarray:
    """The positions of the set bits of `x`, in increasing order. A few are taken one at a
    time (0.5 us for one bit: unpacking costs 5 us at least, 40 over a span of 10^4 bits);
    more, only the span from the lowest to the highest set bit is unpacked: a band of a
    long row costs a few bytes."""
    if not x:
        return np.zeros(0, dtype=np.int64)
    if x.bit_count() <= FEW_BITS:
        found = []
        while x:
            low = x & -x
            found.append(low.bit_length() - 1)
            x ^= low
        return np.array(found, dtype=np.int64)
    low = (x & -x).bit_length() - 1
    x >>= low
    raw = np.frombuffer(x.to_bytes((x.bit_length() + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).astype(np.int64) + low


def differentiable_args(node):
    if node.op == "array":  # an input read in place: data, with no arguments
        return ()
    kind = KIND[node.op]
    if kind == "none":
        return ()
    return node.args[1:] if kind == "route" else node.args


def summarisable(graph: Graph) -> bool:
    """Whether every region in `graph` (and in their bodies) can be walked once: no carried
    state, every stream's elements its own arguments or an input read whole (an array node:
    one the caller did not list is data, whose elements depend on no column)."""
    for node in graph.nodes:
        if node.op == "region":
            region = node.attr
            _, streams = split_args(region, node.args)
            if region.carry or any(region.source(j) >= 0 and graph.nodes[streams[j][0]].op
                                   != "array" for j in range(len(region.streams))):
                return False
            if not summarisable(region.body):
                return False
    return True


def walk(graph: Graph, seeds: dict[int, int], tops: list[int],
         pairs: set | None, bodies: dict | None = None) -> list[int]:
    """For each node, the bit set of the columns its value depends on through derivatives
    (`seeds`: node -> its columns); with `pairs`, add the (a, b) bit sets that each nonlinear
    op whose value reaches one of `tops` joins (every column of a with every column of b).
    `bodies` keeps each region's walk of its body for this walk and those inside it (not
    for the process: a pullback's body may be large)."""
    bodies = {} if bodies is None else bodies
    nodes = graph.nodes
    deps = [0] * len(nodes)
    live = _reaching(graph, tops) if pairs is not None else None
    values: dict[int, _Loop] = {}
    for i, node in enumerate(nodes):
        if i in seeds:
            deps[i] = seeds[i]
            continue
        op = node.op
        if op == "region":
            if node.attr not in bodies:
                bodies[node.attr] = _Body(node.attr.body, bodies)
            values[i] = _Loop(node, deps, bodies[node.attr])
            if pairs is not None and live[i]:
                values[i].join(pairs)
            continue
        if op == "part":
            deps[i] = values[node.args[0]].value(node.attr)
            continue
        args = differentiable_args(node)  # none for inputs and constants
        if not args:
            continue
        acc = 0
        for a in args:
            acc |= deps[a]
        deps[i] = acc
        if pairs is None or not live[i] or not acc:
            continue
        kind = KIND[op]
        if kind in ("linear", "route"):
            continue
        if kind == "bilinear":
            a, b = deps[node.args[0]], deps[node.args[1]]
        elif kind == "quotient":
            b = deps[node.args[1]]
            a = deps[node.args[0]] | b
        else:
            a = b = acc
        if a and b:
            pairs.add((a, b))
    return deps


def _reaching(graph: Graph, tops: list[int]) -> bytearray:
    """Nodes whose value reaches a node of `tops` through derivatives: only there can a
    nonlinear op add to the Hessian (a product that only feeds a comparison adds nothing). A
    loop reached through any of its values is reached whole, with all its arguments."""
    live = bytearray(len(graph.nodes))
    for t in tops:
        live[t] = 1
    for i in range(len(graph.nodes) - 1, -1, -1):
        if not live[i]:
            continue
        node = graph.nodes[i]
        args = node.args if node.op in ("region", "part") else differentiable_args(node)
        for a in args:
            live[a] = 1
    return live


class _Body:
    """One walk of a region's body over its own columns: the columns (port, element) of its
    inputs, its outputs' bit sets, and the pairs its nonlinear ops join."""

    def __init__(self, body: Graph, bodies: dict):
        inputs = [i for i, node in enumerate(body.nodes) if node.op == "input"]
        self.columns = [body.nodes[i].attr for i in inputs]
        outs = [o for port in body.outputs.values() for o in port.ids]
        self.pairs: set = set()
        deps = walk(body, {node: 1 << k for k, node in enumerate(inputs)}, outs, self.pairs,
                    bodies)
        self.outputs = {name: [deps[o] for o in port.ids] for name, port in body.outputs.items()}


class _Loop:
    """A region node seen from the graph that holds it: its values' bit sets and the pairs
    of columns its iterations join, from one walk of its body."""

    def __init__(self, node, deps: list[int], body: _Body):
        region = node.attr
        self.region, self.body = region, body
        self.captured = [deps[a] for a in node.args[:region.captures]]
        self.streams, at = [], region.captures
        for j in range(len(region.streams)):
            self.streams.append([deps[a] for a in node.args[at:at + region.taken(j)]])
            at += region.taken(j)
        # Per stream, whether any element depends on a column (asked for each body bit set:
        # a stream of data, 160,000 elements of k-means' points, is read once here).
        self.live = [any(s) for s in self.streams]
        self.varies = any(self.live)
        self._sums: dict[int, int] = {}
        self._split: dict[int, tuple] = {}

    def outer(self, local: int, i: int) -> int:
        """The outer columns of a body bit set in iteration i."""
        if local not in self._split:
            self._split[local] = self._parts(local)
        acc, windows = self._split[local]
        for j, stride, at in windows:
            acc |= self.streams[j][at + stride * i]
        return acc

    def _parts(self, local: int) -> tuple[int, list]:
        """A body bit set as the outer columns of its captures, the same in every iteration,
        and (stream, stride, element read in iteration 0) for each stream element in it."""
        fixed, windows = 0, []
        for k in bits(local).tolist():
            name, e = self.body.columns[k]
            if name == "@c":
                fixed |= self.captured[e]
            elif name.startswith("@s"):
                j = int(name[2:])
                _, stride, offset = self.region.streams[j]
                if self.live[j]:
                    windows.append((j, stride, offset + e))
        return fixed, windows

    def _iterations(self) -> range:
        return range(self.region.n) if self.varies else range(1)

    def value(self, v: int) -> int:
        """The bit set of the region's value v: a sum's over every iteration, an
        iteration's map output's; a winner (an iteration's number) depends on nothing."""
        region = self.region
        if v < region.sums:
            if v not in self._sums:
                local, acc = self.body.outputs["@sum"][v], 0
                for i in self._iterations():
                    acc |= self.outer(local, i)
                self._sums[v] = acc
            return self._sums[v]
        v -= region.sums
        if v < region.n * region.maps:
            i, m = divmod(v, region.maps)
            return self.outer(self.body.outputs["@map"][m], i)
        return 0

    def join(self, pairs: set) -> None:
        """Add the pairs of outer columns that the body's nonlinear ops join, over every
        iteration."""
        for a, b in self.body.pairs:
            for i in self._iterations():
                outer_a, outer_b = self.outer(a, i), self.outer(b, i)
                if outer_a and outer_b:
                    pairs.add((outer_a, outer_b))
