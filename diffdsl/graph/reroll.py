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
one add a iteration, whose two streams read those regions' values where they lie
(`Region.whole`); the adds' readers read its values instead. The same two values are added,
in the same order: the results are the same, bit for bit.
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
        graph = _rebuilt(graph, runs)
        runs = _runs(graph)
    return graph


def _rebuilt(graph: Graph, runs: list) -> Graph:
    """`graph` with each of `runs` a loop, its adds' readers reading that loop's values."""
    # A run's loop is made where its first add was (in node order): after the regions it
    # reads, before any reader of its adds.
    starts = {min(add for _, _, add in run): run for run in runs}
    bb = Builder()
    ids = [-1] * len(graph.nodes)
    nodes = graph.nodes
    leaves = [i for i, node in enumerate(nodes) if node.op in LEAVES]
    for i, new in zip(leaves, bb.leaves([nodes[i] for i in leaves]), strict=True):
        ids[i] = new
    for i, node in enumerate(nodes):
        if i in starts:
            run = starts[i]
            p, q, _ = run[0]
            loop = bb.region(_loop(graph, run), [ids[nodes[p].args[0]], ids[nodes[q].args[0]]])
            for t, (_, _, add) in enumerate(run):
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


def _loop(graph: Graph, run: list) -> Region:
    """A map region of an iteration per add of `run`, adding element i of two streams: the
    values the adds read, where their regions hold them."""
    n = len(run)
    bb = Builder()
    index = bb.input("@i", 0)
    left, right = bb.input("@s0", 0), bb.input("@s1", 0)
    total = bb.add(left, right)
    ports = {"@i": Port((1,), (index,)), "@c": Port((0,), ()),
             "@s0": Port((1,), (left,)), "@s1": Port((1,), (right,))}
    body = body_graph(bb.nodes, ports, [], [total])
    p, q, _ = run[0]
    sources = (graph.nodes[p].attr, graph.nodes[q].attr)
    return Region(n, body, 0, ((n, 1, 0), (n, 1, 0)), (), 0, sources)
