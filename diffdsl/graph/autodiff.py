"""Derivatives as graph-to-graph transforms (DESIGN.md, decisions 2 and 3).

Each transform extends the primal graph with new nodes made by the pullback rules of the op
table and returns an ordinary `Graph`: hash-consed, simplified, and differentiable again.

Derivative graphs name their ports so they cannot clash with `.dd` names:
    outputs  "value" (the primal output), "d:NAME" (per input), "jvp", "d:NAME:NAME" (Hessian)
    inputs   the primal inputs, plus "seed" ports "@seed" (vjp) and "@t:NAME" (jvp)
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from .ir import Builder, Graph, Port, collector_paused, prune
from .loops import explicit, written_out
from .ports import SEED as SEED
from .ports import d_name as d_name
from .ports import pick_inputs as pick_inputs
from .ports import pick_output as pick_output
from .ports import require_scalar as require_scalar
from .ports import tangent_name as tangent_name
from .reach import Reach
from .reroll import rerolled
from .share_sums import shared
from .sweeps import active_nodes as active_nodes
from .sweeps import forward as forward
from .sweeps import reverse as reverse
from .wholes import gradient_port


def _zero_or(b: Builder, table: dict, i: int) -> int:
    found = table.get(i)
    return b.const(0.0) if found is None else found


def _cotangents(b: Builder, graph: Graph, wrt: list[str], ct: dict,
                wholes: dict | None = None) -> dict[str, Port]:
    """The "d:NAME" ports of a reverse sweep: each input's cotangents, zero where unreached;
    an input read whole gets those of its streams (`wholes`) and of its elements read alone."""
    out = {}
    for name in wrt:
        port = graph.inputs[name]
        if port.whole is None:
            out[d_name(name)] = Port(port.shape, tuple(_zero_or(b, ct, i) for i in port.ids))
            continue
        # Its elements read alone: by the program, or made by a sweep (a scan's stream).
        elements = {node.attr[1]: ct[i] for i, node in enumerate(b.nodes)
                    if i in ct and node.op == "input" and node.attr[0] == name}
        parts = (wholes or {}).get(port.whole[0], [])
        out[d_name(name)] = gradient_port(b, port, parts, elements)
    return out


def _elements(graph: Graph, name: str) -> list[int]:
    """The element nodes of input `name`: all of them, or, for one read whole, those the
    program reads one by one."""
    port = graph.inputs[name]
    if port.whole is None:
        return list(port.ids)
    return [i for i, node in enumerate(graph.nodes)
            if node.op == "input" and node.attr[0] == name]


def _sources(graph: Graph, wrt: list[str]) -> set[int]:
    """The nodes derivatives are taken by: the inputs' elements and arrays."""
    found = {i for name in wrt for i in _elements(graph, name)}
    return found | {graph.inputs[n].whole[0] for n in wrt if graph.inputs[n].whole is not None}


def _asked(graph: Graph, of: str) -> Graph:
    """`graph` with output `of` alone, and only what it needs: a derivative of one output
    of several copies and sweeps none of the others' nodes (an ODE's `y[n - 1]` beside its
    whole state `y`, 338,000 nodes, whose gradient took 1.1 s to start)."""
    if len(graph.outputs) == 1:
        return graph
    return prune(graph.nodes, graph.inputs, {of: graph.outputs[of]})


def _outputs_written(graph: Graph) -> Graph:
    """`graph` with each region whose values are an output (an array kept by rows) written out:
    a Jacobian lists that output's elements anyway, and written out each element's derivatives
    are its own few nodes, where through the loop every seed makes a loop of its own."""
    regions = {p.whole[0] for p in graph.outputs.values()
               if p.whole is not None and graph.nodes[p.whole[0]].op == "region"}
    return written_out(graph, regions) if regions else graph


# the transforms --------------------------------------------------------------------------
@collector_paused
def grad(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """Value and gradient of a one-element output: outputs "value" and "d:NAME"."""
    of = pick_output(graph, of)
    require_scalar(graph, of, "grad")
    wrt = pick_inputs(graph, wrt)
    graph = _asked(graph, of)
    b, stop, active = _sweep_start(graph, wrt)
    out = graph.outputs[of]
    wholes: dict = {}
    ct = reverse(b, stop, active, [(out.ids[0], b.const(1.0))], wholes_out=wholes)
    outputs = {"value": out, **_cotangents(b, graph, wrt, ct, wholes)}
    return rerolled(shared(b.graph(dict(graph.inputs), outputs)))


def _sweep_start(graph: Graph, wrt: list[str]) -> tuple[Builder, int, bytearray]:
    """A builder over the graph, where the derivative's nodes begin, and the active nodes."""
    b = Builder.from_graph(graph)
    return b, len(b.nodes), active_nodes(b, _sources(graph, wrt))


@collector_paused
def vjp(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """Reverse mode with a seed: an extra input "@seed" of the output's shape."""
    of = pick_output(graph, of)
    wrt = pick_inputs(graph, wrt)
    graph = _asked(graph, of)
    if graph.outputs[of].whole is not None:  # seeded one element at a time: listed
        graph = explicit(graph, inputs=False)
    b, stop, active = _sweep_start(graph, wrt)
    out = graph.outputs[of]
    seed_ids = tuple(b.input(SEED, k) for k in range(out.size))
    wholes: dict = {}
    ct = reverse(b, stop, active, list(zip(out.ids, seed_ids, strict=True)), wholes_out=wholes)
    inputs = {**graph.inputs, SEED: Port(out.shape, seed_ids)}
    return rerolled(shared(b.graph(inputs, {"value": out,
                                                  **_cotangents(b, graph, wrt, ct, wholes)})))


@collector_paused
def jvp(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """Forward mode: extra inputs "@t:NAME" (tangents of the inputs); output "jvp"."""
    of = pick_output(graph, of)
    graph = explicit(_asked(graph, of))  # inputs element by element: seeded one at a time
    wrt = pick_inputs(graph, wrt)
    b, stop, active = _sweep_start(graph, wrt)
    inputs, seeds = _tangent_inputs(b, graph, wrt)
    t = forward(b, stop, active, seeds)
    out = graph.outputs[of]
    outputs = {"value": out, "jvp": Port(out.shape, tuple(_zero_or(b, t, i) for i in out.ids))}
    return shared(b.graph(inputs, outputs))


@collector_paused
def jacobian(graph: Graph, of: str | None = None, wrt=None, mode: str = "auto") -> Graph:
    """Jacobian of an output of shape S: outputs "d:NAME" of shape S + T_NAME.

    `mode` is "reverse" (one sweep per output element), "forward" (one per input element) or
    "auto", which takes the one with fewer sweeps.
    """
    of = pick_output(graph, of)
    if graph.outputs[of].shape == () and mode in ("auto", "reverse") and not any(
            graph.inputs[name].whole for name in pick_inputs(graph, wrt)):
        # one reverse sweep by inputs listed: the inputs read whole that no derivative is
        # taken by stay whole (the Jacobian of a loss by its parameters, over data in place)
        return grad(graph, of, wrt)
    # Inputs element by element, seeded one at a time; the other outputs' nodes left out: a
    # sweep would carry every seed through their loops too.
    graph = explicit(_outputs_written(_asked(graph, of)))
    wrt = pick_inputs(graph, wrt)
    out = graph.outputs[of]
    n_in = sum(graph.inputs[name].size for name in wrt)
    if mode == "auto":
        mode = "reverse" if out.size <= n_in else "forward"
    b, stop, active = _sweep_start(graph, wrt)
    one = b.const(1.0)
    # rows[k][input node] = d out_k / d input
    columns: dict[int, dict] = {}
    rows: list[dict] = []
    if mode == "reverse":
        for o in out.ids:
            rows.append(reverse(b, stop, active, [(o, one)]))
    elif mode == "forward":
        reach = Reach(b, stop, active)
        for name in wrt:
            for i in graph.inputs[name].ids:
                columns[i] = forward(b, stop, active, {i: one}, reach=reach)
    else:
        raise UsageError(f"unknown jacobian mode '{mode}'; use auto, forward or reverse")
    outputs = {"value": out}
    zero = b.const(0.0)  # once: a dense Jacobian may have millions of zeros
    for name in wrt:
        port = graph.inputs[name]
        grid = _jacobian_grid(out.ids, port.ids, rows if mode == "reverse" else columns,
                              mode, zero)
        outputs[d_name(name)] = Port(out.shape + port.shape, tuple(grid.ravel().tolist()))
    return shared(b.graph(dict(graph.inputs), outputs))


def _jacobian_grid(outs, ins, sweeps, mode: str, zero: int) -> np.ndarray:
    """The node of each d out[k] / d in[c]: `sweeps` are the reverse sweeps by output
    position (`rows`) or the forward ones by input node (`columns`), each a dict node ->
    derivative node; `zero` where a sweep has none. Filled from the entries present, not
    tried element by element: a Jacobian of 10^6 elements is mostly zeros."""
    grid = np.full((len(outs), len(ins)), zero, dtype=np.int64)
    if mode == "reverse":
        lookup, across = {i: c for c, i in enumerate(ins)}, enumerate(sweeps)
    else:
        lookup = {}
        for k, o in enumerate(outs):  # an output may hold one node at several places
            lookup.setdefault(o, []).append(k)
        across = ((c, sweeps[i]) for c, i in enumerate(ins))
    for at, sweep in across:
        for node, value in sweep.items() if len(sweep) < len(lookup) else \
                ((node, sweep[node]) for node in lookup if node in sweep):
            place = lookup.get(node)
            if place is None:
                continue
            if mode == "reverse":
                grid[at, place] = value
            else:
                grid[place, at] = value
    return grid


@collector_paused
def hessian(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """Forward over reverse: outputs "d:A:B" of shape T_A + T_B for each pair of inputs.

    The reverse sweep builds the gradient as nodes; one forward sweep per input element over
    the extended graph then gives a column of the Hessian.
    """
    of = pick_output(graph, of)
    graph = explicit(_asked(graph, of))  # inputs element by element: seeded one at a time
    of, wrt, b, grads, stop, active = _gradient_nodes(graph, of, wrt, "hessian")
    out = graph.outputs[of]
    one = b.const(1.0)
    reach = Reach(b, stop, active)
    columns = {j: forward(b, stop, active, {j: one}, reach=reach)
               for j in sorted(_sources(graph, wrt))}
    outputs = {"value": out}
    for a in wrt:
        for c in wrt:
            port_c = graph.inputs[c]
            ids = tuple(_zero_or(b, columns[j], gi) for gi in grads[a] for j in port_c.ids)
            outputs[d_name(a, c)] = Port(graph.inputs[a].shape + port_c.shape, ids)
    return shared(b.graph(dict(graph.inputs), outputs))


@collector_paused
def hvp(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """Hessian times a vector, forward over reverse without forming the Hessian: extra inputs
    "@t:NAME" (the vector, by input), outputs "value" and "d:NAME" (H v for each input)."""
    of = pick_output(graph, of)
    graph = explicit(_asked(graph, of))  # inputs element by element: seeded one at a time
    of, wrt, b, grads, stop, active = _gradient_nodes(graph, of, wrt, "hvp")
    inputs, seeds = _tangent_inputs(b, graph, wrt)
    t = forward(b, stop, active, seeds)
    outputs = {"value": graph.outputs[of]}
    for name in wrt:
        outputs[d_name(name)] = Port(graph.inputs[name].shape,
                                     tuple(_zero_or(b, t, g) for g in grads[name]))
    return shared(b.graph(inputs, outputs))


def _tangent_inputs(b: Builder, graph: Graph, wrt: list[str]) -> tuple[dict, dict]:
    """The graph's inputs plus "@t:NAME" for each input in `wrt`, and the forward seeds
    (input element -> its tangent input)."""
    inputs = dict(graph.inputs)
    seeds = {}
    for name in wrt:
        port = graph.inputs[name]
        ids = tuple(b.input(tangent_name(name), k) for k in range(port.size))
        inputs[tangent_name(name)] = Port(port.shape, ids)
        seeds.update(zip(port.ids, ids, strict=True))
    return inputs, seeds


def _gradient_nodes(graph: Graph, of, wrt, what: str) -> tuple:
    """For second-order transforms: the output and inputs picked, a builder extending `graph`
    with its reverse sweep, the gradient node ids by input, and, for a forward sweep over
    that, the node count to stop at and the active nodes."""
    of = pick_output(graph, of)
    require_scalar(graph, of, what)
    wrt = pick_inputs(graph, wrt)
    b = Builder.from_graph(graph)
    sources = _sources(graph, wrt)
    out = graph.outputs[of]
    ct = reverse(b, len(b.nodes), active_nodes(b, sources), [(out.ids[0], b.const(1.0))])
    grads = {name: [_zero_or(b, ct, i) for i in graph.inputs[name].ids] for name in wrt}
    return of, wrt, b, grads, len(b.nodes), active_nodes(b, sources)
