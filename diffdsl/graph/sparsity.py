"""Sparsity from the graph: which inputs each output depends on, which pairs of inputs meet
in a nonlinear op, and the compressed derivative graphs that colourings of those patterns ask
for (issue 12, "Sparse derivatives").

The columns of a pattern are the elements of the `wrt` inputs, flattened and concatenated in
the order of `wrt`. Dependence is a bit set per node (a Python int: bit k for column k), so
a union is one `|` however many columns there are. A Jacobian's pattern is the bit sets of the
output's elements. A Hessian's pattern is global (Walther, "Computing sparse Hessians with
automatic differentiation", 2008): every nonlinear op that the output's value depends on
through derivatives adds the pairs of columns it joins, a product the pairs across its two
factors, a quotient those of its denominator with both, any other nonlinear op all pairs
among its arguments. Linear ops (+, -, negation; and abs, min, max and select, linear where
their derivative is defined) add none. Patterns are conservative (a superset of the nonzeros
at any point: `(x + y) - y` still depends on y) and exact for the usual shapes.
"""

from __future__ import annotations

import numpy as np

from .autodiff import (
    _gradient_nodes,
    active_nodes,
    forward,
    pick_inputs,
    pick_output,
    require_scalar,
    reverse,
)
from .colouring import Pattern
from .ir import Builder, Graph, Port
from .loops import expand
from .ops import OPS

# How an op passes dependence on: "none" (no pullback: derivative zero), else its row's
# curvature (ops.py).
KIND = {name: "none" if row.pullback is None else row.curvature for name, row in OPS.items()}

COMPRESSED = "compressed"  # the output port of a compressed derivative graph


def columns(graph: Graph, wrt: list[str]) -> list[int]:
    """The input nodes of the pattern's columns, in order."""
    return [i for name in wrt for i in graph.inputs[name].ids]


def _differentiable_args(node):
    kind = KIND[node.op]
    if kind == "none":
        return ()
    return node.args[1:] if kind == "route" else node.args


def dependence(graph: Graph, wrt: list[str], stop: int) -> list[int]:
    """For each node below `stop`, the bit set of the columns its value depends on through
    derivatives (a comparison, `floor` or a select's condition passes no dependence on)."""
    deps = [0] * stop
    for k, node in enumerate(columns(graph, wrt)):
        if node < stop:
            deps[node] = 1 << k
    for i, node in enumerate(graph.nodes[:stop]):
        args = _differentiable_args(node)  # none for inputs and constants
        if len(args) == 1:
            deps[i] = deps[args[0]]
        elif args:
            acc = 0
            for a in args:
                acc |= deps[a]
            deps[i] = acc
    return deps


def bits(x: int) -> np.ndarray:
    """The positions of the set bits of `x`, in increasing order. Only the span from the
    lowest to the highest set bit is unpacked: a band of a long row costs a few bytes."""
    if not x:
        return np.zeros(0, dtype=np.int64)
    low = (x & -x).bit_length() - 1
    x >>= low
    raw = np.frombuffer(x.to_bytes((x.bit_length() + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).astype(np.int64) + low


def jacobian_pattern(graph: Graph, of: str | None = None, wrt=None) -> Pattern:
    """Rows: the output's elements (flattened); columns: the `wrt` inputs' elements."""
    graph = expand(graph)  # patterns are read off the loops written out
    of = pick_output(graph, of)
    wrt = pick_inputs(graph, wrt)
    out = graph.outputs[of]
    n = len(columns(graph, wrt))
    deps = dependence(graph, wrt, max(out.ids) + 1)
    per_row = [bits(deps[i]) for i in out.ids]
    indptr = np.zeros(out.size + 1, dtype=np.int64)
    np.cumsum([len(r) for r in per_row], out=indptr[1:])
    indices = np.concatenate(per_row) if per_row else np.zeros(0, dtype=np.int64)
    return Pattern((out.size, n), indptr, indices)


def _reaching(graph: Graph, top: int) -> bytearray:
    """Nodes whose value reaches node `top` through derivatives: only there can a nonlinear
    op add to the Hessian (a product that only feeds a comparison adds nothing)."""
    live = bytearray(top + 1)
    live[top] = 1
    for i in range(top, -1, -1):
        if live[i]:
            for a in _differentiable_args(graph.nodes[i]):
                live[a] = 1
    return live


def hessian_pattern(graph: Graph, of: str | None = None, wrt=None) -> Pattern:
    """The symmetric pattern of the Hessian of a one-element output over the `wrt` columns."""
    graph = expand(graph)
    of = pick_output(graph, of)
    require_scalar(graph, of, "hessian")
    wrt = pick_inputs(graph, wrt)
    n = len(columns(graph, wrt))
    top = graph.outputs[of].ids[0]
    deps = dependence(graph, wrt, top + 1)
    live = _reaching(graph, top)
    # meets[k]: columns that meet column k in a nonlinear op, in one orientation of each pair
    # (the pattern is made symmetric at the end).
    meets = [0] * n
    for i in range(top + 1):
        node = graph.nodes[i]
        kind = KIND[node.op]
        if not live[i] or kind in ("none", "linear", "route"):
            continue
        if kind == "bilinear":
            a, b = deps[node.args[0]], deps[node.args[1]]
        elif kind == "quotient":
            b = deps[node.args[1]]
            a = deps[node.args[0]] | b
        else:
            a = 0
            for arg in node.args:
                a |= deps[arg]
            b = a
        if not (a and b):
            continue
        if a.bit_count() > b.bit_count():  # walk the smaller side: x * sum(...) is one row
            a, b = b, a
        if a & (a - 1) == 0:  # one column, the usual case
            meets[a.bit_length() - 1] |= b
        else:
            for k in bits(a).tolist():
                meets[k] |= b
    per_row = [bits(b) for b in meets]
    rows = np.repeat(np.arange(n, dtype=np.int64), [len(c) for c in per_row])
    cols = np.concatenate(per_row) if per_row else np.zeros(0, dtype=np.int64)
    return Pattern.from_entries((n, n), rows, cols).symmetric()


# the compressed graphs -------------------------------------------------------------------
def compressed_jacobian(graph: Graph, of: str, wrt: list[str], seeds: list, mode: str) -> Graph:
    """Outputs "value" and, when there are seeds, "compressed" of shape (p, m) in forward mode,
    row c being J times the sum of the columns in `seeds[c]` (one forward sweep each), or of
    shape (p, n) in reverse mode, row c the sum of the rows in `seeds[c]` times J."""
    graph = expand(graph)
    b = Builder.from_graph(graph)
    stop = len(b.nodes)
    cols = columns(graph, wrt)
    active = active_nodes(b, set(cols))
    out = graph.outputs[of]
    one, zero = b.const(1.0), b.const(0.0)
    ids = []
    for group in seeds:
        if mode == "forward":
            t = forward(b, stop, active, {cols[j]: one for j in group})
            ids += [t.get(o, zero) for o in out.ids]
        else:
            ct = reverse(b, stop, active, [(out.ids[i], one) for i in group])
            ids += [ct.get(x, zero) for x in cols]
    width = out.size if mode == "forward" else len(cols)
    return b.graph(dict(graph.inputs), _ports(out, seeds, width, ids))


def compressed_hessian(graph: Graph, of: str, wrt: list[str], seeds: list) -> Graph:
    """Outputs "value" and "compressed" of shape (p, n): row c is the Hessian times the sum of
    the columns in `seeds[c]`, forward over reverse as `autodiff.hvp`, the seeds constant."""
    graph = expand(graph)
    of, wrt, b, grads, stop, active = _gradient_nodes(graph, of, wrt, "hessian")
    cols = columns(graph, wrt)
    gradient = [g for name in wrt for g in grads[name]]
    one, zero = b.const(1.0), b.const(0.0)
    ids = []
    for group in seeds:
        t = forward(b, stop, active, {cols[j]: one for j in group})
        ids += [t.get(g, zero) for g in gradient]
    return b.graph(dict(graph.inputs), _ports(graph.outputs[of], seeds, len(cols), ids))


def _ports(out: Port, seeds: list, width: int, ids: list) -> dict:
    ports = {"value": out}
    if seeds:  # no seed (a derivative that is zero everywhere): no port of size zero
        ports[COMPRESSED] = Port((len(seeds), width), tuple(ids))
    return ports
