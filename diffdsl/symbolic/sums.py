"""SymPy export that keeps a loop as a loop (issue 22, item 6): `diffdsl diff`,
`Program.to_sympy` and `symbolic_jacobian` write a region (graph/region.py) as formulas in its
index, not n formulas. A "@sum" output combined by "add" is `Sum(body, (i, 0, n - 1))` (or
`n * body` where the body does not depend on i); a "@map" output is one formula in i, and
value k of the region is that formula at i = k (`lines.py` prints a run of such elements as
one line). A stream that reads an input's elements in order is the input's `IndexedBase` (with
its shape) at an index affine in i (`x[i + 1]`, `A[i, 2]`); a stream of a region's map values
is their formula at that index; other data is a formula in the index (arithmetic
progressions) or `Array([...])[i]`. Captures are their own formulas; nested regions are nested
Sums, indices i, j, k, ... by depth (names no input has). A body is exported by
`export_nodes`, as a graph is, its ports as atoms.

What it does not write as a loop it writes out as before (`loops.unroll`), one region at a
time: scans (`carry` > 0), sums combined by min or max (SymPy's Min and Max are symmetric, the
language keeps the first on a tie, and a winner's index has no closed form), a stream read at
an index that is not affine in the input's shape. An input read in place (an `array` node)
is its `IndexedBase` as it stands; a gradient's port whole on a region's values is listed
(`loops.explicit`); a graph with a node or port this export still does not know (a
stream of a scan's stored states) is written out whole (`loops.expand`).
"""

from __future__ import annotations

import math

import sympy as sp

from ..graph import loops
from ..graph.ir import Graph, Node
from .atoms import indexed_base, unravel
from .export import SYMPY_FUNCS, deep_call, export_depth, export_nodes
from .export import _output_names as output_names
from .export import to_sympy as to_sympy_written
from .loop_formulas import put, summed

INDEX_NAMES = ("i", "j", "k", "l", "m", "q")
_LEAVES = ("input", "const", "region", "part", "array")


class Unexpressible(Exception):
    """A region that is written out instead: `node` (args[0]) is its id in the graph."""

    @property
    def node(self) -> int:
        return self.args[0] if self.args else -1


def index_symbols(taken) -> list[sp.Symbol]:
    """The loop indices by depth: integer symbols whose names no input has."""
    taken = set(taken)
    names = [n for n in INDEX_NAMES if n not in taken]
    names += [f"i{d}" for d in range(1, 16) if f"i{d}" not in taken]
    return [sp.Symbol(n, integer=True, nonnegative=True) for n in names]


def knows(graph: Graph) -> bool:
    """Whether every node and port of `graph` (bodies too) is one this export writes."""
    if any(p.whole is not None for p in graph.outputs.values()):
        return False
    for node in graph.nodes:
        if node.op == "region":
            r = node.attr
            _, streams = loops.split_args(r, node.args)
            if any(r.source(j) >= 0 and graph.nodes[s[0]].op != "array"
                   for j, s in enumerate(streams)) or not knows(r.body):
                return False
        elif node.op not in _LEAVES and node.op not in SYMPY_FUNCS:
            return False
    return True


def bad(region) -> bool:
    """What is written out whatever its streams: a scan, a min or max."""
    return bool(region.carry) or any(k != "add" for k in region.combine)


# ---------------------------------------------------------------------------------------------
# Where a stream's elements come from


class _Input:
    """The elements of input `name` in row-major order, from flat element `first`."""

    def __init__(self, name: str, shape: tuple, first: int, real: bool):
        self.name, self.shape, self.first, self.real = name, tuple(shape), first, real

    def element(self, const: int, lin, ranges: dict):
        """Element `const + lin` (lin: integer combination of indices, or 0)."""
        flat = self.first + const
        if not self.shape:
            return sp.Symbol(self.name, real=True) if self.real else sp.Symbol(self.name)
        index = [sp.Integer(k) for k in unravel(flat, self.shape)]
        if lin != 0:
            for symbol, coeff in sp.expand(lin).as_coefficients_dict().items():
                axis = self._axis(int(coeff))
                index[axis] += int(coeff) // self._step(axis) * symbol
            for axis, expr in enumerate(index):
                low, high = _bounds(expr, ranges)
                if low < 0 or high >= self.shape[axis]:
                    raise Unexpressible()
        return indexed_base(self.name, self.shape, self.real)[tuple(index)]

    def _step(self, axis: int) -> int:
        return math.prod(self.shape[axis + 1:])

    def _axis(self, coeff: int) -> int:
        """The axis an index moves along when the flat index moves by `coeff`: that of the
        largest step that divides it and is no larger (3 in shape (80, 3) is the next row)."""
        for axis in range(len(self.shape)):
            step = self._step(axis)
            if step <= abs(coeff) and coeff % step == 0:
                return axis
        raise Unexpressible()


def _bounds(expr, ranges: dict) -> tuple[int, int]:
    """The least and greatest value of an affine integer `expr` over the indices' ranges."""
    low = high = int(expr.subs({s: 0 for s in expr.free_symbols}))
    for symbol, coeff in sp.expand(expr).as_coefficients_dict().items():
        span = 0 if symbol == 1 else int(coeff) * (ranges[symbol] - 1)
        low, high = low + min(0, span), high + max(0, span)
    return low, high


class _View:
    """A window of another source: a body's stream, read by a nested region."""

    def __init__(self, source, const: int, lin):
        self.source, self.const, self.lin = source, const, lin

    def element(self, const: int, lin, ranges: dict):
        return self.source.element(self.const + const, self.lin + lin, ranges)


class _Map:
    """Consecutive map values of an earlier region, from value `first` after its sums."""

    def __init__(self, loop, first: int):
        self.loop, self.first = loop, first

    def element(self, const: int, lin, ranges: dict):
        width = len(self.loop.maps)
        at = self.first + const
        steps = 0
        if lin != 0:
            for symbol, coeff in sp.expand(lin).as_coefficients_dict().items():
                if int(coeff) % width:
                    raise Unexpressible()
                steps += (int(coeff) // width) * symbol
        return self.loop.at(at % width, at // width + steps)


class _Array:
    """Elements given by their own formulas: `Array([...])[i]` where the index moves."""

    def __init__(self, elements: list):
        self.elements = elements
        self._array = None

    def element(self, const: int, lin, ranges: dict):
        if lin == 0:
            return self.elements[const]
        if self._array is None:
            self._array = _segments(self.elements) or sp.Array(self.elements)
        if isinstance(self._array, list):  # numbers a + b * t on a few stretches of t
            t = const + lin
            pieces = [(a + b * t, t <= last) for a, b, last in self._array]
            pieces[-1] = (pieces[-1][0], True)
            return pieces[0][0] if len(pieces) == 1 else sp.Piecewise(*pieces)
        return self._array[const + lin]


SEGMENTS = 3  # stretches of numbers in arithmetic progression written as a formula in t


def _segments(elements: list) -> list | None:
    """[(a, b, last t)] where the elements are rational numbers a + b * t on at most
    `SEGMENTS` stretches of t: a `const` written as a comprehension over its index
    (`[i * 0.5 for i in range(n)]`), a guard that is 1 but in the last iteration."""
    if len(elements) < 3 or not all(isinstance(e, sp.Rational) for e in elements):
        return None
    found, t = [], 0
    while t < len(elements):
        a = elements[t]
        b = elements[t + 1] - a if t + 1 < len(elements) else sp.Integer(0)
        last = t
        while last + 1 < len(elements) and elements[last + 1] == a + b * (last + 1 - t):
            last += 1
        found.append((a - b * t, b, last))
        if len(found) > SEGMENTS:
            return None
        t = last + 1
    return found


# ---------------------------------------------------------------------------------------------
# Regions as SymPy


class Loop:
    """A region written as SymPy: its sums, and its map outputs as formulas in `index`."""

    def __init__(self, region, index: sp.Symbol, sums: list, maps: list):
        self.region, self.index, self.sums, self.maps = region, index, sums, maps
        self._done: dict = {}

    def at(self, m: int, iteration):
        """Map output `m` at iteration `iteration` (a number or an expression)."""
        value = sp.sympify(iteration)
        done = self._done.setdefault(value, {})  # the maps share their subexpressions
        return put(self.maps[m], self.index, value, done)

    def value(self, v: int):
        """Value `v` of the region (see `Region`)."""
        if v < len(self.sums):
            return self.sums[v]
        iteration, m = divmod(v - len(self.sums), len(self.maps))
        return self.at(m, iteration)

    def place(self, v: int) -> tuple[int, int] | None:
        """(map output, iteration) of value `v`; None for a sum."""
        if v < len(self.sums):
            return None
        iteration, m = divmod(v - len(self.sums), len(self.maps))
        return m, iteration


class Level:
    """One graph (the program's, or a body) exported with its regions as `Loop`s: `raw[i]` is
    node i's formula with each `part` node a placeholder `parts[node]`, `resolved` each
    placeholder's value."""

    def __init__(self, graph: Graph, ids, atom, indices: list, ranges: dict, real: bool,
                 view=None):
        self.graph = graph
        self.loops: dict[int, Loop] = {}
        self.parts: dict[int, sp.Dummy] = {}
        self.resolved: dict = {}
        nodes = graph.nodes
        regions = [i for i, node in enumerate(nodes) if node.op == "region"]
        kinds = {r: [_kind(graph, nodes, s, view) for s in
                     loops.split_args(nodes[r].attr, nodes[r].args)[1]] for r in regions}
        need = set(ids)
        for r in regions:
            captures, streams = loops.split_args(nodes[r].attr, nodes[r].args)
            need.update(captures)
            for kind, args in zip(kinds[r], streams, strict=True):
                if kind[0] == "array":
                    need.update(args)
        hollow = Graph(tuple(Node("input", (), ("@part", i)) if node.op == "part" else
                             Node("const", (), 0.0) if node.op == "region" else node
                             for i, node in enumerate(nodes)), graph.inputs, graph.outputs)

        def leaf(name, k):
            if name == "@part":
                return self.parts.setdefault(k, sp.Dummy(f"part{k}"))
            return atom(name, k)

        self.raw = export_nodes(hollow, sorted(need), leaf)
        by_region: dict[int, list[int]] = {}
        for i, node in enumerate(nodes):
            if node.op == "part":
                by_region.setdefault(node.args[0], []).append(i)
        for r in regions:
            try:
                loop = self._loop(nodes[r], kinds[r], indices, ranges, real)
            except Unexpressible:
                raise Unexpressible(r) from None
            self.loops[r] = loop
            for p in by_region.get(r, ()):
                if p in self.parts:
                    self.resolved[self.parts[p]] = loop.value(nodes[p].attr)

    def value(self, i: int):
        """Node i's formula, every loop in it resolved."""
        return self.raw[i].xreplace(self.resolved) if self.resolved else self.raw[i]

    def _source(self, kind: tuple, args: list, real: bool):
        if kind[0] == "input":
            name, first = kind[1], kind[2]
            return _Input(name, self.graph.inputs[name].shape, first, real)
        if kind[0] == "view":
            return kind[1](kind[2])
        if kind[0] == "map":
            loop = self.loops[kind[1]]
            return _Map(loop, kind[2] - len(loop.sums))
        return _Array([self.value(a) for a in args])

    def _loop(self, node, kinds, indices: list, ranges: dict, real: bool) -> Loop:
        region = node.attr
        if bad(region):
            raise Unexpressible()
        captures, streams = loops.split_args(region, node.args)
        caps = [self.value(a) for a in captures]
        sources = [self._source(kind, args, real) for kind, args in zip(kinds, streams,
                                                                         strict=True)]
        index, inner = indices[0], indices[1:]
        ranges = {**ranges, index: region.n}

        def atom(name, k):
            if name == "@i":
                return index
            if name == "@c":
                return caps[k]
            length, stride, offset = region.streams[int(name[2:])]
            return sources[int(name[2:])].element(offset + k, stride * index, ranges)

        def view(j_t):
            j, t = j_t
            _, stride, offset = region.streams[j]
            return _View(sources[j], offset + t, stride * index)

        body = region.body
        sum_ids, map_ids = body.outputs["@sum"].ids, body.outputs["@map"].ids
        level = Level(body, list(sum_ids) + list(map_ids), atom, inner, ranges, real, view)
        sums = [summed(level.value(i), index, region.n) for i in sum_ids]
        return Loop(region, index, sums, [level.value(i) for i in map_ids])


def _kind(graph: Graph, nodes, args: list, view) -> tuple:
    """Where a stream's elements come from: ("input", name, first flat index), ("view",
    `view`, (stream, first)) for a body's own stream read in order, ("map", region node,
    first value) for consecutive map values of a region, or ("array",)."""
    first = nodes[args[0]] if args else None
    if first is not None and first.op == "array":  # an input read in place: all of it
        name = first.attr[0]
        if view is not None and name.startswith("@s"):  # the body's, read whole from outside
            return ("view", view, (int(name[2:]), 0))
        return ("input", name, 0)
    if first is not None and first.op == "input":
        name, k = first.attr
        if all(nodes[a].op == "input" and nodes[a].attr == (name, k + t)
               for t, a in enumerate(args)):
            if name in graph.inputs and not name.startswith("@"):
                return ("input", name, k)
            if view is not None and name.startswith("@s"):
                return ("view", view, (int(name[2:]), k))
    if first is not None and first.op == "part":
        r, v = first.args[0], first.attr
        region = nodes[r].attr
        if v >= region.sums and v + len(args) <= region.sums + region.n * region.maps and \
                all(nodes[a].op == "part" and nodes[a].args[0] == r and nodes[a].attr == v + t
                    for t, a in enumerate(args)):
            return ("map", r, v)
    return ("array",)


# ---------------------------------------------------------------------------------------------
# The program's graph


def export(graph: Graph, names, real: bool = True) -> tuple[Graph, Level]:
    """The outputs `names` of `graph` with loops kept: `(graph', level)`, where `graph'` is
    `graph` with what cannot be a loop written out and `level.value(i)` the formula of its
    node i. Public input atoms as `to_sympy` has them (`real=False`: no assumptions)."""
    graph = listed(graph)
    while True:
        ids = [i for name in names for i in graph.outputs[name].ids]
        indices = index_symbols(graph.inputs)
        try:
            level = deep_call(export_depth(graph, ids), Level, graph, ids,
                              _public_atom(graph, real), indices, {}, real)
            return graph, level
        except Unexpressible as e:
            unroll = {e.node} | {i for i, node in enumerate(graph.nodes)
                              if node.op == "region" and bad(node.attr)}
            graph = loops.written_out(graph, unroll)


def listed(graph: Graph) -> Graph:
    """`graph` with ports whole on a region's values listed element by element
    (`loops.explicit`; then the inputs too), inputs read in place and regions kept; written
    out (`loops.expand`) where a node or port is still one this export does not know."""
    graph = loops.explicit(graph, inputs=whole_outputs(graph))
    return graph if knows(graph) else loops.expand(graph)


def whole_outputs(graph: Graph) -> bool:
    """Whether an output is whole on a region's values (a gradient by an input read in
    place): its elements are then listed, and so are the inputs', whose runs `diff` prints
    (lines.py) by their elements."""
    return any(p.whole is not None for p in graph.outputs.values())


def _public_atom(graph: Graph, real: bool):
    """Input element atoms, made as asked (a million-element input costs nothing unread)."""
    def atom(name, k):
        shape = graph.inputs[name].shape
        if not shape:
            return sp.Symbol(name, real=True) if real else sp.Symbol(name)
        return indexed_base(name, shape, real)[unravel(k, shape)]
    return atom


def to_sympy(graph: Graph, names=None, real: bool = True) -> dict:
    """`{output: expression or sympy.Array}` (as `export.to_sympy`), loops kept; a graph
    without loops as `export.to_sympy` writes it."""
    names = output_names(graph, names)
    graph = listed(graph)
    if not loops.has_regions(graph):
        return to_sympy_written(graph, names, real)
    graph, level = export(graph, names, real)
    result = {}
    for name in names:
        port = graph.outputs[name]
        flat = [level.value(i) for i in port.ids]
        result[name] = flat[0] if not port.shape else sp.Array(flat, port.shape)
    return result

