"""Work a loop does the same in every iteration, done once before it (loop-invariant code
motion), so that a loop costs what varies in it.

- A body's nodes that depend on its captures, constants and streams of stride 0 alone (not
  on its index, its other streams or a carried state) are computed before the loop, which
  passes their values in as more captures (`_moved_out`). An outer loop's value reaches an
  inner loop as a stream of stride 0: `exp(x[i])` in a loop over `c` inside the loop over
  `i` is computed once an outer iteration.
- A loop inside a body whose work depends on its own index and on values the same in every
  iteration of the outer loop (a GMM's loop over the components, inside the loop over the
  points, computes exp(q[c, j]) and sum(q[c]): n * k * d exponentials for k * d values) has
  that work done by a map region before the outer loop, whose rows the inner loop streams
  (`_lifted`). The rows are listed as captures of the outer loop, so this is done only where
  they are at most twice the elements they are computed from.
- Captures and streams that only the moved work read are dropped (`_trimmed`).

Hoisting runs on the program's graph when lowering ends (where the rows it lists would pass
the node limit, the graph is kept as lowered), so every derivative of it computes the moved
work once too: a pullback adds the moved values' cotangents over the iterations first, then
takes that sum through the moved nodes once. What the program computes is the same: the
same ops on the same values (bit for bit in the reference interpreter; on the CPU a moved
`exp` may run in a vectorised loop, ulps from glibc's). A derivative is the same up to the
order of a sum: its last bits, and where a term overflows, what the order decides. At
x[i] = 1e307, a = 0, d/da of sum(x[i] * (a * a)) is NaN moved out (the sum of the x[i]
overflows to inf, times 2a = 0) and 0 in the loop, as written out it is NaN too; at a = 1e-300,
d/da of sum(exp(1 / a) * x[i] ** 2) is -inf moved out and NaN in the loop where an x[i] is 0.
Loops whose whole work is the same in every outer iteration (a max over c inside the loop
over i that reads nothing of i) still run in it: region nodes are never moved.
"""

from __future__ import annotations

from .ir import Builder, Graph, Node, Port, prune
from .loops import LEAVES, has_regions, initial_state, read_alone, split_args
from .region import Region
from .verify import verify, verifying

_VARIANT = ("region", "part", "array")  # never moved out, nor anything that reads them
# Ops a load costs about as much as: an inner loop's outer-invariant work made of these
# alone, no more of them than the values it gives, stays where it is (`_inner_lift`).
CHEAP = frozenset(("add", "sub", "mul", "neg", "abs", "select", "min", "max", "lt", "le",
                   "gt", "ge", "eq", "ne"))


def hoisted(graph: Graph) -> Graph:
    """`graph` with each region's invariant work done before it, in loops nested in bodies
    too; `graph` itself where there is none."""
    if not any(node.op == "region" and _may_move(node.attr) for node in graph.nodes):
        return graph  # most loops: nothing to move, and the graph is not copied to see so
    changed = []

    def hoist(b: Builder, region: Region, args: list[int], _):
        body = hoisted(region.body)  # the loops inside this body first
        if body is not region.body:
            region = region.with_body(body)
            changed.append(True)
        moved = False
        for move in (_lifted, _moved_out):
            found = move(b, region, args)
            if found is not None:
                (region, args), moved = found, True
        if moved:
            changed.append(True)
            return _trimmed(region, args)
        return region, args

    b, ids = _copied(graph, regions=hoist)
    if not changed:
        return graph
    return b.graph(*_ports(graph, ids))


def _may_move(region: Region) -> bool:
    """Whether the region has work to move out, or loops inside whose work may move."""
    return has_regions(region.body) or \
        bool(_frontier(region.body, invariant_nodes(region)))


def invariant_nodes(region: Region) -> list[bool]:
    """Per node of the region's body, whether its value is the same in every iteration: a
    constant, a capture, an element of a stream of stride 0 (an outer loop's value passed
    into an inner one), or an op on such values alone."""
    fixed = _fixed_inputs(region)
    return _closure(region.body, lambda i, node: i in fixed)


def _fixed_inputs(region: Region) -> dict[int, tuple[str, int]]:
    """The body's inputs the same in every iteration: node -> ("@c", k) for a capture, or
    ("@s", (j, element)) for element `element` of stream j of stride 0 (not read whole)."""
    body = region.body
    fixed = {i: ("@c", k) for k, i in enumerate(body.inputs["@c"].ids)}
    for j, (_, stride, offset) in enumerate(region.streams):
        if stride == 0 and region.source(j) < 0:
            fixed.update({x: ("@s", (j, offset + t))
                          for t, x in enumerate(body.inputs[f"@s{j}"].ids)})
        elif region.in_place(j):  # an array read whole: ("@a", (j, element or None))
            nodes = _stream_nodes(body, j, region)
            fixed[nodes[0]] = ("@a", (j, None))
            fixed.update({x: ("@a", (j, body.nodes[x].attr[1])) for x in nodes[1:]})
    return fixed


def _closure(body: Graph, fixed) -> list[bool]:
    """Per node: a constant, an input for which `fixed(i, node)` holds, or an op (not a
    region's) on such nodes alone."""
    same = [False] * len(body.nodes)
    for i, node in enumerate(body.nodes):
        if node.op == "const":
            same[i] = True
        elif node.op in LEAVES:
            same[i] = fixed(i, node)
        elif node.op not in _VARIANT:
            same[i] = all(same[a] for a in node.args)
    return same


def _frontier(body: Graph, same: list[bool]) -> list[int]:
    """The ops among `same` whose values the rest of the body reads, or its outputs are:
    what a moved computation hands back, in node order."""
    wanted = set()
    for node in body.nodes:
        if node.op in LEAVES or node.op in _VARIANT or not all(same[a] for a in node.args):
            wanted.update(a for a in node.args if same[a])
    for port in body.outputs.values():
        wanted.update(i for i in port.ids if same[i])
    return sorted(i for i in wanted if body.nodes[i].op not in LEAVES)


def _moved_out(b: Builder, region: Region, args: list[int]):
    """(region, args) with the body's invariant work built in `b` before the region node and
    passed in as captures after the region's own; None where the body has none."""
    body = region.body
    same = invariant_nodes(region)
    frontier = _frontier(body, same)
    if not frontier:
        return None
    outside = _builder_of(b, region, args)
    at = region.captures
    given = {i: ("@c", at + f) for f, i in enumerate(frontier)}
    bb, ids = _copied(body, given, dropped=_ops(body, same))
    inputs, outputs = _ports(body, ids)
    inputs["@c"] = _grown(inputs["@c"], [ids[i] for i in frontier])
    grown = Region(region.n, bb.graph(inputs, outputs), at + len(frontier), region.streams,
                   region.combine, region.carry, region.whole)
    return grown, args[:at] + [outside(i) for i in frontier] + args[at:]


def _lifted(b: Builder, region: Region, args: list[int]):
    """(region, args) where a loop inside the body does, in each of its iterations, work the
    same in every iteration of this loop: that work as a map region built in `b` before this
    one, whose rows the inner loop streams through more captures of this one; None where no
    inner loop has such work."""
    body = region.body
    same = invariant_nodes(region)
    outside = _builder_of(b, region, args)
    lifts = {}  # inner region node -> (its rows' map region in b, rows, row width, new body)
    for q, node in enumerate(body.nodes):
        if node.op == "region":
            lift = _inner_lift(b, node.attr, node.args, same, outside)
            if lift is not None:
                lifts[q] = lift
    if not lifts:
        return None
    at = region.captures
    rows = [b.part(h, k) for h, n, m, _ in lifts.values() for k in range(n * m)]
    first, k = {}, at  # inner region node -> the capture its rows start at
    for q, (_, n, m, _) in lifts.items():
        first[q], k = k, k + n * m

    def streaming(bb: Builder, inner: Region, qargs: list[int], q: int):
        if q not in lifts:
            return inner, qargs
        _, n, m, qbody = lifts[q]
        caps, streams = split_args(inner, qargs)
        grown = Region(inner.n, qbody, inner.captures, inner.streams + ((n * m, m, 0),),
                       inner.combine, inner.carry,
                       inner.whole + (-1,) if inner.whole else ())
        new = [bb.input("@c", first[q] + k) for k in range(n * m)]
        return _trimmed(grown, caps + [a for s in streams for a in s] + new +
                        initial_state(inner, qargs))

    bb, ids = _copied(body, regions=streaming)
    inputs, outputs = _ports(body, ids)
    inputs["@c"] = _grown(inputs["@c"], [bb.input("@c", at + k) for k in range(len(rows))])
    grown = Region(region.n, bb.graph(inputs, outputs), at + len(rows), region.streams,
                   region.combine, region.carry, region.whole)
    return grown, args[:at] + rows + args[at:]


def _inner_lift(b: Builder, inner: Region, qargs, same: list[bool], outside):
    """(map region node in `b`, rows, row width, the inner body reading those rows as a last
    stream) for the work of region `inner` (a node of a body whose invariant nodes are
    `same`) that depends on its index and on values the same in every outer iteration
    alone; None where there is none worth moving."""
    qb = inner.body
    caps = [k for k in range(inner.captures) if same[qargs[k]]]
    _, streams = split_args(inner, qargs)
    # streams of values the same in every outer iteration: elements, or an array read whole
    kept = [j for j, ids in enumerate(streams) if all(same[a] for a in ids) and
            not inner.in_place(j)]
    fixed = _renamed(qb, caps, kept)
    lift = _closure(qb, lambda i, node: i in fixed)
    frontier = _frontier(qb, lift)
    if not frontier:
        return None
    read = {a for i, node in enumerate(qb.nodes[:frontier[-1] + 1])
            if lift[i] and node.op not in LEAVES for a in node.args}
    caps = [k for k in caps if qb.inputs["@c"].ids[k] in read]
    kept = [j for j in kept if any(x in read for x in qb.inputs[f"@s{j}"].ids)]
    fixed = _renamed(qb, caps, kept)  # the map region's inputs: those the moved work reads
    ops = [node.op for i, node in enumerate(qb.nodes[:frontier[-1] + 1])
           if lift[i] and node.op not in LEAVES]
    if set(ops) <= CHEAP and len(ops) <= len(frontier):
        return None
    # The rows are listed in the outer body (captures): at most twice the elements they are
    # computed from, which it lists already, so the graph does not grow with the data more.
    if inner.n * len(frontier) > 2 * (len(caps) + sum(inner.streams[j][0] for j in kept)):
        return None
    hb, ids = _copied(qb, fixed, upto=frontier[-1], dropped={
        i for i, x in enumerate(lift) if not x or qb.nodes[i].op == "input"})
    ports = {"@i": Port((1,), (ids[qb.inputs["@i"].ids[0]],)),
             "@c": Port((len(caps),), tuple(ids[qb.inputs["@c"].ids[k]] for k in caps))}
    for j2, j in enumerate(kept):
        ports[f"@s{j2}"] = Port((qb.inputs[f"@s{j}"].size,),
                                tuple(ids[x] for x in qb.inputs[f"@s{j}"].ids))
    rows = hb.graph(ports, {"@sum": Port((0,), ()),
                            "@map": Port((len(frontier),), tuple(ids[i] for i in frontier))})
    whole = tuple(inner.source(j) for j in kept)
    h = b.region(Region(inner.n, rows, len(caps), tuple(inner.streams[j] for j in kept), (),
                        0, whole if any(k >= 0 for k in whole) else ()),
                 [outside(qargs[k]) for k in caps] + [outside(a) for j in kept
                                                       for a in streams[j]])
    j = len(inner.streams)
    given = {i: (f"@s{j}", f) for f, i in enumerate(frontier)}
    bb, ids = _copied(qb, given, dropped=_ops(qb, lift))
    inputs, outputs = _ports(qb, ids)
    inputs[f"@s{j}"] = Port((len(frontier),), tuple(ids[i] for i in frontier))
    return h, inner.n, len(frontier), bb.graph(inputs, outputs)


def _renamed(qb: Graph, caps: list[int], kept: list[int]) -> dict[int, tuple[str, int]]:
    """Body `qb`'s index, captures `caps` and streams `kept`, as the inputs of a body that
    takes those alone: node -> (port name, element)."""
    fixed = {qb.inputs["@i"].ids[0]: ("@i", 0)}
    fixed.update({qb.inputs["@c"].ids[k]: ("@c", c) for c, k in enumerate(caps)})
    for j2, j in enumerate(kept):
        fixed.update({x: (f"@s{j2}", t) for t, x in enumerate(qb.inputs[f"@s{j}"].ids)})
    return fixed


def _trimmed(region: Region, args: list[int]) -> tuple[Region, list[int]]:
    """The region without the captures and the streams its body no longer reads."""
    body = region.body
    read = {a for node in body.nodes for a in node.args}
    read.update(i for port in body.outputs.values() for i in port.ids)
    caps = body.inputs["@c"].ids
    keep = [k for k, i in enumerate(caps) if i in read]
    # a port read in place: its array node, then the elements the body reads alone
    streams = [_stream_nodes(body, j, region) for j in range(len(region.streams))]
    kept = [j for j, ids in enumerate(streams) if any(x in read for x in ids)]
    if len(keep) == len(caps) and len(kept) == len(streams):
        return region, args
    # The inputs kept are renamed in place, in their order (captures in a row stay in a row,
    # which a stream of them reads in place), and `prune` drops the others: no node of the
    # body is made again (a GMM's body holds 10^5 captures of its factors).
    nodes = list(body.nodes)
    for c, k in enumerate(keep):
        if c != k:
            nodes[caps[k]] = Node("input", (), ("@c", c))
    for j2, j in enumerate(kept):
        for x in streams[j] if j2 != j else ():
            nodes[x] = Node(nodes[x].op, (), (f"@s{j2}", nodes[x].attr[1]))
    inputs = {name: p for name, p in body.inputs.items() if name in ("@i", "@h")}
    inputs["@c"] = Port((len(keep),), tuple(caps[k] for k in keep), body.inputs["@c"].span)
    for j2, j in enumerate(kept):
        port = body.inputs[f"@s{j}"]
        inputs[f"@s{j2}"] = Port(port.shape, port.ids, None, port.whole)
    new_body = prune(nodes, inputs, dict(body.outputs))
    whole = tuple(region.source(j) for j in kept)
    trimmed = Region(region.n, verify(new_body) if verifying() else new_body, len(keep),
                     tuple(region.streams[j] for j in kept), region.combine, region.carry,
                     whole if any(k >= 0 for k in whole) else ())
    captured, streamed = split_args(region, args)
    return trimmed, [captured[k] for k in keep] + [a for j in kept for a in streamed[j]] + \
        initial_state(region, args)


def _stream_nodes(body: Graph, j: int, region: Region) -> list[int]:
    """The body's input nodes of stream j: its port's elements, or, for a port read in place,
    its array node and the elements read alone."""
    port = body.inputs[f"@s{j}"]
    if not region.in_place(j):
        return list(port.ids)
    return [port.whole[0]] + read_alone(body.nodes, f"@s{j}")


def _builder_of(b: Builder, region: Region, args: list[int]):
    """`outside(i)`: invariant node i of the region's body (its arguments in `b` are
    `args`) built in `b`, once."""
    body = region.body
    captured, streams = split_args(region, args)
    made: dict[int, int] = {}
    for i, (kind, at) in _fixed_inputs(region).items():
        if kind == "@a":  # the array read whole, or its element read alone
            whole = streams[at[0]][0]
            made[i] = whole if at[1] is None else b.part(whole, at[1])
            continue
        made[i] = captured[at] if kind == "@c" else streams[at[0]][at[1]]

    def outside(i: int) -> int:
        if i not in made:
            node = body.nodes[i]
            made[i] = b.const(node.attr) if node.op == "const" else \
                b.op(node.op, *(outside(a) for a in node.args))
        return made[i]
    return outside


def _copied(graph: Graph, given=None, dropped=frozenset(), regions=None, upto=None):
    """(builder, ids): `graph`'s nodes (up to node `upto`) rebuilt, node i of `given` as the
    input `given[i]` (port name, element), those in `dropped` left out, and each region
    node made as `regions(builder, region, args, i)` gives, where `regions` is given."""
    bb = Builder()
    given = given or {}
    ids: list[int] = [-1] * len(graph.nodes)
    nodes = graph.nodes[:None if upto is None else upto + 1]
    # The leaves kept as they are first (they read nothing), taken whole: a body's 10^5
    # captures cost a table entry each, not a node made each.
    plain = [i for i, node in enumerate(nodes)
             if node.op in LEAVES and i not in given and i not in dropped]
    for i, new in zip(plain, bb.leaves([nodes[i] for i in plain]), strict=True):
        ids[i] = new
    for i, node in enumerate(nodes):
        if i in given:
            ids[i] = bb.input(*given[i])
        elif i in dropped or node.op in LEAVES:
            continue
        elif node.op == "region":
            region, args = node.attr, [ids[a] for a in node.args]
            if regions is not None:
                region, args = regions(bb, region, args, i)
            ids[i] = bb.region(region, args)
        elif node.op == "part":
            ids[i] = bb.part(ids[node.args[0]], node.attr)
        else:
            ids[i] = bb.op(node.op, *(ids[a] for a in node.args))
    return bb, ids


def _ops(graph: Graph, flags: list[bool]) -> set[int]:
    """The nodes flagged that are not leaves: moved work a copy leaves out."""
    return {i for i, x in enumerate(flags) if x and graph.nodes[i].op not in LEAVES}


def _ports(graph: Graph, ids: list[int]) -> tuple[dict, dict]:
    """`graph`'s input and output ports moved to the new ids."""
    return ({name: p.moved(ids) for name, p in graph.inputs.items()},
            {name: p.moved(ids) for name, p in graph.outputs.items()})


def _grown(port: Port, more: list[int]) -> Port:
    return Port((port.size + len(more),), port.ids + tuple(more), port.span)
