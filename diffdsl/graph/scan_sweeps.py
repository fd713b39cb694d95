"""Derivatives of scans (DESIGN.md, decision 9): a `for` loop kept as a loop, whose state goes
from each iteration to the next.

The pullback of a scan is a scan that runs backwards over the same iterations. It carries the
cotangent of the state: each iteration seeds the body's pullback with it (at the body's next
state) and with the cotangents of the sums and of that iteration's map outputs, and passes on
the cotangent of the state the iteration read. The state each iteration read is stored first,
by a copy of the scan that stacks it (memory: iterations × state), and streamed back in
reverse. Captures' cotangents are summed over the iterations and stream windows' stacked, as
for a region without state (loop_sweeps.py); the final carry is the cotangent of the initial
state. The tangent of a scan is a scan carrying the state and its tangent together.

Guards: where a select in the body makes a carried derivative exactly 0 in some iterations,
the scan carries beside it an indicator of where it may be nonzero, which seeds the next
iteration's guard, so that an infinite partial derivative (sqrt'(0) of a state a branch left
at 0) meets a select, not 0 * inf. Bodies are built without indicators first and again with
them only where some guard turned up.
"""

from __future__ import annotations

from . import checkpoints
from .ir import Builder
from .loop_sweeps import (
    _at_winner,
    _indicator,
    _stream_bases,
    present,
    seeded_guards,
    tangent_args,
    tangent_choice,
    tangent_seeds,
    tangent_value,
)
from .loops import (
    body_graph,
    body_ports,
    initial_state,
    inline,
    split_args,
    stored_region,
    stream_inputs,
)
from .region import Region


def stored_states(b: Builder, node) -> int:
    """A copy of scan `node` that stacks the state each iteration reads: that of iteration i,
    element k, is its value i * carry + k (the pullback streams it whole)."""
    return b.region(stored_region(node.attr), node.args)


def _inputs(bb: Builder, region: Region, captures: int, widths: list[int], carry: int) -> dict:
    ports = {"@i": [bb.input("@i", 0)], "@c": [bb.input("@c", k) for k in range(captures)]}
    ports.update(stream_inputs(bb, region, widths))
    ports["@h"] = [bb.input("@h", k) for k in range(carry)]
    return ports


def _reverse_body(region: Region, sweep, seeded: list, seeded_maps: int, live_caps: list,
                  live_streams: list, guards: bool, live: set, sum_g: list) -> tuple:
    """The body of a scan's pullback; with it whether the body computes a cotangent of each
    captured value, stream element and state element, and whether some carry a guard. Only
    the state elements in `live` carry a cotangent that may be nonzero."""
    m, n, p, q, c = region.carry, region.n, region.sums, region.maps, region.captures
    won = region.winners
    streams = len(region.streams)
    bb = Builder()
    widths = region.widths() + [m] + [q] * seeded_maps  # seeds, then where they are given
    ports = _inputs(bb, region, c + p + len(won) + len(sum_g), widths, 2 * m if guards else m)
    carried, shown = ports["@h"][:m], ports["@h"][m:]
    forward_index = bb.sub(bb.const(float(n - 1)), ports["@i"][0])
    given = {"@i": [forward_index], "@c": ports["@c"][:c], "@h": ports[f"@s{streams}"]}
    for j in range(streams):
        given[f"@s{j}"] = ports[f"@s{j}"]
    out = inline(bb, region.body, given)
    seeds, seed_guards = [], {}
    for k in sorted(live):
        seeds.append((out["@next"][k], carried[k]))
        if guards:
            seed_guards[carried[k]] = bb.op("ne", shown[k], bb.const(0.0))
    for e in seeded:
        seed = ports["@c"][c + e]
        held = None  # where the seed may be nonzero: its guard outside, its winner
        if e in sum_g:
            held = bb.op("ne", ports["@c"][c + p + len(won) + sum_g.index(e)], bb.const(0.0))
        if e in won:
            winner = ports["@c"][c + p + won.index(e)]
            seed = _at_winner(bb, forward_index, winner, seed)
            won_here = bb.op("eq", forward_index, winner)
            held = won_here if held is None else bb.op("and", held, won_here)
        if held is not None:
            seed_guards[seed] = held
        seeds.append((out["@sum"][e], seed))
    if seeded_maps:
        seeds += [(out["@map"][t], ports[f"@s{streams + 1}"][t]) for t in range(q)]
    if seeded_maps == 2:
        seed_guards.update(seeded_guards(bb, ports[f"@s{streams + 1}"],
                                         ports[f"@s{streams + 2}"]))
    cap_nodes = [ports["@c"][k] for k in live_caps]
    map_nodes = [i for j in live_streams for i in ports[f"@s{j}"]]
    state_nodes = ports[f"@s{streams}"]
    sources = set(cap_nodes) | set(map_nodes) | set(state_nodes)
    inner: dict = {}
    ct = sweep.reverse(bb, len(bb.nodes), sweep.active_nodes(bb, sources), seeds,
                       guards_out=inner, seed_guards=seed_guards)
    zero = bb.const(0.0)
    every = cap_nodes + map_nodes + state_nodes
    sums = [ct.get(x, zero) for x in cap_nodes]
    maps = [ct.get(x, zero) for x in map_nodes]
    nexts = [ct.get(x, zero) for x in state_nodes]
    combine: tuple = ()
    if guards:
        sums += [_indicator(bb, x in ct, inner.get(x)) for x in cap_nodes]
        maps += [_indicator(bb, x in ct, inner.get(x)) for x in map_nodes]
        nexts += [_indicator(bb, x in ct, inner.get(x)) for x in state_nodes]
        combine = ("add",) * len(cap_nodes) + ("max",) * len(cap_nodes)
    body = body_graph(bb.nodes, body_ports(bb, ports), sums, maps, nexts)
    found = any(x in ct and inner.get(x) is not None for x in every)
    return body, combine, {x: x in ct for x in every}, found, (cap_nodes, map_nodes,
                                                               state_nodes)


def scan_pullback(b: Builder, at: int, node, cts: dict[int, int], active: bytearray,
                  sweep, guards: dict) -> tuple[list, list]:
    """`loop_sweeps.region_pullback` for a scan: the cotangent parts of its arguments, and
    beside each the condition under which it may be nonzero (None: always)."""
    region: Region = node.attr
    m, n, p, q = region.carry, region.n, region.sums, region.maps
    won = region.winners
    captures, streams = split_args(region, node.args)
    seeded = [e for e in range(p) if e in cts]
    # 1: map outputs' cotangents are streamed; 2: an indicator stream says where they are.
    seeded_maps = q > 0 and any(p + k in cts for k in range(n * q))
    values = range(p, p + n * q)
    seeded_maps += seeded_maps and not all(v in cts and guards.get(v) is None for v in values)
    sum_g = [e for e in seeded if guards.get(e) is not None]
    ends = [region.carry_value(k) for k in range(m)]  # the final state's values
    live_caps = [k for k, a in enumerate(captures) if active[a]]
    live_streams = [j for j, ids in enumerate(streams) if any(active[a] for a in ids)]
    # The state elements whose cotangent may be nonzero: seeded at the end, or reached by
    # the body's pullback from one that is (a fixed point).
    live = {k for k in range(m) if region.carry_value(k) in cts}
    while True:
        made = _reverse_body(region, sweep, seeded, seeded_maps, live_caps, live_streams,
                             False, live, sum_g)
        state_nodes = made[4][2]
        grown = live | {k for k in range(m) if made[2][state_nodes[k]]}
        if grown == live:
            break
        live = grown
    # Guards where the body's select makes one 0, or where a live element's cotangent is 0
    # from some iteration on (a state the body writes and never reads): 0 * inf there.
    # or where a final state's cotangent is under a guard outside.
    # A live element without a cotangent at the end carries a runtime 0 until the body
    # gives it one: guarded too.
    guarded = made[3] or any(not made[2][state_nodes[k]] or ends[k] not in cts
                             or guards.get(ends[k]) is not None for k in live)
    if guarded:
        made = _reverse_body(region, sweep, seeded, seeded_maps, live_caps, live_streams,
                             True, live, sum_g)
    body, combine, reached, _, (cap_nodes, map_nodes, state_nodes) = made
    zero = b.const(0.0)
    args = captures + [cts.get(e, zero) for e in range(p)]
    args += [b.part(at, region.winner_value(e)) for e in won]
    args += present(b, [True] * len(sum_g), [guards[e] for e in sum_g])
    args += [a for ids in streams for a in ids]
    states_at = len(args)  # the stored states' argument, and their stream:
    back_streams = [(length, -stride, offset + stride * (n - 1))
                    for length, stride, offset in region.streams]
    back_streams.append((n * m, -m, (n - 1) * m))
    if seeded_maps:
        back_streams.append((n * q, -q, (n - 1) * q))
        args += [cts.get(p + k, zero) for k in range(n * q)]
    if seeded_maps == 2:
        back_streams.append((n * q, -q, (n - 1) * q))
        args += present(b, [v in cts for v in values], [guards.get(v) for v in values])
    final = [cts.get(v, zero) for v in ends]
    if guarded:
        final += present(b, [v in cts for v in ends], [guards.get(v) for v in ends])
    whole = [region.source(j) for j in range(len(region.streams))] + [0]
    whole += [-1] * seeded_maps
    back = Region(n, body, region.captures + p + len(won) + len(sum_g), tuple(back_streams),
                  combine, len(final), tuple(whole))
    segment = checkpoints.segment_length(n, m)
    if segment:  # too many states to store: one a segment, the others computed again
        read = checkpoints.pullback(b, node, back, args, len(region.streams), final, segment)
    else:
        r = b.region(back, args[:states_at] + [stored_states(b, node)] + args[states_at:]
                     + final)

        def read(v: int) -> int:
            return b.part(r, v)
    parts: list = [None] * len(node.args)
    shown: list = [None] * len(node.args)
    for e, k in enumerate(live_caps):
        if reached[cap_nodes[e]]:
            parts[k] = read(e)
            if guarded:
                shown[k] = read(len(cap_nodes) + e)
    width = back.maps
    column = 0
    bases = _stream_bases(region)
    widths = region.widths()
    for j in live_streams:
        _, stride, offset = region.streams[j]
        w = widths[j]
        for i in range(n):
            row = n - 1 - i  # the pullback runs the iterations backwards
            for t in range(w):
                if not reached[map_nodes[column + t]]:
                    continue
                arg = bases[j] + offset + stride * i + t
                value = back.sums + row * width + column + t
                v = read(value)
                parts[arg] = v if parts[arg] is None else b.add(parts[arg], v)
                if guarded:
                    g = read(value + len(map_nodes))
                    shown[arg] = g if shown[arg] is None else b.add(shown[arg], g)
        column += w
    first = len(node.args) - m
    for k in range(m):
        if reached[state_nodes[k]]:
            parts[first + k] = read(back.carry_value(k))
            if guarded:
                shown[first + k] = read(back.carry_value(m + k))
    conds = [None if s is None else b.op("ne", s, zero) for s in shown]
    return parts, conds


def _tangent_body(region: Region, sweep, chosen: tuple, guards: bool, live: set):
    m, c = region.carry, region.captures
    won = region.winners
    cap_t, cap_g, stream_t, partial = chosen
    widths = region.widths()
    bb = Builder()
    ports = _inputs(bb, region, c + len(cap_t) + len(won) + len(cap_g),
                    widths + [widths[j] for j in stream_t + partial], (3 if guards else 2) * m)
    state, dstate, shown_in = (ports["@h"][:m], ports["@h"][m:2 * m], ports["@h"][2 * m:])
    given = {"@i": ports["@i"], "@c": ports["@c"][:c], "@h": state}
    for j in range(len(widths)):
        given[f"@s{j}"] = ports[f"@s{j}"]
    out = inline(bb, region.body, given)
    tangents, seed_guards = tangent_seeds(bb, ports, region, chosen)
    tangents.update((state[k], dstate[k]) for k in live)
    if guards:
        seed_guards.update((state[k], bb.op("ne", shown_in[k], bb.const(0.0))) for k in live)
    inner: dict = {}
    t = sweep.forward(bb, len(bb.nodes), sweep.active_nodes(bb, set(tangents)), tangents,
                      guards_out=inner, seed_guards=seed_guards)
    zero = bb.const(0.0)
    sums = [t.get(i, zero) for i in out["@sum"]]
    maps = [t.get(i, zero) for i in out["@map"]]
    nexts = list(out["@next"]) + [t.get(i, zero) for i in out["@next"]]
    every = list(out["@sum"]) + list(out["@map"]) + list(out["@next"])
    found = any(x in t and inner.get(x) is not None for x in every)
    shown = [_indicator(bb, x in t, inner.get(x)) for x in out["@sum"]] if guards else []
    for w, e in enumerate(won):
        winner = ports["@c"][c + len(cap_t) + w]
        sums[e] = _at_winner(bb, ports["@i"][0], winner, sums[e])
        if guards:
            shown[e] = _at_winner(bb, ports["@i"][0], winner, shown[e])
    combine: tuple = ()
    if guards:
        maps += [_indicator(bb, x in t, inner.get(x)) for x in out["@map"]]
        nexts += [_indicator(bb, x in t, inner.get(x)) for x in out["@next"]]
        combine = ("add",) * len(sums) + ("max",) * len(sums)
        sums += shown
    body = body_graph(bb.nodes, body_ports(bb, ports), sums, maps, nexts)
    reached = tuple(x in t for x in every)
    return body, combine, reached, found


def scan_tangent(b: Builder, at: int, node, ts: list, sweep, gs: list) -> tuple:
    """`loop_sweeps.region_tangent` for a scan: a scan carrying the state and its tangent,
    whose values hold the tangents of the values of scan `at`; `scan_tangent_value` reads
    it."""
    region: Region = node.attr
    m, k = region.carry, region.captures
    first = len(node.args) - m
    chosen = tangent_choice(region, ts, gs)
    cap_t, cap_g, _, _ = chosen
    # The state elements whose tangent may be nonzero: given one, or reached from one that
    # is (a fixed point); guards where one becomes exactly 0, as in `scan_pullback`.
    p, q = region.sums, region.maps
    live = {e for e in range(m) if ts[first + e] is not None}
    while True:
        made = _tangent_body(region, sweep, chosen, False, live)
        grown = live | {e for e in range(m) if made[2][p + q + e]}
        if grown == live:
            break
        live = grown
    guards = made[3] or any(not made[2][p + q + e] or ts[first + e] is None
                            or gs[first + e] is not None for e in live)
    if guards:
        made = _tangent_body(region, sweep, chosen, True, live)
    body, combine, reached, _ = made
    zero = b.const(0.0)
    args, new_streams = tangent_args(b, at, node, ts, gs, chosen)
    dstate = [ts[first + e] for e in range(m)]
    args += initial_state(region, node.args) + [x if x is not None else zero for x in dstate]
    if guards:
        args += present(b, [x is not None for x in dstate], gs[first:])
    tangent = Region(region.n, body, k + len(cap_t) + len(region.winners) + len(cap_g),
                     tuple(new_streams), combine, len(body.outputs["@next"].ids))
    return b.region(tangent, args), ("scan", guards, reached, tangent)


def scan_tangent_value(region: Region, made: tuple, value: int) -> tuple | None:
    """`loop_sweeps.tangent_value` for a scan's tangent (`made` as `scan_tangent` returned
    it): where it holds the tangent of value `value`, and its guard's indicator."""
    _, guarded, reached, tangent = made
    m, p, q = region.carry, region.sums, region.maps
    sums_maps = p + q
    if value < region.size - m:
        return tangent_value(region, (guarded, reached[:sums_maps]), value)
    e = value - (region.size - m)
    if not reached[sums_maps + e]:
        return None
    return tangent.carry_value(m + e), (tangent.carry_value(2 * m + e) if guarded else None)
