"""The IR: a scalar SSA graph in topological order, hash-consed.

Every node is one real: an input element, a constant, or an op of `ops.OPS` on earlier nodes;
or a region (DESIGN.md, decision 9): a loop whose body is itself a graph, run `n` times over an
index, whose values are read one at a time by `part` nodes (see `Region`; loops.py builds,
unrolls and differentiates them).
`Builder` interns each `(op, args, attr)`, so equal subexpressions are one node, folds
constants and applies the identities of `rewrites.RULES` (`x * 1 = x`, `x + 0 = x`,
`x * 0 = 0`). A `Graph` is the frozen result: nodes, the inputs (name, shape, node ids) and the
outputs (name, shape, node ids), with a canonical text form and its sha256 key, by which graphs
are hashed and compared. `verify(graph)` (verify.py) checks that a graph is well formed.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import math
import threading
from array import array
from dataclasses import dataclass, field

from .. import limits
from ..errors import Span
from .ops import OPS
from .region import Region
from .rewrites import RULES
from .verify import VERIFY_ENV, GraphError, verify, verifying  # noqa: F401 (re-exported)

LONG_PORT = 4096  # ids past which a port's canonical text is a digest of them

# Derivations running now, and whether the cyclic collector ran before the first of them.
_deriving = {"count": 0, "collecting": False}
_deriving_lock = threading.Lock()


def collector_paused(derive):
    """`derive` run with the cyclic garbage collector off (as it was again after the last
    such call running ends). A derivation makes 10^5 to 10^6 nodes, none of them in cycles,
    and the collector walked every live one each time its oldest generation filled: a third
    of k-means' and GMM's derivation time. Garbage made meanwhile waits for the next pass."""
    @functools.wraps(derive)
    def paused(*args, **kwargs):
        with _deriving_lock:
            if _deriving["count"] == 0:
                _deriving["collecting"] = gc.isenabled()
                gc.disable()
            _deriving["count"] += 1
        try:
            return derive(*args, **kwargs)
        finally:
            with _deriving_lock:
                _deriving["count"] -= 1
                if _deriving["count"] == 0 and _deriving["collecting"]:
                    gc.enable()
    return paused


@dataclass(frozen=True, slots=True)
class Node:
    op: str
    args: tuple[int, ...] = ()
    attr: object = None  # const: the float; input: (name, flat index)

    def __init__(self, op: str, args: tuple[int, ...] = (), attr: object = None):
        # The slots set through their descriptors: the frozen dataclass's own __init__
        # looks up object.__setattr__ per field, twice the cost (a derivation makes 10^5).
        _SET_OP(self, op)
        _SET_ARGS(self, args)
        _SET_ATTR(self, attr)


_SET_OP, _SET_ARGS, _SET_ATTR = Node.op.__set__, Node.args.__set__, Node.attr.__set__


@dataclass(frozen=True)
class Port:
    """An input or output: its shape and the node ids of its elements in row-major order.

    A port may instead be `whole` (its `ids` empty): (node, first), its elements the values
    first, first + 1, ... of an `array` node (an input read in place by loops, whose element
    nodes exist only where the program reads one at a static index) or of a region (a
    gradient with respect to such an input). Such ports keep a graph's size independent of
    its data's (`loops.explicit` lists their elements where a consumer needs them)."""

    shape: tuple[int, ...]
    ids: tuple[int, ...]
    span: Span | None = field(default=None, compare=False)
    whole: tuple[int, int] | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape) if self.whole else len(self.ids)

    def moved(self, new_id) -> Port:
        """The same port with its node ids mapped through `new_id` (a dict or a list)."""
        whole = None if self.whole is None else (new_id[self.whole[0]], self.whole[1])
        # map: a Jacobian's port may hold 10^6 ids, and a generator costs twice as much
        return Port(self.shape, tuple(map(new_id.__getitem__, self.ids)), self.span, whole)

    def roots(self) -> tuple[int, ...]:
        """The nodes the port names: its elements, or the node it is whole on."""
        return self.ids if self.whole is None else (*self.ids, self.whole[0])


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
            lines.append(f"input {name}{list(port.shape)} = {_port_text(port)}")
        for i, node in enumerate(self.nodes):
            if node.op == "const":
                lines.append(f"%{i} = const {float(node.attr).hex()}")
            elif node.op == "input":
                lines.append(f"%{i} = input {node.attr[0]}[{node.attr[1]}]")
            elif node.op == "array":
                lines.append(f"%{i} = array {node.attr[0]}[{node.attr[1]}]")
            elif node.op == "region":
                region = node.attr
                lines.append(f"%{i} = region {region.key()} {_ids(node.args)}")
            elif node.op == "part":
                lines.append(f"%{i} = part %{node.args[0]} {node.attr}")
            else:
                lines.append(f"%{i} = {node.op} {' '.join(f'%{a}' for a in node.args)}")
        for name, port in self.outputs.items():
            lines.append(f"output {name}{list(port.shape)} = {_port_text(port)}")
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
    if len(ids) > LONG_PORT:  # a Jacobian's million ids: their digest, not their digits
        try:
            packed = array("q", ids).tobytes()
        except (TypeError, OverflowError):  # not ids: written out, for verify to refuse
            pass
        else:
            return f"[{len(ids)} ids {hashlib.blake2b(packed, digest_size=20).hexdigest()}]"
    return "[%" + " %".join(map(str, ids)) + "]" if ids else "[]"


def _port_text(port: Port) -> str:
    if port.whole is None:
        return _ids(port.ids)
    return f"whole %{port.whole[0]} from {port.whole[1]}"


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
            elif node.op == "array":
                b.array(*node.attr)
            elif node.op in ("region", "part"):
                b._intern((node.op, node.args, node.attr), node.op, node.args, node.attr)
            else:
                args = node.args
                if OPS[node.op].commutative:
                    args = tuple(sorted(args))  # the key `op()` looks up
                b._intern((node.op, args, None), node.op, node.args, node.attr)
        if len(b.nodes) != len(graph.nodes):
            raise ValueError("graph has duplicate nodes; it was not made by a Builder")
        return b

    # leaves
    def const(self, value: float) -> int:
        value = float(value)
        # Keyed by the exact bits, so 0.0 and -0.0 stay apart and NaN finds itself.
        return self._intern(("const", (), value.hex()), "const", (), value)

    def input(self, name: str, index: int) -> int:
        attr = (name, index)
        key = ("input", (), attr)
        found = self._index.get(key)  # _intern inlined: bodies ask for 10^5 inputs
        return self._new(key, "input", (), attr) if found is None else found

    def array(self, name: str, size: int) -> int:
        """Input `name` as one node of `size` values, which a region's stream reads in place
        (`Region.whole`); its element k, read alone, is `input(name, k)`."""
        return self._intern(("array", (), (name, size)), "array", (), (name, size))

    def leaves(self, nodes) -> list[int]:
        """Leaves of another graph (constants, inputs, arrays) added as they are where new:
        their ids here. A body of 10^5 captures is copied at a table entry each, not a node
        made each (graph/hoist.py rebuilds bodies)."""
        ids = []
        for node in nodes:
            key = ("const", (), node.attr.hex()) if node.op == "const" else \
                (node.op, (), node.attr)
            found = self._index.get(key)
            if found is None:
                found = len(self.nodes)
                if found >= self.max_nodes:
                    raise limits.exceeded("nodes", self.max_nodes,
                                          f"the graph needs more than {self.max_nodes:,} nodes")
                self.nodes.append(node)
                self._index[key] = found
            ids.append(found)
        return ids

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
        if None not in consts:
            folded = _fold(row, consts)
            if folded is not None:
                return self.const(folded)
        for rule in RULES.get(name, ()):
            simpler = rule(self, name, args, consts)
            if simpler is not None:
                return simpler
        if row.commutative and args[0] > args[1]:
            args = (args[1], args[0])
        return self._intern((name, args, None), name, args)

    def _intern(self, key: tuple, op: str, args: tuple = (), attr=None) -> int:
        """The node of `key`, made as `Node(op, args, attr)` only where it is new: most
        constants lowering asks for exist already."""
        found = self._index.get(key)
        if found is not None:
            return found
        return self._new(key, op, args, attr)

    def _new(self, key: tuple, op: str, args: tuple, attr) -> int:
        """Node `key`, not interned yet, made."""
        nodes = self.nodes
        i = len(nodes)
        if i >= self.max_nodes:
            raise limits.exceeded("nodes", self.max_nodes,
                                  f"the graph needs more than {self.max_nodes:,} nodes")
        nodes.append(Node(op, args, attr))
        self._index[key] = i
        return i

    def region(self, region: Region, args) -> int:
        """A region node over `args` (captures, then each stream's elements)."""
        args = tuple(args)
        return self._intern(("region", args, region), "region", args, region)

    def part(self, region: int, k: int) -> int:
        """Value `k` of region node `region` (see `Region`), or element k of an array node."""
        node = self.nodes[region]
        if node.op == "array":
            return self.input(node.attr[0], k)
        args = (region,)
        key = ("part", args, k)
        found = self._index.get(key)  # _intern inlined: 10^5 parts of a loop's values
        return self._new(key, "part", args, k) if found is None else found

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


@collector_paused  # also as the last step of a derivation, in runtime/calls.py
def prune(nodes, inputs: dict[str, Port], outputs: dict[str, Port]) -> Graph:
    """Dead-code removal and renumbering: inputs first, then what the outputs need."""
    live = bytearray(len(nodes))
    for port in outputs.values():
        for i in set(port.roots()):  # a Jacobian's 10^6 ids name a few thousand nodes
            live[i] = 1
    for i in range(len(nodes) - 1, -1, -1):
        if live[i]:
            for a in nodes[i].args:
                live[a] = 1
    order = [i for port in inputs.values() for i in port.roots()]
    seen = set(order)
    order += [i for i in range(len(nodes)) if live[i] and i not in seen]
    # Inputs come first; the rest keep their order, which is topological already.
    new_id = list(range(len(nodes)))
    for new, old in enumerate(order):
        new_id[old] = new
    # The nodes before the first that moves keep their ids, and so their arguments' ids:
    # taken as they are (a rebuilt graph most often keeps all, or all but its last few).
    kept = _unmoved(order)
    new_nodes = list(nodes[:kept])
    renumber = new_id.__getitem__
    for old in order[kept:]:
        node = nodes[old]
        if node.args:
            args = tuple(map(renumber, node.args))
            if args != node.args:  # a node before it moved: most keep their ids
                node = Node(node.op, args, node.attr)
        new_nodes.append(node)
    return Graph(tuple(new_nodes), {n: p.moved(new_id) for n, p in inputs.items()},
                 {n: p.moved(new_id) for n, p in outputs.items()})


def _unmoved(order: list[int]) -> int:
    """How many of `order`'s first entries are their own positions (0, 1, 2, ...)."""
    return next((k for k, old in enumerate(order) if k != old), len(order))
