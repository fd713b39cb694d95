"""Verification of graphs: `verify(graph)` checks that a graph is well formed. Backends call it
before they compile, and with `DIFFDSL_VERIFY=1` (the test suite sets it) every graph a builder
freezes is checked, after lowering and after each derivative transform."""

from __future__ import annotations

import math
import os
import weakref

from .ops import OPS
from .region import Region

VERIFY_ENV = "DIFFDSL_VERIFY"


class GraphError(ValueError):
    """A graph that is not well formed: a fault of whatever built it, named with its node."""


def verifying() -> bool:
    """Whether every graph a builder freezes is verified (`DIFFDSL_VERIFY=1`)."""
    return os.environ.get(VERIFY_ENV, "") not in ("", "0")


# Graphs already verified, by identity: a graph is immutable, and the same object is checked
# again and again (the reference interpreter verifies at every evaluation, the emitter a graph
# its builder verified, a region's body within every graph holding it). An entry goes with
# its graph, so a new graph at a reused id is checked afresh.
_verified: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

_ARITY = {name: row.arity for name, row in OPS.items()}
_COMMUTATIVE = frozenset(name for name, row in OPS.items() if row.commutative)


def verify(graph):
    """Check that `graph` is well formed and return it; raise `GraphError` at the first fault.

    Every node is an op of the table with the row's arity, whose arguments are earlier nodes;
    constants are floats; no node repeats another; ports have as many node ids as their shape
    has elements, each a node of the graph; every input node is the element of the input port
    its attribute names, at the position the port holds it. Linear in the graph's size, so the
    backends call it before they compile (an emitter fed a malformed graph fails here, not in
    LLVM's verifier). A graph object verified once is not checked again.
    """
    if _verified.get(id(graph)) is graph:
        return graph
    nodes = graph.nodes
    seen: dict[tuple, int] = {}
    for i, node in enumerate(nodes):
        op, args = node.op, node.args
        arity = _ARITY.get(op, -1 if op in ("region", "part", "array") else None)
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
        elif op == "array":
            key = (op, _array_of(graph, i, node))
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
        if port.whole is not None and (nodes[port.whole[0]].op != "array" or port.whole[1]
                                       or nodes[port.whole[0]].attr != (name, port.size)):
            raise GraphError(f"malformed graph: input '{name}' is whole on node "
                             f"{port.whole[0]}, which is not array {name}[{port.size}]")
    for name, port in graph.outputs.items():
        if port.whole is not None:
            node = nodes[port.whole[0]]
            if node.op != "region" or port.whole[1] + port.size > node.attr.size:
                raise GraphError(f"malformed graph: output '{name}' reads values "
                                 f"{port.whole[1]} to {port.whole[1] + port.size - 1} of node "
                                 f"{port.whole[0]}, which has not as many")
    _verified[id(graph)] = graph
    return graph


def _check_looped(nodes, i: int, node) -> None:
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
            size = source.attr.size if source.op == "region" else \
                source.attr[1] if source.op == "array" else -1
            if k + length > size:
                _fault(i, node, f"stream {j} reads values {k} to {k + length - 1} of a region "
                                "or an array")
        at += region.taken(j)


def _input_element(graph, i: int, node) -> tuple:
    attr = node.attr
    if not (type(attr) is tuple and len(attr) == 2 and type(attr[0]) is str
            and type(attr[1]) is int):
        _fault(i, node, f"an input's attribute is (name, index), not {attr!r}")
    port = graph.inputs.get(attr[0])
    if port is None or not 0 <= attr[1] < port.size or (
            port.whole is None and port.ids[attr[1]] != i):
        _fault(i, node, f"it is not element {attr[1]} of an input port '{attr[0]}'")
    return attr


def _array_of(graph, i: int, node) -> tuple:
    """An array node is the whole of an input port of its size, which names it."""
    port = graph.inputs.get(node.attr[0]) if type(node.attr) is tuple else None
    if port is None or port.whole is None or port.whole[0] != i:
        _fault(i, node, f"it is not the whole of an input port: {node.attr!r}")
    return node.attr


def _check_port(kind: str, name: str, port, count: int) -> None:
    shape = port.shape
    if type(shape) is not tuple or not all(type(d) is int and d >= 0 for d in shape):
        raise GraphError(f"malformed graph: {kind} '{name}' has shape {shape!r}, not a tuple of "
                         "dimensions")
    if math.prod(shape) != len(port.ids) and (port.whole is None or port.ids):
        raise GraphError(f"malformed graph: {kind} '{name}' of shape {list(shape)} has "
                         f"{len(port.ids)} node ids, not {math.prod(shape)}")
    roots = port.roots()
    # Checked by builtins over the whole port (a Jacobian's may hold 10^6 ids), then, where
    # that finds a fault, id by id to name the first one.
    if roots and (set(map(type, roots)) == {int} and 0 <= min(roots) and max(roots) < count):
        return
    for i in roots:
        if type(i) is not int or not 0 <= i < count:
            raise GraphError(f"malformed graph: {kind} '{name}' names node {i!r}, and the graph "
                             f"has nodes 0 to {count - 1}")


def _fault(i: int, node, what: str):
    raise GraphError(f"malformed graph: node {i} ({node.op} {list(node.args)}): {what}")
