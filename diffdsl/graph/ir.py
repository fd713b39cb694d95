"""The IR: a scalar SSA graph in topological order, hash-consed.

Every node is one real: an input element, a constant, or an op of `ops.OPS` on earlier nodes;
or a region (DESIGN.md, decision 9): a loop whose body is itself a graph, run `n` times over an
index, whose values are read one at a time by `part` nodes (see `Region`; loops.py builds,
unrolls and differentiates them).
`Builder` interns each `(op, args, attr)`, so equal subexpressions are one node, folds
constants and applies the identities of `rewrites.RULES` (`x * 1 = x`, `x + 0 = x`,
`x * 0 = 0`). A `Graph` is the frozen result: nodes, the inputs (name, shape, node ids) and the
outputs (name, shape, node ids), with a canonical text form and its sha256 key, by which graphs
are hashed and compared. `verify(graph)` checks that a graph is well formed: backends call it
before they compile, and with `DIFFDSL_VERIFY=1` (the test suite sets it) every graph a
builder freezes is checked, after lowering and after each derivative transform.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field

from .. import limits
from ..errors import Span
from .ops import OPS
from .region import Region
from .rewrites import RULES

VERIFY_ENV = "DIFFDSL_VERIFY"


@dataclass(frozen=True)
class Node:
    op: str
    args: tuple[int, ...] = ()
    attr: object = None  # const: the float; input: (name, flat index)


@dataclass(frozen=True)
class Port:
    """An input or output: its shape and the node ids of its elements in row-major order."""

    shape: tuple[int, ...]
    ids: tuple[int, ...]
    span: Span | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, eq=False)
class Graph:
    """Hashed and compared by `key()`: equal graphs are one key in a cache, whichever object
    holds them."""

    nodes: tuple[Node, ...]
    inputs: dict[str, Port]
    outputs: dict[str, Port]
    # The sha256 of `text()`, computed once (or given by a plan read from the cache).
    known_key: str | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.nodes)

    def __hash__(self) -> int:
        return hash(self.known_key or self.key())

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, Graph):
            return NotImplemented
        return self.key() == other.key()

    def text(self) -> str:
        """The canonical text form: equal graphs print the same text."""
        lines = []
        for name, port in self.inputs.items():
            lines.append(f"input {name}{list(port.shape)} = {_ids(port.ids)}")
        for i, node in enumerate(self.nodes):
            if node.op == "const":
                lines.append(f"%{i} = const {float(node.attr).hex()}")
            elif node.op == "input":
                lines.append(f"%{i} = input {node.attr[0]}[{node.attr[1]}]")
            elif node.op == "region":
                region = node.attr
                lines.append(f"%{i} = region {region.key()} {_ids(node.args)}")
            elif node.op == "part":
                lines.append(f"%{i} = part %{node.args[0]} {node.attr}")
            else:
                lines.append(f"%{i} = {node.op} {' '.join(f'%{a}' for a in node.args)}")
        for name, port in self.outputs.items():
            lines.append(f"output {name}{list(port.shape)} = {_ids(port.ids)}")
        return "\n".join(lines) + "\n"

    def key(self) -> str:
        """sha256 of the canonical text: the identity of the graph for caches."""
        if self.known_key is None:
            object.__setattr__(self, "known_key",
                               hashlib.sha256(self.text().encode()).hexdigest())
        return self.known_key

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return counts


def _ids(ids) -> str:
    return "[%" + " %".join(map(str, ids)) + "]" if ids else "[]"


class Builder:
    """Makes nodes, interned by `(op, args, attr)`, with folding and simplification.

    At most `max_nodes` nodes (the `nodes` limit in force by default): a graph too big to build
    is refused before it exhausts memory.
    """

    def __init__(self, max_nodes: int | None = None):
        self.nodes: list[Node] = []
        self._index: dict[tuple, int] = {}
        self.max_nodes = limits.current().nodes if max_nodes is None else max_nodes

    @classmethod
    def from_graph(cls, graph: Graph, max_nodes: int | None = None) -> Builder:
        """A builder holding `graph`'s nodes under the same ids, to extend it."""
        b = cls(max_nodes)
        for node in graph.nodes:
            if node.op == "const":
                b.const(node.attr)
            elif node.op == "input":
                b.input(*node.attr)
            elif node.op in ("region", "part"):
                b._intern((node.op, node.args, node.attr), node)
            else:
                args = node.args
                if OPS[node.op].commutative:
                    args = tuple(sorted(args))  # the key `op()` looks up
                b._intern((node.op, args, None), node)
        if len(b.nodes) != len(graph.nodes):
            raise ValueError("graph has duplicate nodes; it was not made by a Builder")
        return b

    # leaves
    def const(self, value: float) -> int:
        value = float(value)
        # Keyed by the exact bits, so 0.0 and -0.0 stay apart and NaN finds itself.
        return self._intern(("const", (), value.hex()), Node("const", (), value))

    def input(self, name: str, index: int) -> int:
        return self._intern(("input", (), (name, index)), Node("input", (), (name, index)))

    def is_const(self, i: int) -> bool:
        return self.nodes[i].op == "const"

    def value(self, i: int) -> float | None:
        node = self.nodes[i]
        return node.attr if node.op == "const" else None

    # ops
    def op(self, name: str, *args: int) -> int:
        row = OPS[name]
        if len(args) != row.arity:
            raise ValueError(f"{name} takes {row.arity} arguments, got {len(args)}")
        consts = [self.value(a) for a in args]
        if all(c is not None for c in consts):
            folded = _fold(row, consts)
            if folded is not None:
                return self.const(folded)
        for rule in RULES.get(name, ()):
            simpler = rule(self, name, args, consts)
            if simpler is not None:
                return simpler
        if row.commutative and args[0] > args[1]:
            args = (args[1], args[0])
        return self._intern((name, args, None), Node(name, tuple(args)))

    def _intern(self, key: tuple, node: Node) -> int:
        found = self._index.get(key)
        if found is not None:
            return found
        if len(self.nodes) >= self.max_nodes:
            raise limits.exceeded("nodes", self.max_nodes,
                                  f"the graph needs more than {self.max_nodes:,} nodes")
        self.nodes.append(node)
        self._index[key] = len(self.nodes) - 1
        return len(self.nodes) - 1

    def region(self, region: Region, args) -> int:
        """A region node over `args` (captures, then each stream's elements)."""
        return self._intern(("region", tuple(args), region), Node("region", tuple(args), region))

    def part(self, region: int, k: int) -> int:
        """Value `k` of region node `region` (see `Region`)."""
        return self._intern(("part", (region,), k), Node("part", (region,), k))

    # the interface the pullbacks in ops.py build through
    def neg(self, a):
        return self.op("neg", a)

    def add(self, a, b):
        return self.op("add", a, b)

    def sub(self, a, b):
        return self.op("sub", a, b)

    def mul(self, a, b):
        return self.op("mul", a, b)

    def div(self, a, b):
        return self.op("div", a, b)

    def pow(self, a, b):
        return self.op("pow", a, b)

    def select(self, c, a, b):
        return self.op("select", c, a, b)

    def graph(self, inputs: dict[str, Port], outputs: dict[str, Port]) -> Graph:
        """Freeze into a `Graph`, keeping every input node and what the outputs reach
        (checked by `verify` when `DIFFDSL_VERIFY=1`)."""
        graph = prune(self.nodes, inputs, outputs)
        return verify(graph) if verifying() else graph


def _fold(row, consts: list[float]) -> float | None:
    try:
        result = float(row.fold(*consts))
    except (ValueError, OverflowError, ZeroDivisionError):
        return None  # leave it to run time, where it becomes inf or nan as in NumPy
    if math.isnan(result) and not any(math.isnan(c) for c in consts):
        return None
    return result


def prune(nodes, inputs: dict[str, Port], outputs: dict[str, Port]) -> Graph:
    """Dead-code removal and renumbering: inputs first, then what the outputs need."""
    live = bytearray(len(nodes))
    for port in outputs.values():
        for i in port.ids:
            live[i] = 1
    for i in range(len(nodes) - 1, -1, -1):
        if live[i]:
            for a in nodes[i].args:
                live[a] = 1
    order = [i for port in inputs.values() for i in port.ids]
    seen = set(order)
    order += [i for i in range(len(nodes)) if live[i] and i not in seen]
    # Inputs come first; the rest keep their order, which is topological already.
    new_id = {}
    new_nodes = []
    for old in order:
        node = nodes[old]
        if node.args:
            node = Node(node.op, tuple(new_id[a] for a in node.args), node.attr)
        new_id[old] = len(new_nodes)
        new_nodes.append(node)
    return Graph(
        tuple(new_nodes),
        {n: Port(p.shape, tuple(new_id[i] for i in p.ids), p.span) for n, p in inputs.items()},
        {n: Port(p.shape, tuple(new_id[i] for i in p.ids), p.span) for n, p in outputs.items()},
    )


# verification --------------------------------------------------------------------------------
class GraphError(ValueError):
    """A graph that is not well formed: a fault of whatever built it, named with its node."""


def verifying() -> bool:
    """Whether every graph a builder freezes is verified (`DIFFDSL_VERIFY=1`)."""
    return os.environ.get(VERIFY_ENV, "") not in ("", "0")


_ARITY = {name: row.arity for name, row in OPS.items()}
_COMMUTATIVE = frozenset(name for name, row in OPS.items() if row.commutative)


def verify(graph: Graph) -> Graph:
    """Check that `graph` is well formed and return it; raise `GraphError` at the first fault.

    Every node is an op of the table with the row's arity, whose arguments are earlier nodes;
    constants are floats; no node repeats another; ports have as many node ids as their shape
    has elements, each a node of the graph; every input node is the element of the input port
    its attribute names, at the position the port holds it. Linear in the graph's size, so the
    backends call it before they compile (an emitter fed a malformed graph fails here, not in
    LLVM's verifier).
    """
    nodes = graph.nodes
    seen: dict[tuple, int] = {}
    for i, node in enumerate(nodes):
        op, args = node.op, node.args
        arity = _ARITY.get(op, -1 if op in ("region", "part") else None)
        if arity is None:
            _fault(i, node, f"'{op}' is not an op of the table")
        if type(args) is not tuple or (arity >= 0 and len(args) != arity):
            _fault(i, node, f"{op} takes {arity} arguments, the node has {len(args)}")
        for a in args:
            if type(a) is not int or not 0 <= a < i:
                _fault(i, node, f"argument {a!r} is not an earlier node")
        if op in ("region", "part"):
            _check_looped(nodes, i, node)
            first = seen.setdefault((op, args, node.attr), i)
            if first != i:
                _fault(i, node, f"it repeats node {first}")
            continue
        if op == "const":
            if type(node.attr) is not float:
                _fault(i, node, f"a constant is a float, not {node.attr!r}")
            key = (op, node.attr.hex())
        elif op == "input":
            key = (op, _input_element(graph, i, node))
        else:
            if node.attr is not None:
                _fault(i, node, f"{op} has no attribute, the node has {node.attr!r}")
            key = (op, tuple(sorted(args)) if op in _COMMUTATIVE else args)
        first = seen.setdefault(key, i)
        if first != i:
            _fault(i, node, f"it repeats node {first}")
    for kind, ports in (("input", graph.inputs), ("output", graph.outputs)):
        for name, port in ports.items():
            _check_port(kind, name, port, len(nodes))
    for name, port in graph.inputs.items():
        for k, i in enumerate(port.ids):
            if nodes[i].op != "input" or nodes[i].attr != (name, k):
                raise GraphError(f"malformed graph: element {k} of input '{name}' is node {i}, "
                                 f"which is not input {name}[{k}]")
    return graph


def _check_looped(nodes, i: int, node: Node) -> None:
    """A region's body and arguments agree (its body verified as a graph); a part names a
    value the region has."""
    if node.op == "part":
        region = nodes[node.args[0]] if len(node.args) == 1 else None
        if region is None or region.op != "region":
            _fault(i, node, "a part reads a region node")
        if type(node.attr) is not int or not 0 <= node.attr < region.attr.size:
            _fault(i, node, f"part {node.attr!r} of a region of {region.attr.size} values")
        return
    region = node.attr
    if not isinstance(region, Region) or type(region.n) is not int or region.n < 1:
        _fault(i, node, f"a region's attribute is a Region of n >= 1, not {region!r}")
    body = verify(region.body)
    expected = {"@i", "@c", *(f"@s{j}" for j in range(len(region.streams)))}
    outputs = {"@sum", "@map"}
    if region.carry:
        expected.add("@h")
        outputs.add("@next")
    if set(body.inputs) != expected or set(body.outputs) != outputs:
        _fault(i, node, f"the body's ports are {list(body.inputs)} -> {list(body.outputs)}")
    if body.inputs["@i"].size != 1 or body.inputs["@c"].size != region.captures:
        _fault(i, node, "the body's @i or @c does not match the region")
    if region.carry and not (body.inputs["@h"].size == body.outputs["@next"].size
                             == region.carry):
        _fault(i, node, f"the body's @h or @next does not hold a state of {region.carry}")
    if region.combine and (len(region.combine) != region.sums or
                           not set(region.combine) <= {"add", "min", "max"}):
        _fault(i, node, f"a region combines its sums by {region.combine!r}")
    for (length, stride, offset), width in zip(region.streams, region.widths(), strict=True):
        # A scan's reverse reads its streams backwards: a stride may be negative.
        ends = (offset, offset + stride * (region.n - 1))
        first, last = min(ends), max(ends) + width - 1
        if min(length, offset) < 0 or (width and (first < 0 or last >= length)):
            _fault(i, node, f"a stream of {length} elements read up to element {last}")
    if region.whole and len(region.whole) != len(region.streams):
        _fault(i, node, f"a region's sources {region.whole} do not match its streams")
    if len(node.args) != region.arity:
        _fault(i, node, f"the region takes {region.arity} arguments, the node has "
                        f"{len(node.args)}")
    at = region.captures
    for j, (length, _, _) in enumerate(region.streams):
        k = region.source(j)
        if k >= 0:
            source = nodes[node.args[at]]
            if source.op != "region" or k + length > source.attr.size:
                _fault(i, node, f"stream {j} reads values {k} to {k + length - 1} of a region")
        at += region.taken(j)


def _input_element(graph: Graph, i: int, node: Node) -> tuple:
    attr = node.attr
    if not (type(attr) is tuple and len(attr) == 2 and type(attr[0]) is str
            and type(attr[1]) is int):
        _fault(i, node, f"an input's attribute is (name, index), not {attr!r}")
    port = graph.inputs.get(attr[0])
    if port is None or not 0 <= attr[1] < len(port.ids) or port.ids[attr[1]] != i:
        _fault(i, node, f"it is not element {attr[1]} of an input port '{attr[0]}'")
    return attr


def _check_port(kind: str, name: str, port: Port, count: int) -> None:
    shape = port.shape
    if type(shape) is not tuple or not all(type(d) is int and d >= 0 for d in shape):
        raise GraphError(f"malformed graph: {kind} '{name}' has shape {shape!r}, not a tuple of "
                         "dimensions")
    if math.prod(shape) != len(port.ids):
        raise GraphError(f"malformed graph: {kind} '{name}' of shape {list(shape)} has "
                         f"{len(port.ids)} node ids, not {math.prod(shape)}")
    for i in port.ids:
        if type(i) is not int or not 0 <= i < count:
            raise GraphError(f"malformed graph: {kind} '{name}' names node {i!r}, and the graph "
                             f"has nodes 0 to {count - 1}")


def _fault(i: int, node: Node, what: str):
    raise GraphError(f"malformed graph: node {i} ({node.op} {list(node.args)}): {what}")
