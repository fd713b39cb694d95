"""Comprehensions kept as loops whose values are not listed.

`r = [f(x[i]) for i in range(n)]` at the top of a program (or in a def called there), kept as
a loop (regions.py), is a `Mapped`: the map region's node, its rows not yet part nodes. A
later loop kept as a loop that reads `r[i + c]` computes that row where it reads it: the
comprehension's body is built into the reader's body (fused, as XLA fuses an elementwise
producer into its consumer), its streams read at the reader's index. So `sum(r ** 2)`, `r - y`
or `[r[i + 1] - r[i] for i in range(n - 1)]` is a graph the size of the program's text, where
listing r made n part nodes and a node per element of each operation on them. Any other use
lists the region's values as part nodes, as a comprehension was before: the values are the
same, since a fused row is the same operations on the same elements.
"""

from __future__ import annotations

import math

import numpy as np

from ...graph.ir import Builder
from ...graph.loops import inline, split_args
from ..loop_index import Index
from .regions import BodyBuilder, Irregular, WholeItems, lower_region
from .wholes import Shaped, root_builder

# The most nodes of a comprehension's body built into a reader's body. A fused body runs once
# per read: twice under logsumexp (its max, then its shifted sum), once per offset read
# (`r[i]` and `r[i + 1]`). A larger body's rows are listed and computed once, and a chain of
# comprehensions each reading the last (an integrator's stages) stops growing its readers.
FUSED = 256


class Mapped(Shaped):
    """The array of shape `shape` (n rows) of map region `node`, built in the program's own
    builder; `elements`: its values as part nodes, once a use needed them."""

    __slots__ = ("shape", "node", "span", "elements")

    def __init__(self, shape: tuple, node: int, span):
        self.shape, self.node, self.span = tuple(shape), node, span
        self.elements = None


def comprehension(lw, elt, clause, n: int, scope):
    """The value of `[elt for NAME in range(...)]` (n iterations) kept as a loop: a `Mapped`
    at the program's top level over more than `limits.unroll` rows, else its values listed;
    None where the body is irregular (the caller writes the loop out)."""
    done = lower_region(lw, elt, clause, n, scope, "map")
    if done is None:
        return None
    _, node, shape = done
    value = Mapped((n, *shape), node, clause.span)
    if isinstance(lw.v.b, Builder) and n > lw.v.limits.unroll:
        return value
    return _parts(lw, value, lw.b, range(n))


def listed(lw, m: Mapped):
    """Every value of `m` as part nodes of the program's builder (made once)."""
    if m.elements is None:
        m.elements = _parts(lw, m, root_builder(lw.v.b), range(m.shape[0]))
    return m.elements


def row(lw, m: Mapped, k: int):
    """Row `k` (a static integer in range) of `m`: its part nodes alone."""
    if m.elements is not None:
        return m.elements[k]
    return _parts(lw, m, root_builder(lw.v.b), [k % m.shape[0]])[0]


def _parts(lw, m: Mapped, b, rows) -> np.ndarray:
    width = math.prod(m.shape[1:])
    lw.v.check_size(len(rows) * width, m.span, "this comprehension")
    out = np.empty((len(rows), width), dtype=object)
    for r, k in enumerate(rows):
        for t in range(width):
            out[r, t] = lw.v.dyn(b.part(m.node, k * width + t))
    return out.reshape((len(rows), *m.shape[1:]))


def fused(lw, m: Mapped, index: list, span):
    """`m[index]` in the body being lowered, where the first subscript is an `Index` of that
    body alone (`i + c`, `2 * i`, `n - 1 - i`) and the rest static: row `index[0]` computed
    there by the comprehension's body, or, where that body is over `FUSED` nodes, read where
    its loop stored it; indexed by the rest. None where it is not so read, the body being
    lowered is nested, or stored rows are read backwards (the caller lists `m`)."""
    bb = lw.v.b
    (first, _), rest = index[0], index[1:]
    if not (isinstance(bb, BodyBuilder) and isinstance(bb.parent, Builder)
            and isinstance(first, Index) and len(first.terms) == 1
            and first.terms[0][0] is bb and len(index) <= len(m.shape)
            and all(type(item) is int for item, _ in rest)):
        return None
    a = first.terms[0][1]
    root = bb.parent
    node = root.nodes[m.node]
    region = node.attr
    stored = len(region.body.nodes) > FUSED or (region.whole and max(region.whole) > 0)
    if a < 0 and stored:  # stored rows read backwards: listed (their pullback reads
        return None  # a loop's values forwards only)
    low, high = first.b + min(0, a * (bb.n - 1)), first.b + max(0, a * (bb.n - 1))
    if low < 0 or high >= m.shape[0]:
        raise Irregular("an index out of range in some iteration")
    key = (m.node, a, first.b)
    values = bb.fused.get(key)
    if values is None:
        if stored:
            values = _stored(bb, m, a, first.b)
        else:
            values = _inline(bb, region, node.args, a, first.b, first)
        bb.fused[key] = values
    out = np.empty(len(values), dtype=object)
    for t, v in enumerate(values):
        out[t] = lw.v.dyn(v)
    value = out.reshape(m.shape[1:]) if len(m.shape) > 1 else out[0]
    return lw.v.getitem(value, rest, span) if rest else value


def _stored(bb: BodyBuilder, m: Mapped, a: int, b: int) -> list[int]:
    """The ids in `bb` of row `a * i + b` of `m` as the map region stored it: a stream that
    reads the region's values whole."""
    width = math.prod(m.shape[1:])
    items = WholeItems(m.node, m.shape[0] * width)
    return [bb.read(items, width * a, width * b + t) for t in range(width)]


def _inline(bb: BodyBuilder, region, args, a: int, b: int, first: Index) -> list[int]:
    """The ids in `bb` of row `a * i + b` of map region `region` (arguments `args`, nodes of
    `bb`'s parent): its body built into `bb`, each stream read at the same place of the same
    array as the region reads it in that iteration."""
    captures, streams = split_args(region, args)
    given = {"@i": [first.node(bb)], "@c": list(captures)}
    for j, (length, stride, offset) in enumerate(region.streams):
        items = WholeItems(streams[j][0], length) if region.source(j) == 0 \
            else tuple(streams[j])
        width = region.body.inputs[f"@s{j}"].size
        given[f"@s{j}"] = [bb.read(items, stride * a, offset + stride * b + t)
                           for t in range(width)]
    return inline(bb, region.body, given)["@map"]
