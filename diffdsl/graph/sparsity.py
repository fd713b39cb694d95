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
    d_name,
    forward,
    pick_inputs,
    pick_output,
    require_scalar,
    reverse,
)
from .colouring import Pattern, diagonal_colouring, groups
from .fuse import fuse_siblings
from .ir import Builder, Graph, Port, collector_paused
from .loops import expand, explicit
from .pattern_walk import bits, summarisable, walk
from .ports import g_name
from .reach import Reach
from .share_sums import shared

COMPRESSED = "compressed"  # the output port of a compressed derivative graph


def columns(graph: Graph, wrt: list[str]) -> list[int]:
    """The input nodes of the pattern's columns, in order."""
    return [i for name in wrt for i in graph.inputs[name].ids]


def walkable(graph: Graph, listed=True) -> Graph:
    """`graph` with its ports listed (its inputs as `explicit`'s `listed` says), its loops kept
    where pattern_walk can read them in one walk of their bodies, else written out."""
    graph = explicit(graph, listed)
    return graph if summarisable(graph) else expand(graph)


def _seeds(graph: Graph, wrt: list[str]) -> dict[int, int]:
    return {node: 1 << k for k, node in enumerate(columns(graph, wrt))}


@collector_paused
def jacobian_pattern(graph: Graph, of: str | None = None, wrt=None) -> Pattern:
    """Rows: the output's elements (flattened); columns: the `wrt` inputs' elements."""
    graph = walkable(graph)
    of = pick_output(graph, of)
    wrt = pick_inputs(graph, wrt)
    out = graph.outputs[of]
    n = len(columns(graph, wrt))
    deps = walk(graph, _seeds(graph, wrt), [], None)
    per_row = [bits(deps[i]) for i in out.ids]
    indptr = np.zeros(out.size + 1, dtype=np.int64)
    np.cumsum([len(r) for r in per_row], out=indptr[1:])
    indices = np.concatenate(per_row) if per_row else np.zeros(0, dtype=np.int64)
    return Pattern((out.size, n), indptr, indices)


@collector_paused
def hessian_pattern(graph: Graph, of: str | None = None, wrt=None) -> Pattern:
    """The symmetric pattern of the Hessian of a one-element output over the `wrt` columns.
    Loops stay loops (pattern_walk.py), except where one carries a state or streams another
    loop's values: then the graph is written out first. The other inputs are data, read in
    place (`explicit` lists the `wrt` inputs alone)."""
    wrt = pick_inputs(graph, wrt)
    graph = walkable(graph, set(wrt))
    of = pick_output(graph, of)
    require_scalar(graph, of, "hessian")
    n = len(columns(graph, wrt))
    top = graph.outputs[of].ids[0]
    pairs: set = set()
    walk(graph, _seeds(graph, wrt), [top], pairs)
    # meets[k]: columns that meet column k in a nonlinear op, in one orientation of each pair
    # (the pattern is made symmetric at the end).
    meets = [0] * n
    for a, b in pairs:
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
@collector_paused
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
    reach = Reach(b, stop, active) if mode == "forward" else None
    for group in seeds:
        if mode == "forward":
            t = forward(b, stop, active, {cols[j]: one for j in group}, reach=reach)
            ids += [t.get(o, zero) for o in out.ids]
        else:
            ct = reverse(b, stop, active, [(out.ids[i], one) for i in group])
            ids += [ct.get(x, zero) for x in cols]
    width = out.size if mode == "forward" else len(cols)
    return b.graph(dict(graph.inputs), _ports(out, seeds, width, ids))


@collector_paused
def compressed_hessian(graph: Graph, of: str, wrt: list[str], seeds: list) -> Graph:
    """Outputs "value" and "compressed" of shape (p, n): row c is the Hessian times the sum of
    the columns in `seeds[c]`, forward over reverse as `autodiff.hvp`, the seeds constant.
    Loops stay loops: each sweep is a loop over the same iterations, and the inputs not in
    `wrt` are read in place."""
    graph = explicit(graph, set(pick_inputs(graph, wrt)))
    of, wrt, b, grads, stop, active = _gradient_nodes(graph, of, wrt, "hessian")
    cols = columns(graph, wrt)
    gradient = [g for name in wrt for g in grads[name]]
    one, zero = b.const(1.0), b.const(0.0)
    ids, reach = [], Reach(b, stop, active)
    for group in seeds:
        t = forward(b, stop, active, {cols[j]: one for j in group}, reach=reach)
        ids += [t.get(g, zero) for g in gradient]
    ports = _ports(graph.outputs[of], seeds, len(cols), ids)
    return shared(b.graph(dict(graph.inputs), ports))


@collector_paused
def hessian_diagonal(graph: Graph, of: str | None = None, wrt=None,
                     with_grad: bool = False) -> Graph:
    """Outputs "value" and "d:NAME" of each input's shape: d²f/dx_k² elementwise. Columns
    whose rows of the Hessian's pattern hold none of each other share a forward sweep (a
    colouring of the pattern's graph): the sweep of the sum of a colour's columns gives
    H[k, k] at row k of each. A Newton step's diagonal of a separable sum (k-means' centroids,
    a sum of squares) is one sweep, however many columns; a dense Hessian, one per column.
    A graph with a scan gets one per column too: its pattern would write the scan out. The
    other inputs are read in place, as data (k-means' points, by which the Newton step is
    not taken). `with_grad`: outputs "g:NAME", the gradient, too: the sweeps' primal values,
    so the graph computes them already (a Newton step in one pass, not two)."""
    wrt = pick_inputs(graph, wrt)
    graph = explicit(graph, set(wrt))
    of = pick_output(graph, of)
    if summarisable(graph):
        colours = diagonal_colouring(hessian_pattern(graph, of, wrt))
    else:
        colours = np.arange(len(columns(graph, wrt)), dtype=np.int64)
    of, wrt, b, grads, stop, active = _gradient_nodes(graph, of, wrt, "hessian")
    cols = columns(graph, wrt)
    one, zero = b.const(1.0), b.const(0.0)
    reach = Reach(b, stop, active)
    sweeps = [forward(b, stop, active, {cols[j]: one for j in group.tolist()}, reach=reach)
              for group in groups(colours)]
    gradient = [g for name in wrt for g in grads[name]]
    diagonal = [zero if c < 0 else sweeps[c].get(g, zero)
                for g, c in zip(gradient, colours.tolist(), strict=True)]
    outputs, at = {"value": graph.outputs[of]}, 0
    for name in wrt:
        port = graph.inputs[name]
        outputs[d_name(name)] = Port(port.shape, tuple(diagonal[at:at + port.size]))
        if with_grad:
            outputs[g_name(name)] = Port(port.shape, tuple(gradient[at:at + port.size]))
        at += port.size
    made = shared(b.graph(dict(graph.inputs), outputs))
    return fuse_siblings(made) if with_grad else made  # the gradient's loop and its tangent's


def _ports(out: Port, seeds: list, width: int, ids: list) -> dict:
    ports = {"value": out}
    if seeds:  # no seed (a derivative that is zero everywhere): no port of size zero
        ports[COMPRESSED] = Port((len(seeds), width), tuple(ids))
    return ports
