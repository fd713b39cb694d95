"""Loops that run several iterations at once: a loop whose body takes a running power of
its index (llvm_powers: `a ** (i + b)`, the last power times a) is a chain of dependent
products from one iteration to the next (about 4 cycles each), which also keeps LLVM's loop
vectoriser off the loop; its sums add one term an iteration, another such chain. The
processor, which could run several chains side by side, waits on one. llsq's inner loops,
`sum(x[j] * t ** j)` over 128 coefficients, ran at that pace, as GradBench's C++ does.

`interleave` gives such a loop a body of `LANES` copies of its own, iteration k*i + l in
copy l, over n / k iterations: each copy's sums are added together before they join the
sum (the chain is an add per k iterations), and the running power becomes one power
`a ** (k*i + b)`, times a, a*a, ... in the other copies, a product per k iterations. A
stream's window widens to the k iterations' windows, and the map rows of the k iterations
lie where they lay, one after another: the region's values are where they were, and no
reader changes.

Only the emitted code changes (cpu.emit calls this on the graph it compiles): sums add
their terms in another order, which regions leave free (graph/loops.py), and each power
stays within `llvm_powers.FRESH` roundings of pow (at step 4: at most 31 products of 4
roundings, 3 for the last copy's a*a*a, and pow's own). A loop is taken where its body is a
few dozen operations with a running power of step 1 and without a loop of its own, from 8
iterations; where k divides no trip count, the last n mod 4 iterations run as a loop of
their own (`_split`), unless a port or a stream reads the loop's values as a run. min, max,
a scan's state and a gated loop (one iteration) are left as they are, and so is every loop
without a running power, which the vectoriser takes (`BODY`).
"""

from __future__ import annotations

from ..graph.ir import Builder, Graph, Node, Port
from ..graph.loops import LEAVES, has_regions, inline, leaf
from ..graph.region import Region
from .llvm_loops import gate
from .llvm_powers import affine, fixed_nodes, running_powers, still_streams

LANES = (4, 2)  # copies a body is given: the first that divides the trip count
# Operations in a body taken. Measured on Horner polynomials of x[j] in a sum over 4,096
# iterations: beside a running power, four at a time took 0.62 to 0.78 of the time up to 80
# operations (0.88 at 160), the gradient the same; without one, LLVM's loop vectoriser
# takes the loop itself, and its copies, which it does not, took up to 7 times as long.
BODY = 40


def interleave(graph: Graph, t: str) -> Graph:
    """`graph` with each loop that gains by it running `LANES` iterations at once (module
    docstring), in every body; `graph` itself where none does."""
    if not has_regions(graph):
        return graph
    nodes = list(graph.nodes)
    whole = _read_whole(graph)
    split = set()  # loops whose last n % 4 iterations run apart, after the rest four at once
    for i, node in enumerate(nodes):
        if node.op == "region":
            region = _interleaved(node.attr, t)
            if region is not node.attr:
                nodes[i] = Node("region", node.args, region)
            elif i not in whole and _taken(region, t) and region.n >= 2 * LANES[0]:
                split.add(i)  # taken, but no k divides its trip count
    if split:
        return _split(graph, nodes, split, t)
    if all(a is b for a, b in zip(nodes, graph.nodes, strict=True)):
        return graph
    return Graph(tuple(nodes), graph.inputs, graph.outputs)


def lanes(region: Region, t: str) -> int:
    """How many iterations at once `region`'s loop is to run, all of them: 1 where it is
    left as it is (or, where no k divides its trip count, split: `interleave`)."""
    if not _taken(region, t):
        return 1
    return next((k for k in LANES if region.n % k == 0 and region.n >= 2 * k), 1)


def _taken(region: Region, t: str) -> bool:
    body = region.body
    if not LANES or region.carry or region.winners or has_regions(body) or gate(region) is not None:
        return False
    if sum(node.op not in ("input", "const") for node in body.nodes) > BODY:
        return False
    # A running power of step 1 (else the vectoriser takes the loop: BODY's comment), and
    # none of another step: its copies would call pow. A base of 0.0 or -0.0 is left to pow
    # too: x * 0 = 0 (the builder's rule) would lose the sign of a product by -0.0.
    powers = running_powers(body, t, still_streams(region))
    bases = [body.nodes[body.nodes[i].args[0]] for i in powers]
    return bool(powers) and all(step == 1 for step in powers.values()) and not any(
        base.op == "const" and base.attr == 0.0 for base in bases)


def _interleaved(region: Region, t: str) -> Region:
    if has_regions(region.body):
        body = interleave(region.body, t)
        return region if body is region.body else region.with_body(body)
    k = lanes(region, t)
    if k == 1:
        return region
    streams = tuple((length, stride * k, offset) for length, stride, offset in region.streams)
    return Region(region.n // k, _copies(region, k, t), region.captures, streams,
                  region.combine, 0, region.whole)


def _read_whole(graph: Graph) -> set[int]:
    """The regions of `graph` read otherwise than value by value (a stream or a port that
    reads a run of their values): their values must stay in one region's row."""
    found = {p.whole[0] for p in (*graph.inputs.values(), *graph.outputs.values()) if p.whole}
    for node in graph.nodes:
        if node.op != "part":
            found.update(a for a in node.args if graph.nodes[a].op == "region")
    return found


def _split(graph: Graph, nodes: list, split: set, t: str) -> Graph:
    """`graph` (its regions `nodes`) with each loop of `split` as two: its first 4q
    iterations four at a time, then the last n - 4q, and each value read from the one that
    computes it (a sum from both, added)."""
    k = LANES[0]
    b = Builder(max_nodes=2 * len(nodes) + (1 << 16))
    ids: list = [0] * len(nodes)
    pieces = {}
    for i, node in enumerate(nodes):
        if node.op in LEAVES:
            ids[i] = leaf(b, node)
        elif node.op == "region" and i in split:
            r, args = node.attr, [ids[a] for a in node.args]
            head = r.n - r.n % k
            first = Region(head, r.body, r.captures, r.streams, r.combine, 0, r.whole)
            rest = Region(r.n - head, _shifted(r.body, head), r.captures,
                          tuple((n, s, o + s * head) for n, s, o in r.streams), r.combine, 0,
                          r.whole)
            pieces[i] = (b.region(_interleaved(first, t), args), b.region(rest, args), r, head)
        elif node.op == "region":
            ids[i] = b.region(node.attr, [ids[a] for a in node.args])
        elif node.op == "part" and node.args[0] in pieces:
            first, rest, r, head = pieces[node.args[0]]
            v = node.attr
            if v < r.sums:
                ids[i] = b.op("add", b.part(first, v), b.part(rest, v))
            else:
                ids[i] = b.part(first, v) if v < r.sums + head * r.maps else \
                    b.part(rest, v - head * r.maps)
        elif node.op == "part":
            ids[i] = b.part(ids[node.args[0]], node.attr)
        else:
            ids[i] = b.op(node.op, *(ids[a] for a in node.args))
    return b.graph({n: p.moved(ids) for n, p in graph.inputs.items()},
                   {n: p.moved(ids) for n, p in graph.outputs.items()})


def _shifted(body: Graph, by: int) -> Graph:
    """`body` with its index read as `by` more (the last iterations of a loop, run apart)."""
    b = Builder(max_nodes=2 * len(body.nodes) + (1 << 16))
    given = {name: [b.input(name, e) for e in range(port.size)]
             for name, port in body.inputs.items()}
    inputs = {name: Port(port.shape, tuple(given[name])) for name, port in body.inputs.items()}
    given["@i"] = [b.op("add", given["@i"][0], b.const(by))]
    outputs = inline(b, body, given)
    return b.graph(inputs, {name: Port(body.outputs[name].shape, tuple(ids))
                            for name, ids in outputs.items()})


def _copies(region: Region, k: int, t: str) -> Graph:
    """The body of `region` run `k` times, iteration k*i + l in copy l."""
    body = region.body
    b = Builder(max_nodes=max(4 * k * len(body.nodes), 1 << 16))
    index = b.input("@i", 0)
    steps = [stride for _, stride, _ in region.streams]
    inputs = {}
    for name, port in body.inputs.items():
        if name == "@i":
            inputs[name] = Port(port.shape, (index,))
        elif name == "@c":
            inputs[name] = Port(port.shape, tuple(b.input(name, e) for e in range(port.size)))
        else:  # "@s{j}": the windows of k iterations, one stride apart
            width = (k - 1) * steps[int(name[2:])] + port.size
            inputs[name] = Port((width,), tuple(b.input(name, e) for e in range(width)))
    # Powers of the index `a ** (i + b)`, b of either sign: in each copy whose exponent
    # k*i + l + b is never below 0 (from the first, `first`), the first such copy's power
    # (a running power of step k) times a ** (l - first); below, pow as it was.
    fixed, at = fixed_nodes(body, still_streams(region))
    powers = {}
    for i, node in enumerate(body.nodes if t == "double" else ()):
        step = affine(body.nodes, node.args[1], at) if node.op == "pow" and \
            fixed[node.args[0]] else None
        if step is not None and step[0] == 1:
            powers[i] = step[1]
    copies = []
    for lane in range(k):
        ids = [0] * len(body.nodes)
        for i, node in enumerate(body.nodes):
            if node.op == "input":
                name, e = node.attr
                if name == "@i":
                    ids[i] = b.op("add", b.op("mul", index, b.const(k)), b.const(lane))
                elif name == "@c":
                    ids[i] = b.input(name, e)
                else:
                    ids[i] = b.input(name, lane * steps[int(name[2:])] + e)
            elif node.op == "const":
                ids[i] = b.const(node.attr)
            elif i in powers and lane >= -powers[i]:
                first = max(0, -powers[i])
                base = ids[node.args[0]]
                if lane == first:  # a running power of step k (llvm_powers)
                    exponent = b.op("add", b.op("mul", index, b.const(k)),
                                    b.const(lane + powers[i]))
                    ids[i] = b.op("pow", base, exponent)
                    continue
                factor = base
                for _ in range(lane - first - 1):
                    factor = b.op("mul", factor, base)
                ids[i] = b.op("mul", copies[first][i], factor)
            else:
                ids[i] = b.op(node.op, *(ids[a] for a in node.args))
        copies.append(ids)
    sums = []
    for e in body.outputs["@sum"].ids:
        terms = [ids[e] for ids in copies]
        while len(terms) > 1:  # pairwise: no chain within a trip either
            terms = [b.op("add", x, y) for x, y in zip(terms[::2], terms[1::2], strict=True)]
        sums.append(terms[0])
    maps = [ids[e] for ids in copies for e in body.outputs["@map"].ids]
    return b.graph(inputs, {"@sum": Port((len(sums),), tuple(sums)),
                            "@map": Port((len(maps),), tuple(maps))})
