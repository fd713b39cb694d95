"""Gradients with respect to inputs read whole (an `array` node streamed by regions): the
cotangent of such a stream stays the pullback region's values, and the gradient port is
whole on them, so a gradient's graph does not grow with the data either.

The pullback of a region (loop_sweeps.region_pullback) stacks each iteration's cotangent of
the window it read; for a stream of an input read whole it returns a `WholeCt` saying where
those values lie instead of a part node per element. `gradient_port` turns an input's
`WholeCt`s, and the cotangents of its elements read one by one, into its "d:NAME" port.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .ir import Builder, Port
from .loops import body_graph
from .region import Region
from .stencils import gathered

FEW = 8  # elements read one by one that a gradient's copy loop adds by a select each
WIDE = 16  # tiles wider than this are added by a loop over a tile's elements


@dataclass(frozen=True)
class WholeCt:
    """Iteration i's cotangent of element `offset + stride * i + t` (t below `width`) of an
    input read whole is value `base + row * i + t` of region node `region` (n iterations),
    where `guard` (a node, or None) is not 0."""

    region: int
    base: int
    row: int
    width: int
    stride: int
    offset: int
    n: int
    guard: int | None = None
    first: int = 0  # the stream's elements are values first, first + 1, ... of its source

    def under(self, guard: int | None, both) -> WholeCt:
        """The same cotangent, nonzero only where `guard` holds too (`both` joins guards)."""
        if guard is None:
            return self
        return replace(self, guard=guard if self.guard is None else both(self.guard, guard))

    def listed(self, b: Builder):
        """(element, part node) for each element of each iteration's window (the element
        counted from the stream's first value), 0 where the guard does not hold."""
        zero = b.const(0.0)
        for i in range(self.n):
            for t in range(self.width):
                v = b.part(self.region, self.base + self.row * i + t)
                if self.guard is not None:
                    v = b.select(self.guard, v, zero)
                yield self.offset + self.stride * i + t, v

    def tiles(self, size: int) -> bool:
        """Whether the iterations' windows tile the input exactly, each element once, in
        order or backwards (x[n - 1 - i])."""
        return abs(self.stride) == self.width and self.n * self.width == size and \
            self.offset == (0 if self.stride > 0 else size - self.width)


def gradient_port(b: Builder, port: Port, parts: list[WholeCt], elements: dict) -> Port:
    """The gradient of an input of `port`'s shape from the `WholeCt`s of its streams and the
    cotangents of its elements read alone (`elements`: element -> node): whole on the
    pullback's values where one stream tiles the input, whole on a copy loop that adds them
    where several do, whole on a loop that gathers them where windows of one stride overlap
    (stencils.py), else element by element."""
    size = port.size
    parts = _retiled(parts, size)
    first = parts[0] if parts else None
    if first is not None and all(p.tiles(size) and (p.n, p.width) == (first.n, first.width)
                                 for p in parts) and len(elements) <= FEW:
        if len(parts) == 1 and not elements and first.guard is None and \
                first.row == first.width and first.stride > 0:
            return Port(port.shape, (), None, (first.region, first.base))
        return Port(port.shape, (), None, (_copy_loop(b, parts, elements), 0))
    if parts:  # overlapping windows of one stride: a loop gathers each element's cotangents
        gather = gathered(b, size, parts, elements, FEW)
        if gather is not None:
            return Port(port.shape, (), None, (gather, 0))
    zero = b.const(0.0)
    ids = [elements.get(k, zero) for k in range(size)]
    for p in parts:
        for k, v in p.listed(b):
            ids[k] = v if ids[k] == zero else b.add(ids[k], v)
    return Port(port.shape, tuple(ids))


def _retiled(parts: list[WholeCt], size: int) -> list[WholeCt]:
    """`parts` cut into tiles that one copy loop adds: where all lie in a row in the input's
    order, single elements; else those of one iteration over the whole (a loop's sums of an
    array it read whole) into the tiles of the part of most iterations that tiles it."""
    tiled = [p for p in parts if p.tiles(size) and p.stride > 0]
    if len(tiled) < 2:
        return parts
    if all(p in tiled and p.row == p.width for p in parts):
        # every part's values in a row: a loop over the elements, one add each (a tile's
        # width of adds in the body was 496 at GMM's d = 32, past what O3 is given)
        return [replace(p, n=size, width=1, row=1, stride=1) for p in parts]
    most = max(tiled, key=lambda p: p.n)

    def cut(p: WholeCt) -> WholeCt:
        if p is most or p.n != 1 or p.row != p.width or p.stride <= 0 or not p.tiles(size):
            return p
        return replace(p, row=most.width, width=most.width, stride=most.width, n=most.n)
    return [cut(p) for p in parts]


def _copy_loop(b: Builder, parts: list[WholeCt], elements: dict) -> int:
    """A region over the tiles whose map adds, per element, the parts' cotangents (zero where
    a part's guard does not hold) and the cotangent of an element read alone."""
    n, w = parts[0].n, parts[0].width
    guards = [p.guard for p in parts if p.guard is not None]
    if w > WIDE and not guards and not elements:
        return _tiles_loop(b, parts)
    bb = Builder()
    index = bb.input("@i", 0)
    captured = guards + list(elements.values())
    caps = [bb.input("@c", k) for k in range(len(captured))]
    streams = [[bb.input(f"@s{j}", t) for t in range(w)] for j in range(len(parts))]
    zero = bb.const(0.0)
    out = []
    for t in range(w):
        total, g = None, 0
        for j, p in enumerate(parts):
            v = streams[j][t]
            if p.guard is not None:
                v = bb.select(caps[g], v, zero)
                g += 1
            total = v if total is None else bb.add(total, v)
        for m, k in enumerate(elements):
            if k % w == t:
                here = bb.op("eq", index, bb.const(float(k // w)))
                total = bb.add(total, bb.select(here, caps[len(guards) + m], zero))
        out.append(total)
    ports = {"@i": Port((1,), (index,)), "@c": Port((len(caps),), tuple(caps))}
    for j in range(len(parts)):
        ports[f"@s{j}"] = Port((w,), tuple(streams[j]))
    body = body_graph(bb.nodes, ports, [], out)
    region = Region(n, body, len(caps), _tiles(parts), (), 0, tuple(p.base for p in parts))
    return b.region(region, captured + [p.region for p in parts])


def _tiles_loop(b: Builder, parts: list[WholeCt]) -> int:
    """The copy loop of unguarded parts of wide tiles: a loop over the tiles whose body is a
    loop over a tile's elements, one add each (written out, a tile's width of adds in the
    body; GMM's factors at d = 32: 496, past the nodes O3 is given)."""
    n, w = parts[0].n, parts[0].width
    inner = Builder()
    index = inner.input("@i", 0)
    total = None
    for j in range(len(parts)):
        v = inner.input(f"@s{j}", 0)
        total = v if total is None else inner.add(total, v)
    ports = {"@i": Port((1,), (index,)), "@c": Port((0,), ())}
    ports.update({f"@s{j}": Port((1,), (inner.input(f"@s{j}", 0),)) for j in range(len(parts))})
    add = Region(w, body_graph(inner.nodes, ports, [], [total]), 0, ((w, 1, 0),) * len(parts))
    bb = Builder()
    outer = {"@i": Port((1,), (bb.input("@i", 0),)), "@c": Port((0,), ())}
    tiles = []
    for j in range(len(parts)):
        tiles.append([bb.input(f"@s{j}", t) for t in range(w)])
        outer[f"@s{j}"] = Port((w,), tuple(tiles[j]))
    r = bb.region(add, [x for tile in tiles for x in tile])
    body = body_graph(bb.nodes, outer, [], [bb.part(r, t) for t in range(w)])
    return b.region(Region(n, body, 0, _tiles(parts), (), 0, tuple(p.base for p in parts)),
                    [p.region for p in parts])


def _tiles(parts: list[WholeCt]) -> tuple:
    """The streams of a copy loop over the tiles: tile i of the input is iteration i of a part
    that reads it in order, n - 1 - i of one that reads it backwards."""
    n, w = parts[0].n, parts[0].width
    return tuple(((n - 1) * p.row + w, p.row, 0) if p.stride > 0 else
                 ((n - 1) * p.row + w, -p.row, (n - 1) * p.row) for p in parts)
