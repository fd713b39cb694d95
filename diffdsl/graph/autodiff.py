"""Derivatives as graph-to-graph transforms (DESIGN.md, decisions 2 and 3).

Each transform extends the primal graph with new nodes made by the pullback rules of the op
table and returns an ordinary `Graph`: hash-consed, simplified, and differentiable again.

Derivative graphs name their ports so they cannot clash with `.dd` names:
    outputs  "value" (the primal output), "d:NAME" (per input), "jvp", "d:NAME:NAME" (Hessian)
    inputs   the primal inputs, plus "seed" ports "@seed" (vjp) and "@t:NAME" (jvp)
"""

from __future__ import annotations

from ..errors import UsageError
from .ir import Builder, Graph, Port
from .ops import OPS
from .ports import SEED as SEED
from .ports import d_name as d_name
from .ports import pick_inputs as pick_inputs
from .ports import pick_output as pick_output
from .ports import require_scalar as require_scalar
from .ports import tangent_name as tangent_name


# the sweeps ------------------------------------------------------------------------------
def active_nodes(b: Builder, sources: set[int], start: int = 0) -> bytearray:
    """Nodes whose value depends, differentiably, on a node in `sources`; no source lies below
    `start`, so the walk begins there (a derivative inside a program, of a few new nodes at
    the end of a large builder)."""
    active = bytearray(len(b.nodes))
    nodes = b.nodes
    for i in range(start, len(nodes)):
        node = nodes[i]
        if i in sources:
            active[i] = 1
        elif node.args and OPS[node.op].pullback is not None:
            active[i] = any(active[a] for a in node.args)
    return active


def reverse(b: Builder, stop: int, active: bytearray, seeds: list[tuple[int, int]],
            start: int = 0) -> dict:
    """Reverse sweep over nodes in [start, stop): cotangent node of every node reached (nodes
    below `start` are not active, as for `active_nodes`).

    Beside each cotangent the sweep keeps a guard: the condition under which the node's value
    reaches a seed through the branches taken (None: always). Where a guard is false the
    cotangent is exactly 0, and the parts a pullback sends on are wrapped in
    `select(guard, part, 0)`, so a partial derivative that is infinite or NaN in the branch not
    taken never meets that 0, whatever the pattern of uses (sums, products, a value used in
    several branches, nested selects). Guards are built only below a dynamic select, min or max.
    """
    ct: dict[int, int] = {}
    guard: dict[int, int | None] = {}
    for node_id, seed in seeds:
        if active[node_id]:
            ct[node_id] = seed if node_id not in ct else b.add(ct[node_id], seed)
            guard[node_id] = None
    for i in range(stop - 1, start - 1, -1):
        c = ct.get(i)
        if c is None:
            continue
        node = b.nodes[i]
        row = OPS[node.op]
        if row.pullback is None or not node.args:
            continue
        parts = row.pullback(b, node.args, i, c)
        here = guard[i]
        for a, part in zip(node.args, parts, strict=True):
            if part is None or not active[a] or b.value(part) == 0.0:
                continue
            edge = here
            if row.routes:  # the pullback's select says where the cotangent goes
                edge = _both(b, here, _routed_condition(b, part))
            elif here is not None and not row.copies:
                part = b.select(here, part, b.const(0.0))
            ct[a] = part if a not in ct else b.add(ct[a], part)
            guard[a] = edge if a not in guard else _either(b, guard[a], edge)
    return ct


def _routed_condition(b: Builder, part: int) -> int | None:
    """The condition under which a routing pullback's `select(c, ct, 0)` passes `ct` on."""
    node = b.nodes[part]
    if node.op != "select":
        return None
    cond, taken, other = node.args
    if b.value(other) == 0.0:
        return cond
    if b.value(taken) == 0.0:
        return b.op("not", cond)
    return None


def _both(b: Builder, g: int | None, h: int | None) -> int | None:
    if g is None or g == h:
        return h
    if h is None:
        return g
    return b.op("and", g, h)


def _either(b: Builder, g: int | None, h: int | None) -> int | None:
    """`g or h`, seeing the common case of a value used in both branches of one select:
    `c or not c` is always, and `(g and c) or (g and not c)` is `g`."""
    if g is None or h is None or _complements(b, g, h):
        return None
    if g == h:
        return g
    left, right = b.nodes[g], b.nodes[h]
    if left.op == "and" and right.op == "and":
        for k in (0, 1):
            for m in (0, 1):
                if left.args[k] == right.args[m] and \
                        _complements(b, left.args[1 - k], right.args[1 - m]):
                    return left.args[k]
    return b.op("or", g, h)


def _complements(b: Builder, g: int, h: int) -> bool:
    """Whether one condition is `not` of the other."""
    left, right = b.nodes[g], b.nodes[h]
    return (left.op == "not" and left.args[0] == h) or (right.op == "not" and right.args[0] == g)


def forward(b: Builder, stop: int, active: bytearray, tangents: dict[int, int],
            start: int = 0) -> dict:
    """Forward sweep over nodes in [start, stop): tangent node of every node reached.

    The mirror of `reverse`'s guards: beside each tangent, the condition under which it may be
    nonzero (None: always). A select's tangent takes the branch's tangent, so where the branch
    taken carries none the tangent is exactly 0; a partial derivative that is infinite there
    (`cbrt'(0)` of a value the select made constant) must not meet that 0 as 0 * inf = NaN,
    so each part a guarded tangent sends on is wrapped in `select(guard, part, 0)`.
    """
    t = dict(tangents)
    guard: dict[int, int | None] = dict.fromkeys(tangents)
    for i in range(start, stop):
        if i in t or not active[i]:
            continue
        node = b.nodes[i]
        row = OPS[node.op]
        if row.pullback is None or not node.args:
            continue
        ts = [t.get(a) for a in node.args]
        if all(x is None for x in ts):
            continue
        gs = [guard.get(a) if x is not None else None for a, x in zip(node.args, ts, strict=True)]
        if row.tangent is not None:
            result = row.tangent(b, node.args, i, ts)
            here = _routed_guard(b, result, ts, gs) if row.routes else _any_guard(b, ts, gs)
        else:
            result = None
            for k, tk in enumerate(ts):
                if tk is None:
                    continue
                part = row.pullback(b, node.args, i, tk)[k]
                if part is None or b.value(part) == 0.0:
                    continue
                if gs[k] is not None and not row.copies:
                    part = b.select(gs[k], part, b.const(0.0))
                result = part if result is None else b.add(result, part)
            here = _any_guard(b, ts, gs)
        if result is not None and b.value(result) != 0.0:
            t[i] = result
            guard[i] = here
    return t


def _any_guard(b: Builder, ts: list, gs: list) -> int | None:
    """The guard of a sum of parts: nonzero where any part may be."""
    present = [g for x, g in zip(ts, gs, strict=True) if x is not None]
    out = present[0]
    for g in present[1:]:
        out = _either(b, out, g)
    return out


def _routed_guard(b: Builder, result: int, ts: list, gs: list) -> int | None:
    """The guard of a routing op's tangent `select(c, x, y)`: c where x may be nonzero, not c
    where y may be."""
    node = b.nodes[result]
    if node.op != "select":
        return _any_guard(b, ts, gs)
    cond, x, y = node.args

    def side(v):  # False: the branch carries no tangent
        if b.value(v) == 0.0:
            return False
        return next((g for tk, g in zip(ts, gs, strict=True) if tk == v), None)

    parts = [_both(b, c, g) for c, g in ((cond, side(x)), (b.op("not", cond), side(y)))
             if g is not False]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else _either(b, parts[0], parts[1])


def _zero_or(b: Builder, table: dict, i: int) -> int:
    found = table.get(i)
    return b.const(0.0) if found is None else found


def _cotangents(b: Builder, graph: Graph, wrt: list[str], ct: dict) -> dict[str, Port]:
    """The "d:NAME" ports of a reverse sweep: each input's cotangents, zero where unreached."""
    return {d_name(name): Port(graph.inputs[name].shape,
                               tuple(_zero_or(b, ct, i) for i in graph.inputs[name].ids))
            for name in wrt}


def _sources(graph: Graph, wrt: list[str]) -> set[int]:
    return {i for name in wrt for i in graph.inputs[name].ids}


# the transforms --------------------------------------------------------------------------
def grad(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """Value and gradient of a one-element output: outputs "value" and "d:NAME"."""
    of = pick_output(graph, of)
    require_scalar(graph, of, "grad")
    wrt = pick_inputs(graph, wrt)
    b, stop, active = _sweep_start(graph, wrt)
    out = graph.outputs[of]
    ct = reverse(b, stop, active, [(out.ids[0], b.const(1.0))])
    return b.graph(dict(graph.inputs), {"value": out, **_cotangents(b, graph, wrt, ct)})


def _sweep_start(graph: Graph, wrt: list[str]) -> tuple[Builder, int, bytearray]:
    """A builder over the graph, where the derivative's nodes begin, and the active nodes."""
    b = Builder.from_graph(graph)
    return b, len(b.nodes), active_nodes(b, _sources(graph, wrt))


def vjp(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """Reverse mode with a seed: an extra input "@seed" of the output's shape."""
    of = pick_output(graph, of)
    wrt = pick_inputs(graph, wrt)
    b, stop, active = _sweep_start(graph, wrt)
    out = graph.outputs[of]
    seed_ids = tuple(b.input(SEED, k) for k in range(out.size))
    ct = reverse(b, stop, active, list(zip(out.ids, seed_ids, strict=True)))
    inputs = {**graph.inputs, SEED: Port(out.shape, seed_ids)}
    return b.graph(inputs, {"value": out, **_cotangents(b, graph, wrt, ct)})


def jvp(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """Forward mode: extra inputs "@t:NAME" (tangents of the inputs); output "jvp"."""
    of = pick_output(graph, of)
    wrt = pick_inputs(graph, wrt)
    b, stop, active = _sweep_start(graph, wrt)
    inputs, seeds = _tangent_inputs(b, graph, wrt)
    t = forward(b, stop, active, seeds)
    out = graph.outputs[of]
    outputs = {"value": out, "jvp": Port(out.shape, tuple(_zero_or(b, t, i) for i in out.ids))}
    return b.graph(inputs, outputs)


def jacobian(graph: Graph, of: str | None = None, wrt=None, mode: str = "auto") -> Graph:
    """Jacobian of an output of shape S: outputs "d:NAME" of shape S + T_NAME.

    `mode` is "reverse" (one sweep per output element), "forward" (one per input element) or
    "auto", which takes the one with fewer sweeps.
    """
    of = pick_output(graph, of)
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
        for name in wrt:
            for i in graph.inputs[name].ids:
                columns[i] = forward(b, stop, active, {i: one})
    else:
        raise UsageError(f"unknown jacobian mode '{mode}'; use auto, forward or reverse")
    outputs = {"value": out}
    zero = b.const(0.0)  # once: a dense Jacobian may have millions of zeros
    for name in wrt:
        port = graph.inputs[name]
        ids = []
        for k, o in enumerate(out.ids):
            for i in port.ids:
                if mode == "reverse":
                    ids.append(rows[k].get(i, zero))
                else:
                    ids.append(columns[i].get(o, zero))
        outputs[d_name(name)] = Port(out.shape + port.shape, tuple(ids))
    return b.graph(dict(graph.inputs), outputs)


def hessian(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """Forward over reverse: outputs "d:A:B" of shape T_A + T_B for each pair of inputs.

    The reverse sweep builds the gradient as nodes; one forward sweep per input element over
    the extended graph then gives a column of the Hessian.
    """
    of = pick_output(graph, of)
    require_scalar(graph, of, "hessian")
    wrt = pick_inputs(graph, wrt)
    b = Builder.from_graph(graph)
    sources = _sources(graph, wrt)
    out = graph.outputs[of]
    ct = reverse(b, len(b.nodes), active_nodes(b, sources), [(out.ids[0], b.const(1.0))])
    grads = {name: [_zero_or(b, ct, i) for i in graph.inputs[name].ids] for name in wrt}
    stop = len(b.nodes)
    active = active_nodes(b, sources)
    one = b.const(1.0)
    columns = {j: forward(b, stop, active, {j: one}) for j in sorted(sources)}
    outputs = {"value": out}
    for a in wrt:
        for c in wrt:
            port_c = graph.inputs[c]
            ids = tuple(_zero_or(b, columns[j], gi) for gi in grads[a] for j in port_c.ids)
            outputs[d_name(a, c)] = Port(graph.inputs[a].shape + port_c.shape, ids)
    return b.graph(dict(graph.inputs), outputs)


def hvp(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """Hessian times a vector, forward over reverse without forming the Hessian: extra inputs
    "@t:NAME" (the vector, by input), outputs "value" and "d:NAME" (H v for each input)."""
    of, wrt, b, grads, stop, active = _gradient_nodes(graph, of, wrt, "hvp")
    inputs, seeds = _tangent_inputs(b, graph, wrt)
    t = forward(b, stop, active, seeds)
    outputs = {"value": graph.outputs[of]}
    for name in wrt:
        outputs[d_name(name)] = Port(graph.inputs[name].shape,
                                     tuple(_zero_or(b, t, g) for g in grads[name]))
    return b.graph(inputs, outputs)


def hessian_diagonal(graph: Graph, of: str | None = None, wrt=None) -> Graph:
    """The Hessian's diagonal: outputs "d:NAME" of each input's shape, d²f/dx_k² elementwise;
    one forward sweep per element, keeping only the element's own second derivative."""
    of, wrt, b, grads, stop, active = _gradient_nodes(graph, of, wrt, "hessian")
    one = b.const(1.0)
    outputs = {"value": graph.outputs[of]}
    for name in wrt:
        ids = graph.inputs[name].ids
        outputs[d_name(name)] = Port(graph.inputs[name].shape, tuple(
            _zero_or(b, forward(b, stop, active, {j: one}), g)
            for j, g in zip(ids, grads[name], strict=True)))
    return b.graph(dict(graph.inputs), outputs)


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
