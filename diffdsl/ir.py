"""The IR: a scalar SSA graph in topological order, hash-consed.

Every node is one real: an input element, a constant, or an op of `ops.OPS` on earlier nodes.
`Builder` interns each `(op, args, attr)`, so equal subexpressions are one node, folds
constants and applies identities that are exact or conventional for symbolic derivatives
(`x * 1 = x`, `x + 0 = x`, `x * 0 = 0`). A `Graph` is the frozen result: nodes, the inputs
(name, shape, node ids) and the outputs (name, shape, node ids), with a canonical text form
and its sha256 key.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from . import limits
from .errors import Span
from .ops import OPS


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


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    inputs: dict[str, Port]
    outputs: dict[str, Port]
    # The sha256 of `text()`, computed once (or given by a plan read from the cache).
    known_key: str | None = field(default=None, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.nodes)

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
    return "[" + " ".join(f"%{i}" for i in ids) + "]"


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
        simpler = self._simplify(name, args, consts)
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

    def _simplify(self, name: str, args: tuple, c: list) -> int | None:
        """Identities; `x * 0 = 0` and `0 / x = 0` treat 0 as a symbolic zero, as SymPy does."""
        if name == "add":
            if c[0] == 0.0:
                return args[1]
            if c[1] == 0.0:
                return args[0]
        elif name == "sub":
            if c[1] == 0.0:
                return args[0]
            if c[0] == 0.0:
                return self.op("neg", args[1])
            if args[0] == args[1]:
                return self.const(0.0)
        elif name == "mul":
            for k in (0, 1):
                if c[k] == 0.0:
                    return self.const(0.0)
                if c[k] == 1.0:
                    return args[1 - k]
                if c[k] == -1.0:
                    return self.op("neg", args[1 - k])
        elif name == "div":
            if c[1] == 1.0:
                return args[0]
            if c[0] == 0.0:
                return self.const(0.0)
        elif name == "neg":
            inner = self.nodes[args[0]]
            if inner.op == "neg":
                return inner.args[0]
        elif name == "pow":
            if c[1] == 1.0:
                return args[0]
            if c[1] == 0.0:
                return self.const(1.0)
            if c[1] == 2.0:
                return self.op("mul", args[0], args[0])
        elif name == "select":
            if args[1] == args[2]:
                return args[1]
            if c[0] is not None:
                return args[1] if c[0] != 0 else args[2]
            return self._same_condition(args)
        if name in ("mul", "div", "neg"):
            return self._hoist_select(name, args)
        return None

    def _same_condition(self, args: tuple) -> int | None:
        """`select(c, select(c, a, b), d)` is `select(c, a, d)`, and likewise in the else branch.

        The reverse sweep wraps pullback parts in `select(guard, part, 0)`; a part that is
        already routed by the same condition then needs no second select.
        """
        cond, x, y = args
        inner_x, inner_y = self.nodes[x], self.nodes[y]
        if inner_x.op == "select" and inner_x.args[0] == cond:
            return self.op("select", cond, inner_x.args[1], y)
        if inner_y.op == "select" and inner_y.args[0] == cond:
            return self.op("select", cond, x, inner_y.args[2])
        return None

    def _hoist_select(self, name: str, args: tuple) -> int | None:
        """`select(c, x, 0) * y` is `select(c, x * y, 0)`: the select moves outward.

        A select pullback routes the cotangent as `select(c, ct, 0)`; the pullbacks below it
        multiply by partial derivatives that may be infinite or NaN in the branch not taken
        (`sqrt'(-1)`). With the select kept outermost, that branch gives exactly 0, never
        `0 * nan` (LANGUAGE.md: a select sends exactly zero to the branch not taken).
        """
        positions = (0,) if name in ("div", "neg") else (0, 1)
        for k in positions:
            inner = self.nodes[args[k]]
            if inner.op != "select":
                continue
            cond, x, y = inner.args
            for taken, other in ((x, y), (y, x)):
                if self.value(other) == 0.0:
                    rest = list(args)
                    rest[k] = taken
                    moved = self.op(name, *rest)
                    zero = self.const(0.0)
                    return self.op("select", cond, moved, zero) if taken == x else \
                        self.op("select", cond, zero, moved)
        return None

    # the emitter interface used by the pullbacks in ops.py
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
        """Freeze into a `Graph`, keeping every input node and what the outputs reach."""
        return prune(self.nodes, inputs, outputs)


def _fold(row, consts: list[float]) -> float | None:
    try:
        result = float(row.py(*consts))
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
