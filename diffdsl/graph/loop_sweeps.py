"""Derivatives of regions are regions (DESIGN.md, decision 9).

The pullback of a region is a region over the same iterations whose body is the pullback of
its body: the sums' cotangents are captured (the same in every iteration), the map outputs'
cotangents are one more stream; it sums the cotangents of the captured values over the
iterations and stacks those of each iteration's stream window, which are then added into the
elements each iteration read (overlapping windows, `x[i]` and `x[i + 1]`, accumulate). The
tangent of a region is a region whose body is the tangent of its body, the tangents of the
captures captured and those of the streams streamed. Only what is active is differentiated:
a stream of data that no derivative is taken by is read, never given a cotangent.

The sweeps of sweeps.py call these with themselves (`sweep`), since a body's derivative is
taken by the same sweeps as any graph.
"""

from __future__ import annotations

from .ir import Builder, Port
from .loops import body_graph, inline, split_args
from .region import Region


def _body_inputs(bb: Builder, region: Region, extra_captures: int, extra_widths: list[int]):
    """Input nodes of a derivative body: "@i", "@c" (the region's captures, then
    `extra_captures`), the region's streams, then one stream per extra width."""
    ports = {"@i": [bb.input("@i", 0)],
             "@c": [bb.input("@c", k) for k in range(region.captures + extra_captures)]}
    widths = region.widths() + extra_widths
    for j, w in enumerate(widths):
        ports[f"@s{j}"] = [bb.input(f"@s{j}", k) for k in range(w)]
    return ports


def _ports(ports: dict) -> dict[str, Port]:
    return {name: Port((len(ids),), tuple(ids)) for name, ids in ports.items()}


def _at_winner(bb: Builder, index: int, winner: int, value: int) -> int:
    """`value` in the iteration a min or max came from, 0 in the others."""
    return bb.select(bb.op("eq", index, winner), value, bb.const(0.0))


def region_pullback(b: Builder, at: int, node, cts: dict[int, int], active: bytearray,
                    sweep) -> list:
    """The cotangent parts of the arguments of region node `at` (None where none), given
    the cotangents `cts` of its values; `sweep` is the module of the sweeps. A min or max
    sends its cotangent to the iteration it came from (its winner, captured)."""
    region: Region = node.attr
    captures, streams = split_args(region, node.args)
    p, q, n = region.sums, region.maps, region.n
    won = region.winners
    seeded_maps = q > 0 and any(p + k in cts for k in range(n * q))
    bb = Builder()
    ports = _body_inputs(bb, region, p + len(won), [q] if seeded_maps else [])
    given = {"@i": ports["@i"], "@c": ports["@c"][:region.captures]}
    for j in range(len(streams)):
        given[f"@s{j}"] = ports[f"@s{j}"]
    out = inline(bb, region.body, given)
    seeds = []
    for e in range(p):
        if e in cts:
            seed = ports["@c"][region.captures + e]
            if e in won:
                winner = ports["@c"][region.captures + p + won.index(e)]
                seed = _at_winner(bb, ports["@i"][0], winner, seed)
            seeds.append((out["@sum"][e], seed))
    if seeded_maps:
        seed_port = ports[f"@s{len(streams)}"]
        seeds += [(out["@map"][t], seed_port[t]) for t in range(q)]
    live_caps = [k for k, a in enumerate(captures) if active[a]]
    live_streams = [j for j, ids in enumerate(streams) if any(active[a] for a in ids)]
    sources = {ports["@c"][k] for k in live_caps}
    sources |= {i for j in live_streams for i in ports[f"@s{j}"]}
    ct = sweep.reverse(bb, len(bb.nodes), sweep.active_nodes(bb, sources), seeds)
    zero = bb.const(0.0)
    sums = [ct.get(ports["@c"][k], zero) for k in live_caps]
    maps = [ct.get(i, zero) for j in live_streams for i in ports[f"@s{j}"]]
    body = body_graph(bb.nodes, _ports(ports), sums, maps)
    seed_args = [cts.get(e, b.const(0.0)) for e in range(p)]
    seed_args += [b.part(at, region.winner_value(e)) for e in won]
    new_streams = list(region.streams)
    stream_args = [a for ids in streams for a in ids]
    if seeded_maps:
        new_streams.append((n * q, q, 0))
        stream_args += [cts.get(p + k, b.const(0.0)) for k in range(n * q)]
    back = Region(n, body, region.captures + p + len(won), tuple(new_streams))
    r = b.region(back, captures + seed_args + stream_args)
    parts: list = [None] * len(node.args)
    for m, k in enumerate(live_caps):
        parts[k] = b.part(r, m)
    width = len(maps)  # the map outputs of one iteration
    column = 0
    bases = _stream_bases(region)
    for j in live_streams:
        _, stride, offset = region.streams[j]
        w = region.widths()[j]
        for i in range(n):
            for t in range(w):
                arg = bases[j] + offset + stride * i + t
                v = b.part(r, len(sums) + i * width + column + t)
                parts[arg] = v if parts[arg] is None else b.add(parts[arg], v)
        column += w
    return parts


def _stream_bases(region: Region) -> list[int]:
    """Where each stream's elements start among a region node's arguments."""
    bases, at = [], region.captures
    for length, _, _ in region.streams:
        bases.append(at)
        at += length
    return bases


def region_tangent(b: Builder, at: int, node, ts: list, sweep) -> int:
    """A region node whose values are the tangents of those of region node `at`, given the
    tangents `ts` of its arguments (None where none): its sums and maps, and no winners (a
    winner is piecewise constant). A min's or max's tangent is the one of its winner."""
    region: Region = node.attr
    won = region.winners
    k = region.captures
    captures, streams = split_args(region, node.args)
    cap_t = [c for c in range(k) if ts[c] is not None]
    bases = _stream_bases(region)
    stream_t = [j for j, (length, _, _) in enumerate(region.streams)
                if any(ts[bases[j] + e] is not None for e in range(length))]
    bb = Builder()
    widths = region.widths()
    ports = _body_inputs(bb, region, len(cap_t) + len(won), [widths[j] for j in stream_t])
    given = {"@i": ports["@i"], "@c": ports["@c"][:k]}
    for j in range(len(streams)):
        given[f"@s{j}"] = ports[f"@s{j}"]
    out = inline(bb, region.body, given)
    tangents = {ports["@c"][c]: ports["@c"][k + m] for m, c in enumerate(cap_t)}
    for m, j in enumerate(stream_t):
        for x, dx in zip(ports[f"@s{j}"], ports[f"@s{len(streams) + m}"], strict=True):
            tangents[x] = dx
    t = sweep.forward(bb, len(bb.nodes), sweep.active_nodes(bb, set(tangents)), tangents)
    zero = bb.const(0.0)
    sums = [t.get(i, zero) for i in out["@sum"]]
    for w, e in enumerate(won):
        winner = ports["@c"][k + len(cap_t) + w]
        sums[e] = _at_winner(bb, ports["@i"][0], winner, sums[e])
    body = body_graph(bb.nodes, _ports(ports), sums, [t.get(i, zero) for i in out["@map"]])
    zero_outer = b.const(0.0)
    args = captures + [ts[c] for c in cap_t] + [b.part(at, region.winner_value(e)) for e in won]
    args += [a for ids in streams for a in ids]
    new_streams = list(region.streams)
    for j in stream_t:
        new_streams.append(region.streams[j])
        args += [ts[bases[j] + e] if ts[bases[j] + e] is not None else zero_outer
                 for e in range(region.streams[j][0])]
    return b.region(Region(region.n, body, k + len(cap_t) + len(won), tuple(new_streams)),
                    args)
