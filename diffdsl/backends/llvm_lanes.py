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
stays within `llvm_powers.FRESH` roundings of pow. A loop is taken where its body is a few
dozen operations with a running power and without a loop of its own, and k divides its trip
count; min, max, a scan's state and a gated loop (one iteration) are left as they are, and
so is every loop without a running power, which the vectoriser takes (`BODY`).
"""

from __future__ import annotations

from ..graph.ir import Builder, Graph, Node, Port
from ..graph.loops import has_regions
from ..graph.region import Region
from .llvm_loops import gate
from .llvm_powers import fixed_nodes, index_shift, running_powers

LANES = (4, 2)  # copies a body is given: the first that divides the trip count
# Operations in a body taken. Measured on Horner polynomials of x[j] in a sum over 4,096
# iterations: beside a running power, four at a time took 0.62 to 0.78 of the time up to 80
# operations (0.88 at 160), the gradient the same; without one, LLVM's loop vectoriser
# takes the loop itself, and its copies, which it does not, took up to 7 times as long.
BODY = 40


def interleave(graph: Graph, t: str) -> Graph:
    """`graph` with each loop that gains by it running `LANES` iterations at once (module
    docstring), in every body; `graph` itself where none does."""
    nodes = list(graph.nodes)
    for i, node in enumerate(nodes):
        if node.op == "region":
            region = _interleaved(node.attr, t)
            if region is not node.attr:
                nodes[i] = Node("region", node.args, region)
    if all(a is b for a, b in zip(nodes, graph.nodes, strict=True)):
        return graph
    return Graph(tuple(nodes), graph.inputs, graph.outputs)


def lanes(region: Region, t: str) -> int:
    """How many iterations at once `region`'s loop is to run: 1 where it is left as it is."""
    body = region.body
    if region.carry or region.winners or has_regions(body) or gate(region) is not None:
        return 1
    if sum(node.op not in ("input", "const") for node in body.nodes) > BODY:
        return 1
    if not running_powers(body, t):  # the vectoriser takes the loop (BODY's comment)
        return 1
    return next((k for k in LANES if region.n % k == 0 and region.n >= 2 * k), 1)


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
    fixed, at = fixed_nodes(body)
    powers = {} if t != "double" else {
        i: shift for i, node in enumerate(body.nodes) if node.op == "pow" and
        fixed[node.args[0]] and (shift := index_shift(body.nodes, node.args[1], at)) is not None}
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
