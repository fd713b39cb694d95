"""The part of a graph that a batch computes alike in every row, split off to run once.

In a batch, an input given at its declared shape is shared by every row. The nodes that depend
on shared inputs and constants alone have one value for the whole batch, yet a kernel over the
rows computes them in each row: the bones of a hand posed by shared parameters, recomputed for
each of 10^5 points it is fitted to, and their tangents. `split` makes two graphs of one: a
`prefix` over the shared inputs whose output "@shared" holds those nodes' values that the rest
reads, and a `rest` that reads them as one more shared input. The prefix runs once, the rest
over the rows; each computes the same operations on the same values as the whole graph, so the
results are the same bits.
"""

from __future__ import annotations

from .ir import Graph, Node, Port, prune

NAME = "@shared"  # the rest's input of the prefix's values; no program's input starts with @
LEAVES = ("const", "input", "array")


def split(graph: Graph, shared: set[str], least: int) -> tuple[Graph, Graph] | None:
    """(prefix, rest), or None where fewer than `least` nodes would run once, or where the
    graph reads an input whole (a loop streams it: left as it is)."""
    if not shared or any(p.whole for p in (*graph.inputs.values(), *graph.outputs.values())):
        return None
    nodes = graph.nodes
    varies = bytearray(len(nodes))  # depends on an input given per row
    for name, port in graph.inputs.items():
        if name not in shared:
            for i in port.ids:
                varies[i] = 1
    for i, node in enumerate(nodes):
        if node.op == "array":
            return None
        if not varies[i] and node.args and any(varies[a] for a in node.args):
            varies[i] = 1
    frontier: dict[int, None] = {}  # once-computed nodes that the rows read, in order
    for i, node in enumerate(nodes):
        if varies[i]:
            frontier.update((a, None) for a in node.args
                            if not varies[a] and nodes[a].op not in LEAVES)
    for port in graph.outputs.values():
        frontier.update((i, None) for i in port.ids
                        if not varies[i] and nodes[i].op not in LEAVES)
    if not frontier or any(nodes[i].op == "region" for i in frontier):
        return None  # a region read whole by another (a stored scan): not split
    ids = list(frontier)
    prefix = prune(nodes, {n: p for n, p in graph.inputs.items() if n in shared},
                   {NAME: Port((len(ids),), tuple(ids))})
    if sum(node.op not in LEAVES for node in prefix.nodes) < least:
        return None
    replaced = list(nodes)
    for k, i in enumerate(ids):
        replaced[i] = Node("input", (), (NAME, k))
    inputs = {**graph.inputs, NAME: Port((len(ids),), tuple(ids))}
    return prefix, prune(replaced, inputs, dict(graph.outputs))
