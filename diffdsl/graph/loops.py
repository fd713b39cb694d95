"""Regions (DESIGN.md, decision 9): a body graph inlined into a builder, regions made from a
body, and every region of a graph unrolled into scalar nodes.

Unrolling is the reference semantics of a region: `expand(graph)` is the graph lowering makes
with loops unrolled (up to the order in which a sum adds its terms), and the consumers that do
not run regions themselves (SymPy export, the tape, CUDA, sparsity patterns) take it.
"""

from __future__ import annotations

from functools import lru_cache

from .ir import Builder, Graph, Node, Port
from .region import Region


def has_regions(graph: Graph) -> bool:
    return any(node.op == "region" for node in graph.nodes)


LEAVES = ("input", "array", "const")


def leaf(b: Builder, node: Node) -> int:
    """A leaf of another graph (an input element, an array, a constant) made in `b`."""
    if node.op == "const":
        return b.const(node.attr)
    return b.input(*node.attr) if node.op == "input" else b.array(*node.attr)


def inline(b: Builder, body: Graph, given: dict[str, list[int]]) -> dict[str, list[int]]:
    """Build `body`'s nodes into `b`, its inputs replaced by the nodes `given[name]` (for a
    port read in place, one: an array node, whose elements are its parts); the node ids of
    each of its outputs. Regions inside the body are copied as regions."""
    ids: list[int] = [0] * len(body.nodes)
    whole = {}  # a port read in place -> the node given for its array
    for name, port in body.inputs.items():
        if port.whole is not None:
            ids[port.whole[0]] = whole[name] = given[name][0]
        for k, i in enumerate(port.ids):
            ids[i] = given[name][k]
    for i, node in enumerate(body.nodes):
        if node.op in ("input", "array"):
            if node.op == "input" and node.attr[0] in whole:  # an element read alone
                ids[i] = b.part(whole[node.attr[0]], node.attr[1])
            continue
        if node.op == "const":
            ids[i] = b.const(node.attr)
        elif node.op == "region":
            ids[i] = b.region(node.attr, [ids[a] for a in node.args])
        elif node.op == "part":
            ids[i] = b.part(ids[node.args[0]], node.attr)
        else:
            ids[i] = b.op(node.op, *(ids[a] for a in node.args))
    return {name: [ids[i] for i in port.ids] for name, port in body.outputs.items()}


def split_args(region: Region, args) -> tuple[list, list[list]]:
    """A region node's arguments as (captures, [each stream's elements])."""
    captures = list(args[:region.captures])
    streams, at = [], region.captures
    for j in range(len(region.streams)):
        streams.append(list(args[at:at + region.taken(j)]))
        at += region.taken(j)
    return captures, streams


def materialize(region: Region, args, values_of, in_place: bool = False
                ) -> tuple[Region, list]:
    """The same region with streams' elements as arguments: `values_of(a, k, length)` gives
    the ids of values k to k + length - 1 of region or array node `a` (a stream that reads
    its values whole), or None to keep that stream whole. Consumers that take streams
    element by element call this. A stream the body reads in place (`Region.in_place`) is
    listed so too, as captures (every iteration reads all of it: a capture's cotangent is a
    sum over the iterations), unless `in_place` (its consumer reads it whole: values_of is
    not asked)."""
    if not region.whole:
        return region, list(args)
    captures, streams = split_args(region, args)
    out, whole, moved, extra = [], [], [], []
    for j, ids in enumerate(streams):
        k = region.source(j)
        kept = k < 0 or (in_place and region.in_place(j))
        items = None if kept else values_of(ids[0], k, region.streams[j][0])
        if items is not None and region.in_place(j):
            moved.append(j)
            extra += list(items)
            continue
        out += ids if items is None else list(items)
        whole.append(k if items is None else -1)
    state = initial_state(region, args)
    if moved:
        return as_captures(region, tuple(moved), tuple(whole)), captures + extra + out + state
    return Region(region.n, region.body, region.captures, region.streams, region.combine,
                  region.carry, tuple(whole) if any(k >= 0 for k in whole) else ()), \
        captures + out + state


@lru_cache(maxsize=256)
def as_captures(region: Region, moved: tuple, whole: tuple) -> Region:
    """`region` with the streams `moved`, read in place, captured element by element after
    its captures (the other streams' sources `whole`), its body rebuilt to read them so:
    made once per region (the reference interpreter asks for it at every call)."""
    body = explicit(region.body, frozenset(f"@s{j}" for j in moved))
    widths = region.widths()
    bb = Builder()
    caps = [bb.input("@c", k) for k in range(region.captures + sum(widths[j] for j in moved))]
    index = bb.input("@i", 0)
    given = {"@i": [index], "@c": caps[:region.captures]}
    ports = {"@i": Port((1,), (index,)), "@c": Port((len(caps),), tuple(caps))}
    at = region.captures
    for j in moved:
        given[f"@s{j}"] = caps[at:at + widths[j]]
        at += widths[j]
    kept = [j for j in range(len(region.streams)) if j not in moved]
    for m, j in enumerate(kept):
        if region.in_place(j):
            a = bb.array(f"@s{m}", widths[j])
            given[f"@s{j}"] = [a]
            ports[f"@s{m}"] = Port((widths[j],), (), None, (a, 0))
        else:
            given[f"@s{j}"] = [bb.input(f"@s{m}", t) for t in range(widths[j])]
            ports[f"@s{m}"] = Port((widths[j],), tuple(given[f"@s{j}"]))
    if region.carry:
        given["@h"] = [bb.input("@h", k) for k in range(region.carry)]
        ports["@h"] = Port((region.carry,), tuple(given["@h"]))
    out = inline(bb, body, given)
    rebuilt = body_graph(bb.nodes, ports, out["@sum"], out["@map"],
                         out["@next"] if region.carry else None)
    return Region(region.n, rebuilt, len(caps), tuple(region.streams[j] for j in kept),
                  region.combine, region.carry, whole if any(k >= 0 for k in whole) else ())


def initial_state(region: Region, args) -> list:
    """A scan node's arguments that hold its initial state (the last `carry`)."""
    return list(args[len(args) - region.carry:]) if region.carry else []


def iteration_inputs(b: Builder, region: Region, args, i: int) -> dict[str, list[int]]:
    """The nodes the body reads in iteration `i`."""
    captures, streams = split_args(region, args)
    given = {"@i": [b.const(float(i))], "@c": captures}
    for j, ((_, stride, offset), width) in enumerate(zip(region.streams, region.widths(),
                                                         strict=True)):
        start = offset + stride * i
        given[f"@s{j}"] = streams[j] if region.in_place(j) else streams[j][start:start + width]
    return given


def unroll(b: Builder, region: Region, args) -> list[int]:
    """The region's values (see `Region`) as scalar nodes of `b`: its body inlined n times,
    the sums added in iteration order (as lowering adds an unrolled sum's terms), a scan's
    state passed from each iteration to the next."""
    sums: list[int | None] = [None] * region.sums
    winners: list[int | None] = [None] * region.sums
    stacked: list[int] = []
    state = initial_state(region, args)
    for i in range(region.n):
        given = iteration_inputs(b, region, args, i)
        if region.carry:
            given["@h"] = state
        out = inline(b, region.body, given)
        if region.carry:
            state = out["@next"]
        for k, v in enumerate(out["@sum"]):
            kind = region.kind(k)
            if sums[k] is None:
                sums[k], winners[k] = v, b.const(0.0)
            elif kind == "add":
                sums[k] = b.add(sums[k], v)
            else:  # min or max keeps the earlier value on a tie: its winner too
                kept = b.op("le" if kind == "min" else "ge", sums[k], v)
                sums[k] = b.op(kind, sums[k], v)
                winners[k] = b.select(kept, winners[k], b.const(float(i)))
        stacked += out["@map"]
    return [v if v is not None else b.const(0.0) for v in sums] + stacked + \
        [winners[e] for e in region.winners] + state


def expand(graph: Graph) -> Graph:
    """`graph` with every region unrolled (nested ones too); `graph` itself when it has none."""
    if not has_regions(graph):
        return explicit(graph)
    return _rebuilt(graph, unrolled=True)


def explicit(graph: Graph, inputs=True) -> Graph:
    """`graph` with every port listed element by element: an input read whole (an `array`
    node) as its element nodes (unless not `inputs`: the SymPy export reads an array as an
    `IndexedBase`; where `inputs` is a collection of names, those inputs alone: a Hessian's
    diagonal by some inputs reads the others in place), an output whole on a region as
    parts; regions stay regions. `graph` itself where no port is to be listed (a graph this
    made, given again). For consumers that take inputs and outputs one element at a time
    (forward mode, Jacobians, Hessians, the tape)."""
    if not any(_listed_whole(graph, p, inputs) for ports in (graph.inputs, graph.outputs)
               for p in ports.values()):
        return graph
    return _rebuilt(graph, unrolled=False, inputs=inputs)


def _lists(inputs, name: str) -> bool:
    """Whether input `name` is listed, `inputs` as `explicit` takes it."""
    return inputs is True or (inputs is not False and name in inputs)


def _listed_whole(graph: Graph, p: Port, inputs) -> bool:
    """Whether port `p` is whole and is to be listed: on a region's values, or on an input
    that `inputs` lists."""
    if p.whole is None:
        return False
    node = graph.nodes[p.whole[0]]
    return node.op != "array" or _lists(inputs, node.attr[0])


def _rebuilt(graph: Graph, unrolled: bool, inputs=True) -> Graph:
    """`graph` with its ports listed element by element (its inputs too where `inputs`, as
    `explicit` says) and, if `unrolled`, every region written out (`expand`)."""
    b = Builder()
    ids: list[int] = [0] * len(graph.nodes)
    values: dict[int, list[int]] = {}  # an array's or (unrolled) a region's values
    for name, port in graph.inputs.items():  # the inputs' elements first, in order
        if port.whole is not None and _lists(inputs, name):
            values[port.whole[0]] = [b.input(name, k) for k in range(port.size)]
    for i, node in enumerate(graph.nodes):
        if node.op == "input":
            ids[i] = b.input(*node.attr)
        elif node.op == "array":  # listed: read through `values`
            ids[i] = -1 if _lists(inputs, node.attr[0]) else b.array(*node.attr)
        elif node.op == "const":
            ids[i] = b.const(node.attr)
        elif node.op == "region":
            # An argument that is a region or an array node is a stream of its values, read
            # whole: an array's as its elements; a region's as they are, or written out.
            args = [("whole", a) if graph.nodes[a].op in ("region", "array") else ids[a]
                    for a in node.args]
            region, args = materialize(node.attr, args, lambda a, k, length: (
                values[a[1]][k:k + length] if a[1] in values else None))
            args = [ids[a[1]] if type(a) is tuple else a for a in args]  # kept whole
            if unrolled:
                values[i] = unroll(b, _expanded(region), args)
            else:
                ids[i] = b.region(region, args)
        elif node.op == "part":
            r = node.args[0]
            ids[i] = values[r][node.attr] if r in values else b.part(ids[r], node.attr)
        else:
            ids[i] = b.op(node.op, *(ids[a] for a in node.args))

    def listed(p: Port) -> Port:
        if not _listed_whole(graph, p, inputs):
            return p.moved(ids)
        node, first = p.whole
        els = values[node][first:first + p.size] if node in values else \
            [b.part(ids[node], first + k) for k in range(p.size)]
        return Port(p.shape, tuple(els), p.span)

    ports = {name: listed(p) for name, p in graph.inputs.items()}
    outs = {name: listed(p) for name, p in graph.outputs.items()}
    return b.graph(ports, outs)


def _expanded(region: Region) -> Region:
    body = expand(region.body)
    if body is region.body:
        return region
    return region.with_body(body)


def make_region(n: int, body: Graph, captures: list[int], streams: list[tuple],
                combine: tuple = (), initial: list[int] = ()) -> tuple:
    """The attribute and arguments of a region node: `streams` holds, per stream, (its
    elements' node ids, stride, offset), or (an array node, stride, offset, its size) for an
    input read whole; the body's "@s{j}" port gives the width; a scan's `initial` state comes
    last."""
    spec = tuple((x[3] if len(x) == 4 else len(x[0]), x[1], x[2]) for x in streams)
    whole = tuple(0 if len(x) == 4 else -1 for x in streams)
    args = list(captures) + [i for x in streams for i in ((x[0],) if len(x) == 4 else x[0])]
    args += list(initial)
    if all(k == "add" for k in combine):
        combine = ()
    return Region(n, body, len(captures), spec, tuple(combine), len(initial),
                  whole if any(k >= 0 for k in whole) else ()), args


def body_graph(nodes: list[Node], inputs: dict[str, Port], sums: list[int],
               maps: list[int], nexts: list[int] | None = None) -> Graph:
    """Freeze a body built in a builder's node list, with its output ports (a scan's next
    state, `nexts`, too)."""
    b = Builder()
    b.nodes = list(nodes)
    outputs = {"@sum": Port((len(sums),), tuple(sums)), "@map": Port((len(maps),), tuple(maps))}
    if nexts is not None:
        outputs["@next"] = Port((len(nexts),), tuple(nexts))
    return b.graph(inputs, outputs)


def stream_input(bb: Builder, j: int, width: int, in_place: bool) -> list[int]:
    """The input nodes of a body's stream j: its window's elements, or, read in place, its
    array node alone."""
    if in_place:
        return [bb.array(f"@s{j}", width)]
    return [bb.input(f"@s{j}", k) for k in range(width)]


def stream_inputs(bb: Builder, region: Region, widths: list[int]) -> dict[str, list[int]]:
    """The input nodes of a derivative body's streams: the region's (read in place where
    it reads them so), then one more per further width."""
    return {f"@s{j}": stream_input(bb, j, w, j < len(region.streams) and region.in_place(j))
            for j, w in enumerate(widths)}


def read_alone(nodes, name: str) -> list[int]:
    """The nodes among `nodes` that are elements of port `name` read alone (beside the array
    node of a port read in place)."""
    return [i for i, node in enumerate(nodes) if node.op == "input" and node.attr[0] == name]


def body_ports(bb: Builder, ports: dict) -> dict[str, Port]:
    """The ports of a body's input nodes, {name: ids} (an array node: a port read whole)."""
    def port(ids):
        node = bb.nodes[ids[0]] if len(ids) == 1 else None
        if node is not None and node.op == "array":
            return Port((node.attr[1],), (), None, (ids[0], 0))
        return Port((len(ids),), tuple(ids))
    return {name: port(ids) for name, ids in ports.items()}


def stored_region(region: Region) -> Region:
    """A copy of scan `region` that also stacks the state each iteration reads, as its map
    outputs (that of iteration i, element k, is value i * carry + k), for its pullback."""
    body = region.body
    stored = body_graph(body.nodes, dict(body.inputs), [], list(body.inputs["@h"].ids),
                        list(body.outputs["@next"].ids))
    return Region(region.n, stored, region.captures, region.streams, (), region.carry,
                  region.whole)


def share_stored(graph: Graph) -> Graph:
    """`graph` with each scan whose stored copy (`stored_region`, made by its pullback) is in
    it too replaced by that copy, which computes the same final state: a gradient then runs
    the loop forwards once, not twice. `graph` itself where there is none."""
    if not any(node.op == "region" and node.attr.carry for node in graph.nodes):
        return graph  # no scan: most derivatives, spared hashing every region's body
    regions = {(node.attr, node.args): i for i, node in enumerate(graph.nodes)
               if node.op == "region"}
    moved = {}  # scan -> (its stored copy's node, the shift of its values)
    for i, node in enumerate(graph.nodes):
        r = node.attr
        if node.op == "region" and r.carry and not r.sums and not r.maps:
            j = regions.get((stored_region(r), node.args))
            if j is not None:
                moved[i] = (j, graph.nodes[j].attr.size - r.size)
    return read_from(graph, moved) if moved else graph


def read_from(graph: Graph, moved: dict[int, tuple[int, int]]) -> Graph:
    """`graph` with each region node i of `moved` replaced by region node j, where moved[i]
    is (j, shift): j is built in i's place (its arguments are nodes before i, or constants)
    and i's value k is j's value k + shift."""
    b = Builder()
    ids: list[int] = [0] * len(graph.nodes)
    for i, node in enumerate(graph.nodes):
        if node.op in LEAVES:
            ids[i] = leaf(b, node)
        elif node.op == "region":
            source = graph.nodes[moved[i][0]] if i in moved else node
            ids[i] = b.region(source.attr, [ids[a] if a < i else leaf(b, graph.nodes[a])
                                            for a in source.args])
        elif node.op == "part":
            r = node.args[0]
            ids[i] = b.part(ids[r], node.attr + (moved[r][1] if r in moved else 0))
        else:
            ids[i] = b.op(node.op, *(ids[a] for a in node.args))

    def port(p: Port) -> Port:
        if p.whole is not None and p.whole[0] in moved:  # whole on the region's values
            r, first = p.whole
            p = Port(p.shape, p.ids, p.span, (r, first + moved[r][1]))
        return p.moved(ids)

    return b.graph(*[{name: port(p) for name, p in ports.items()}
                     for ports in (graph.inputs, graph.outputs)])


def written_out(graph: Graph, regions: set[int]) -> Graph:
    """`graph` with the region nodes `regions` unrolled (`unroll`), the others kept;
    a stream of an input read in place that an unrolled region reads, as its elements."""
    b = Builder()
    ids: list[int] = [0] * len(graph.nodes)
    values: dict[int, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        if node.op in LEAVES:
            ids[i] = leaf(b, node)
        elif node.op == "region":
            args = [ids[a] for a in node.args]
            if i in regions:
                region, args = materialize(node.attr, args, lambda a, k, length: [
                    b.part(a, k + e) for e in range(length)])
                region = region.with_body(expand(region.body))
                values[i] = unroll(b, region, args)
            else:
                ids[i] = b.region(node.attr, args)
        elif node.op == "part":
            r = node.args[0]
            ids[i] = values[r][node.attr] if r in values else b.part(ids[r], node.attr)
        else:
            ids[i] = b.op(node.op, *(ids[a] for a in node.args))

    def port(p: Port) -> Port:  # an output whole on a region written out: its values listed
        if p.whole is None or p.whole[0] not in values:
            return p.moved(ids)
        node, first = p.whole
        return Port(p.shape, tuple(values[node][first:first + p.size]), p.span)
    return b.graph(*[{name: port(p) for name, p in ports.items()}
                     for ports in (graph.inputs, graph.outputs)])
