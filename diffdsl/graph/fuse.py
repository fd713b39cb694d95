"""Two loops over the same iterations, neither reading the other, as one loop.

A Hessian's diagonal with its gradient (`sparsity.hessian_diagonal(with_grad=True)`) holds
the gradient's loop over the data and the loop of its tangent, whose body computes the
gradient's body again: run as two loops they cost two passes over the data, where one
would do. Fused, the two bodies are built into one builder, so what they share (the
primal body, the same captured values and streamed windows) is one set of nodes, and the
merged loop gives both regions' values.
"""

from __future__ import annotations

from .ir import Builder, Graph, Port
from .loops import LEAVES, body_graph, body_ports, inline, leaf, stream_input
from .region import Region

# Past this many loops a graph is left as it is: each pair tried walks the graph (a Hessian's
# diagonal of a program of many short loops would take minutes to pair).
MOST_REGIONS = 32


def fuse_siblings(graph: Graph) -> Graph:
    """`graph` with each pair of fusable regions (`_fusable`) merged into one; the first
    pair found for each region, in node order. `graph` itself where there is none."""
    regions = [i for i, node in enumerate(graph.nodes) if node.op == "region"]
    if len(regions) > MOST_REGIONS:
        return graph
    taken: set[int] = set()
    pairs = {}
    for k, b in enumerate(regions):
        for a in regions[:k]:
            if a not in taken and b not in taken and _fusable(graph, a, b):
                pairs[b] = a
                taken.update((a, b))
                break
    return _rebuilt(graph, pairs) if pairs else graph


def _fusable(graph: Graph, a: int, b: int) -> bool:
    """Regions a < b over the same iterations, plain (no winners, no carried state), read
    only through part nodes (a whole output port on them reads a run of their sums), and no
    node after a up to b reading a's values but its part nodes: b does not depend on a, and
    a's values are first needed after the merged loop is built, at b (the part nodes are
    built then)."""
    ra, rb = graph.nodes[a].attr, graph.nodes[b].attr
    for r in (ra, rb):
        if r.carry or r.winners:
            return False
    if ra.n != rb.n:
        return False
    reads = {a}
    for i in range(a + 1, b + 1):
        node = graph.nodes[i]
        if any(x in reads for x in node.args):
            if i == b or node.op != "part" or node.args[0] != a:
                return False
            reads.add(i)
    for i in range(b + 1, len(graph.nodes)):
        node = graph.nodes[i]
        if node.op != "part" and (a in node.args or b in node.args):
            return False  # a stream that reads a region whole
    for port in graph.outputs.values():
        if port.whole is not None and port.whole[0] in (a, b):
            r = graph.nodes[port.whole[0]].attr
            if port.whole[1] + port.size > r.sums:
                return False
    return True


def _merged(graph: Graph, a: int, b: int, ids: list) -> tuple:
    """The merged region's attribute and arguments (in the rebuilt graph, `ids`), and the
    value each of a's and b's values becomes: {a or b: function of the value}."""
    na, nb = graph.nodes[a], graph.nodes[b]
    ra, rb = na.attr, nb.attr
    # b reads a's capture slot for a value a captures too (so that their bodies share the
    # nodes computed from it), but keeps its own slot for a constant, and for a value it
    # captures twice: a run of b's captures that an inner loop streams stays a run (the
    # Hessian's tangent seeds are 1.0 each; one slot for all would be gathered element by
    # element, every iteration).
    captures = list(na.args[:ra.captures])
    where_c = {x: k for k, x in reversed(list(enumerate(captures)))
               if graph.nodes[x].op != "const"}
    cap_b = []
    for x in nb.args[:rb.captures]:
        cap_b.append(where_c.pop(x) if x in where_c else len(captures))
        if cap_b[-1] == len(captures):
            captures.append(x)
    streams, stream_args, sources, widths = [], [], [], []
    stream_of: dict[tuple, int] = {}  # the same window of the same array: one stream
    maps_to: list[list[int]] = []
    for node, r in ((na, ra), (nb, rb)):
        at, mine = r.captures, []
        for j, spec in enumerate(r.streams):
            args = tuple(node.args[at:at + r.taken(j)])
            at += r.taken(j)
            width = r.body.inputs[f"@s{j}"].size
            key = (spec, width, r.source(j), r.in_place(j), args)
            if key not in stream_of:
                stream_of[key] = len(streams)
                streams.append(spec)
                stream_args.append(args)
                sources.append(r.source(j))
                widths.append((width, r.in_place(j)))
            mine.append(stream_of[key])
        maps_to.append(mine)
    bb = Builder()
    ports = {"@i": [bb.input("@i", 0)], "@c": [bb.input("@c", k) for k in range(len(captures))]}
    for s, (w, in_place) in enumerate(widths):
        ports[f"@s{s}"] = stream_input(bb, s, w, in_place)
    outs = []
    for r, caps, mine in ((ra, range(ra.captures), maps_to[0]), (rb, cap_b, maps_to[1])):
        given = {"@i": ports["@i"], "@c": [ports["@c"][k] for k in caps]}
        given.update({f"@s{j}": ports[f"@s{s}"] for j, s in enumerate(mine)})
        outs.append(inline(bb, r.body, given))
    sums = list(outs[0]["@sum"]) + list(outs[1]["@sum"])
    maps = list(outs[0]["@map"]) + list(outs[1]["@map"])
    inputs = body_ports(bb, ports)
    whole = tuple(sources) if any(k >= 0 for k in sources) else ()
    region = Region(ra.n, body_graph(bb.nodes, inputs, sums, maps), len(captures),
                    tuple(streams), (), 0, whole)
    args = [ids[x] for x in captures] + [ids[x] for group in stream_args for x in group]
    s, m = ra.sums + rb.sums, ra.maps + rb.maps

    def place(r: Region, sum_at: int, map_at: int):
        def at(v: int) -> int:
            if v < r.sums:
                return sum_at + v
            row, t = divmod(v - r.sums, r.maps)
            return s + row * m + map_at + t
        return at
    return region, args, {a: place(ra, 0, 0), b: place(rb, ra.sums, ra.maps)}


def _rebuilt(graph: Graph, pairs: dict[int, int]) -> Graph:
    """`graph` rebuilt with region b of each pair (b: a) and its partner a one region, built
    in b's place."""
    firsts = set(pairs.values())
    bld = Builder()
    ids: list = [None] * len(graph.nodes)
    place: dict = {}
    waiting: dict[int, list[int]] = {}  # first of a pair -> its part nodes before the merge
    for i, node in enumerate(graph.nodes):
        if node.op in LEAVES:
            ids[i] = leaf(bld, node)
        elif i in firsts:
            waiting[i] = []  # built with its partner
        elif node.op == "part" and node.args[0] in waiting and ids[node.args[0]] is None:
            waiting[node.args[0]].append(i)
        elif i in pairs:
            region, args, at = _merged(graph, pairs[i], i, ids)
            ids[i] = ids[pairs[i]] = bld.region(region, args)
            place.update(at)
            for k in waiting[pairs[i]]:
                ids[k] = bld.part(ids[i], at[pairs[i]](graph.nodes[k].attr))
        elif node.op == "region":
            ids[i] = bld.region(node.attr, [ids[x] for x in node.args])
        elif node.op == "part":
            r = node.args[0]
            ids[i] = bld.part(ids[r], place[r](node.attr) if r in place else node.attr)
        else:
            ids[i] = bld.op(node.op, *(ids[x] for x in node.args))

    def port(p: Port) -> Port:
        if p.whole is not None and p.whole[0] in place:
            r, first = p.whole
            p = Port(p.shape, p.ids, p.span, (r, place[r](first)))
        return p.moved(ids)

    return bld.graph(*[{name: port(p) for name, p in ports.items()}
                       for ports in (graph.inputs, graph.outputs)])
