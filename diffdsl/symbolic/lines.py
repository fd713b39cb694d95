"""Derivatives as lines, a run of elements that share one formula in an index written once
(`diffdsl diff` with loops kept, `sums.py`):

    d d / d x[0] = 2*x[0]*w[0]
    d d / d x[i] = 2*w[i]*x[i] + x[i - 1]    (i = 1 .. 98)
    d d / d A[i, 2] = A[i, 0]                (i = 0 .. 79)

Elements p, p + 1, ... along one axis of a derivative form a run when their graphs are the
same up to a shift: the same ops over the same constants and input elements, but for the same
map output of the same region at iterations that move with p, and elements of vectors that
move with p (`_keys`). The formula of a run is its first element's, with each map value at
iteration `it` written as the region's formula at `i + (it - p)` and `x[k]` as `x[i + k - p]`.
Of the axes, the one that gives the fewest lines is used.
"""

from __future__ import annotations

import itertools
import math

import sympy as sp

from ..graph import loops
from ..graph.ir import Graph
from .atoms import unravel
from .sums import Level, bad, export, index_symbols, knows, whole_outputs

KEY_NODES = 64  # nodes of an element's graph outside loops beyond which it is its own run


class Line:
    """One printed line: the element at `index` (with `symbol` in place of the moving axis
    where `span` is a range (first, last)), and its formula."""

    def __init__(self, name: str, index: tuple, expr, symbol=None, span=None):
        self.name, self.index, self.expr, self.symbol, self.span = name, index, expr, \
            symbol, span


def derivative_lines(jac: Graph, names: list[str]) -> list[Line]:
    """The lines of the outputs `names` ("d:x", ...) of a Jacobian graph, loops kept."""
    graph, level = export(jac, names)
    keys = _keys(graph, level)
    lines: list[Line] = []
    for name in names:
        port = graph.outputs[name]
        shape = tuple(port.shape)
        elements = [keys[i] for i in port.ids]
        axis = min(range(len(shape)), default=None,
                   key=lambda a: (len(_runs(shape, elements, a)), -a))
        if axis is None:  # one element
            lines.append(Line(name, (), level.value(port.ids[0])))
            continue
        for flat, length in _runs(shape, elements, axis):
            index = unravel(flat, shape)
            node = port.ids[flat]
            if length == 1:
                lines.append(Line(name, index, level.value(node)))
                continue
            first = index[axis]
            symbol, expr = _template(graph, level, node, first)
            lines.append(Line(name, index[:axis] + (symbol,) + index[axis + 1:], expr, symbol,
                              (first, first + length - 1)))
    return lines


def _keys(graph: Graph, level: Level) -> list:
    """Per node, its graph outside loops as a nested tuple (None past `KEY_NODES` nodes):
    a map value is ("map", region, output, iteration), which `_shifted` moves."""
    keys: list = [None] * len(graph.nodes)
    sizes = [1] * len(graph.nodes)
    for i, node in enumerate(graph.nodes):
        if node.op == "part":
            loop = level.loops.get(node.args[0])
            place = None if loop is None else loop.place(node.attr)
            keys[i] = ("sum", node.args[0], node.attr) if place is None else \
                ("map", node.args[0], *place)
        elif node.op == "const":
            keys[i] = ("const", node.attr.hex())
        elif node.op == "input":  # a vector's element moves with the run, as a map value
            vector = len(graph.inputs[node.attr[0]].shape) == 1
            keys[i] = ("element" if vector else "input", *node.attr)
        elif node.op != "region":
            sizes[i] = 1 + sum(sizes[a] for a in node.args)
            args = [keys[a] for a in node.args]
            if sizes[i] <= KEY_NODES and all(k is not None for k in args):
                keys[i] = (node.op, *args)
    return keys


def _shifted(key, q: int):
    """`key` with every map iteration moved back by q: equal keys after the shift share a
    formula in the index."""
    if key is None:
        return None
    if key[0] == "map":
        return ("map", key[1], key[2], key[3] - q)
    if key[0] == "element":
        return ("element", key[1], key[2] - q)
    if key[0] in ("sum", "const", "input"):
        return key
    return (key[0], *(_shifted(k, q) for k in key[1:]))


def _runs(shape: tuple, keys: list, axis: int) -> list[tuple[int, int]]:
    """(first flat element, length) of each run along `axis`, in row-major order of their
    first elements."""
    strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
    others = [range(d) if a != axis else range(1) for a, d in enumerate(shape)]
    runs = []
    for start in itertools.product(*others):
        base = sum(s * k for s, k in zip(strides, start, strict=True))
        q = 0
        while q < shape[axis]:
            key = _shifted(keys[base + q * strides[axis]], q)
            length = 1
            while key is not None and q + length < shape[axis] and _shifted(
                    keys[base + (q + length) * strides[axis]], q + length) == key:
                length += 1
            runs.append((base + q * strides[axis], length))
            q += length
    return sorted(runs)


def _template(graph: Graph, level: Level, node: int, first: int):
    """(symbol, formula) of a run that starts with element `node` at index `first`."""
    raw = level.raw[node]
    dummies = {d: p for p, d in level.parts.items()}
    for symbol in index_symbols(graph.inputs):
        mapping = {}
        for dummy in raw.free_symbols & set(dummies):
            p = dummies[dummy]
            loop = level.loops[graph.nodes[p].args[0]]
            place = loop.place(graph.nodes[p].attr)
            mapping[dummy] = level.resolved[dummy] if place is None else \
                loop.at(place[0], symbol + (place[1] - first))
        for atom in raw.atoms(sp.Indexed):  # elements of vectors, which the run moves
            name, index = str(atom.base.label), atom.indices
            if name in graph.inputs and len(graph.inputs[name].shape) == 1 and \
                    index[0].is_Integer:
                mapping[atom] = atom.base[symbol + (int(index[0]) - first)]
        expr = raw.xreplace(mapping)
        # A sum over an index of the same name would read as the same i: the next name.
        if not any(symbol.name == str(v) for s in expr.atoms(sp.Sum) for v in s.variables):
            return symbol, expr
    raise AssertionError("no free index name")  # 20 names: more than loops nest


def kept(graph: Graph) -> bool:
    """Whether `graph` has loops this export keeps, and none it would write out whole."""
    graph = loops.explicit(graph, inputs=whole_outputs(graph))
    return knows(graph) and loops.has_regions(graph) and not any(
        node.op == "region" and bad(node.attr) for node in graph.nodes)


def loop_sizes(graph: Graph, cap: int) -> list[int]:
    """Per node, the size of its formula with loops kept (capped at `cap`): a region's is its
    body's and its captures', a stream one atom; a part's is its region's."""
    sizes = [1] * len(graph.nodes)
    for i, node in enumerate(graph.nodes):
        if node.op == "region":
            region = node.attr
            body = loop_sizes(region.body, cap)
            outs = [body[k] for port in ("@sum", "@map") for k in region.body.outputs[port].ids]
            sizes[i] = min(cap, 1 + max(outs, default=0) +
                           sum(sizes[a] for a in node.args[:region.captures]))
        elif node.op == "part":
            sizes[i] = sizes[node.args[0]]
        elif node.args:
            sizes[i] = min(cap, 1 + sum(sizes[a] for a in node.args))
    return sizes
