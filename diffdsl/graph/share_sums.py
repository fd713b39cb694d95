"""A gradient's loop run forwards once: the pullback of a region that has only sums (no min,
max, map or carried state) computes the region's body in every iteration (it needs the
body's partial derivatives there) and adds up the region's own sums beside its cotangents
(`loop_sweeps.region_pullback` appends them to its sums). `share_sums` reads the region's
values from its pullback then, so that a gradient with its value (`value_and_grad`, the
`grad` of k-means or a GMM) runs the loop once, not twice.

The pullback is recognised by what it is, not by a note: a region of the same trip count,
captures and streams first, whose body, with the region's body built into it from the same
inputs, gives the region's sums as its last sums (the builder's hash-consing makes the
same computation the same nodes).
"""

from __future__ import annotations

from .ir import Builder, Graph
from .loops import inline, read_from, share_stored, split_args
from .unread import drop_unread


def shared(graph: Graph) -> Graph:
    """A derivative's graph with its loops run forwards once: scans (`share_stored`) and
    regions of sums (`share_sums`) read from the copies their pullbacks run; then what no
    loop's reader reads dropped (`unread.drop_unread`: a copy that is not read)."""
    return drop_unread(share_sums(share_stored(graph)))


def share_sums(graph: Graph) -> Graph:
    """`graph` with each region of sums alone whose pullback is in it too read from that
    pullback (its values, the pullback's last sums); `graph` itself where there is none."""
    regions = [i for i, node in enumerate(graph.nodes) if node.op == "region"]
    moved: dict[int, tuple[int, int]] = {}  # region -> (its pullback, the shift of its sums)
    for i in regions:
        r = graph.nodes[i].attr
        if r.carry or r.maps or r.winners or not r.sums:
            continue
        for j in regions:
            if j > i and _carries(graph, i, j) and _ready(graph, j, i):
                moved[i] = (j, graph.nodes[j].attr.sums - r.sums)
                break
    return read_from(graph, moved) if moved else graph


def _ready(graph: Graph, j: int, i: int) -> bool:
    """Whether region node j's arguments are all nodes before node i, or constants: it can
    be built in i's place (its seeds do not depend on region i's values)."""
    return all(a < i or graph.nodes[a].op == "const" for a in graph.nodes[j].args)


def _carries(graph: Graph, i: int, j: int) -> bool:
    """Whether region node j computes region node i's body over the same iterations, from
    the same captures and streams (its first), and has i's sums as its last sums, added as
    i adds them: a max over the same body is not its pullback (`max(v) * sum(v)` read the
    max as the sum)."""
    mine, other = graph.nodes[i], graph.nodes[j]
    r, p = mine.attr, other.attr
    if p.n != r.n or p.carry or p.sums < r.sums or p.captures < r.captures or any(
            p.kind(e) != "add" for e in range(p.sums - r.sums, p.sums)) or \
            p.streams[:len(r.streams)] != r.streams or \
            any(p.source(k) != r.source(k) for k in range(len(r.streams))) or \
            p.widths()[:len(r.streams)] != r.widths():
        return False
    caps, streams = split_args(r, mine.args)
    pcaps, pstreams = split_args(p, other.args)
    if pcaps[:r.captures] != caps or pstreams[:len(streams)] != streams:
        return False
    bb = Builder()
    given = {name: [bb.array(name, port.size)] if port.whole else
             [bb.input(name, k) for k in range(port.size)]
             for name, port in p.body.inputs.items()}
    theirs = inline(bb, p.body, given)["@sum"][p.sums - r.sums:]
    ours = inline(bb, r.body, {name: given[name][:port.size]
                               for name, port in r.body.inputs.items()})["@sum"]
    return theirs == ours
