"""A gradient's sums of two loops' cotangents, added by a loop again.

An input read by two loops gets a cotangent from each pullback, and the reverse sweep adds
them element by element: GMM's triangular factors `l`, read by the loop over the points and
by the prior's loop over the components, gave k * d(d - 1)/2 `add` nodes outside any loop,
each of two values of a region. That is little work, but it is code: past 8,192 such nodes
(d = 32, k = 25) the kernel was compiled unoptimised whole (backends/llvm_cold.py), its
loops too, and every node took its share of emitting and compiling.

`rerolled` finds the adds whose two arguments are values of regions, and among them the
runs where both advance by one value from an add to the next (value `a + t` of one region
and `b + t` of another, t = 0, 1, ...). A run of at least RUN adds becomes a map region of
one add an iteration, whose two streams read those regions' values where they lie
(`Region.whole`); the adds' readers read its values instead. Runs of one length whose starts
advance by the same steps in both regions (a component's row of cotangents, then the next's)
are one region over the runs, its body that loop over a run: a loop each, 100 components made
100 loops, which took LLVM's O3 pipeline 0.8 s. The same two values are added, in the same
order: the results are the same, bit for bit.
"""

from __future__ import annotations

from collections import defaultdict

from .ir import Builder, Graph, Port
from .loops import LEAVES, body_graph
from .ops import OPS
from .region import Region

RUN = 16  # adds in a run, at least, to make a loop of them


def rerolled(graph: Graph) -> Graph:
    """`graph` with each run of adds of two regions' values (module docstring) a loop;
    `graph` itself where there is none. An input read by three loops gets its cotangents
    added as (a + b) + c: once a + b is a loop, its values and c make runs in turn."""
    runs = _runs(graph)
    while runs:
        graph = _rebuilt(graph, _blocks(graph, runs))
        runs = _runs(graph)
    return graph


def _rebuilt(graph: Graph, blocks: list) -> Graph:
    """`graph` with each block of runs a loop, their adds' readers reading its values."""
    # A block's loop is made where its first add was (in node order): after the regions it
    # reads, before any reader of its adds.
    starts = {min(add for run in block for _, _, add in run): block for block in blocks}
    bb = Builder()
    ids = [-1] * len(graph.nodes)
    nodes = graph.nodes
    leaves = [i for i, node in enumerate(nodes) if node.op in LEAVES]
    for i, new in zip(leaves, bb.leaves([nodes[i] for i in leaves]), strict=True):
        ids[i] = new
    for i, node in enumerate(nodes):
        if i in starts:
            block = starts[i]
            p, q, _ = block[0][0]
            loop = bb.region(_loop(graph, block), [ids[nodes[p].args[0]], ids[nodes[q].args[0]]])
            adds = [add for run in block for _, _, add in run]
            for t, add in enumerate(adds):
                ids[add] = bb.part(loop, t)
        if ids[i] >= 0 or node.op in LEAVES:
            continue
        args = tuple(ids[a] for a in node.args)
        if node.op == "region":
            ids[i] = bb.region(node.attr, args)
        elif node.op == "part":
            ids[i] = bb.part(args[0], node.attr)
        else:  # made as it was, not simplified again: the same nodes, renamed
            key = tuple(sorted(args)) if OPS[node.op].commutative else args
            ids[i] = bb._intern((node.op, key, None), node.op, args, node.attr)
    return bb.graph({name: p.moved(ids) for name, p in graph.inputs.items()},
                    {name: p.moved(ids) for name, p in graph.outputs.items()})


def _runs(graph: Graph) -> list[list[tuple[int, int, int]]]:
    """The runs of at least RUN adds, each a list of (part, part, add) in the order of the
    values they read: part nodes of regions, value a + t and b + t for the t-th add."""
    nodes = graph.nodes
    groups: dict[tuple, list] = defaultdict(list)
    for i, node in enumerate(nodes):
        if node.op != "add":
            continue
        if any(nodes[a].op != "part" for a in node.args):
            continue
        # in the order of (region, value): a run's adds may hold their parts either way
        p, q = sorted(node.args, key=lambda a: (nodes[a].args[0], nodes[a].attr))
        left, right = nodes[p], nodes[q]
        groups[(left.args[0], right.args[0], left.attr - right.attr)].append((left.attr, p, q, i))
    runs = []
    for found in groups.values():
        found.sort()
        start = 0
        for k in range(1, len(found) + 1):
            if k == len(found) or found[k][0] != found[k - 1][0] + 1:
                if k - start >= RUN:
                    runs.append([(p, q, i) for _, p, q, i in found[start:k]])
                start = k
    return runs


def _blocks(graph: Graph, runs: list) -> list[list]:
    """`runs` cut into blocks: runs of the same two regions and length whose first values
    advance by the same steps, both forwards, from a run to the next."""
    def where(run) -> tuple[int, int]:
        p, q, _ = run[0]
        return graph.nodes[p].attr, graph.nodes[q].attr

    def step(one, other) -> tuple[int, int]:
        (a, b), (c, d) = where(one), where(other)
        return c - a, d - b

    groups: dict[tuple, list] = defaultdict(list)
    for run in runs:
        p, q, _ = run[0]
        groups[(graph.nodes[p].args[0], graph.nodes[q].args[0], len(run))].append(run)
    blocks = []
    for found in groups.values():
        found.sort(key=where)
        block = [found[0]]
        for run in found[1:]:
            here = step(block[-1], run)
            if min(here) > 0 and (len(block) == 1 or here == step(block[0], block[1])):
                block.append(run)
            else:
                blocks.append(block)
                block = [run]
        blocks.append(block)
    return blocks


def _loop(graph: Graph, block: list) -> Region:
    """A map region over the runs of `block` (one run: over its adds), each iteration adding
    element t of two streams, for each t below the runs' length: the values the adds read,
    where their regions hold them."""
    w = len(block[0])
    inner = _adding(1)
    (p, q, _), n = block[0][0], len(block)
    sources = (graph.nodes[p].attr, graph.nodes[q].attr)
    if n == 1:
        return Region(w, inner, 0, ((w, 1, 0), (w, 1, 0)), (), 0, sources)
    steps = [graph.nodes[block[1][0][k]].attr - sources[k] for k in (0, 1)]
    bb = Builder()
    left, right, ports = _two_streams(bb, w)
    loop = bb.region(Region(w, inner, 0, ((w, 1, 0), (w, 1, 0))), left + right)
    body = body_graph(bb.nodes, ports, [], [bb.part(loop, t) for t in range(w)])
    spec = tuple(((n - 1) * step + w, step, 0) for step in steps)
    return Region(n, body, 0, spec, (), 0, sources)


def _adding(width: int) -> Graph:
    """The body of a map region adding element t of two streams of `width` elements, for
    each t: `width` outputs."""
    bb = Builder()
    left, right, ports = _two_streams(bb, width)
    return body_graph(bb.nodes, ports, [], [bb.add(a, b) for a, b in zip(left, right, strict=True)])


def _two_streams(bb: Builder, width: int) -> tuple[list, list, dict]:
    """The inputs of a body with no captures and two streams of `width` elements, made in
    `bb`: the streams' nodes and the body's input ports."""
    index = bb.input("@i", 0)
    left = [bb.input("@s0", t) for t in range(width)]
    right = [bb.input("@s1", t) for t in range(width)]
    ports = {"@i": Port((1,), (index,)), "@c": Port((0,), ()),
             "@s0": Port((width,), tuple(left)), "@s1": Port((width,), tuple(right))}
    return left, right, ports
