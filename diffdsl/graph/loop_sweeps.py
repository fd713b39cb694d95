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

from .ir import Builder
from .loops import body_graph, body_ports, inline, read_alone, split_args, stream_inputs
from .region import Region
from .wholes import WholeCt


def _body_inputs(bb: Builder, region: Region, extra_captures: int, extra_widths: list[int]):
    """Input nodes of a derivative body: "@i", "@c" (the region's captures, then
    `extra_captures`), the region's streams, then one stream per extra width."""
    ports = {"@i": [bb.input("@i", 0)],
             "@c": [bb.input("@c", k) for k in range(region.captures + extra_captures)]}
    ports.update(stream_inputs(bb, region, region.widths() + extra_widths))
    return ports


def _indicator(bb: Builder, present: bool, guard) -> int:
    """1 where a derivative the body computed may be nonzero, 0 where it is exactly 0 (no
    path, or a branch not taken): the sweeps' guard, carried out of the region."""
    if not present:
        return bb.const(0.0)
    return bb.const(1.0) if guard is None else bb.select(guard, bb.const(1.0), bb.const(0.0))


def _at_winner(bb: Builder, index: int, winner: int, value: int) -> int:
    """`value` in the iteration a min or max came from, 0 in the others."""
    return bb.select(bb.op("eq", index, winner), value, bb.const(0.0))


# A stream of stride 0 read by at most this many iterations keeps its cotangents stacked,
# added outside: an inner loop's rows added in place where the outer body's sums lie
# (llvm_loops.accumulates) run faster so than sums of the inner loop's own.
STACKED = 64


def region_pullback(b: Builder, at: int, node, cts: dict[int, int], active: bytearray,
                    sweep, guards: dict, guards_wanted: bool = True,
                    whole_seeds: tuple = ()) -> tuple[list, list]:
    """The cotangent parts of the arguments of region node `at` (None where none), given
    the cotangents `cts` of its values, and beside each the condition under which it may be
    nonzero (None: always); `sweep` is the module of the sweeps. A min or max sends its
    cotangent to the iteration it came from (its winner, captured).

    Where a cotangent inside the body is exactly 0 in some iterations (a select's branch not
    taken), the region also returns where it is not (the sweep's guard: an indicator, its
    maximum over the iterations for a capture), so that a partial derivative outside that
    is infinite there meets a select, not 0 * inf. The same holds inward: `guards` holds the
    guard (outside) of each value's cotangent, and a seed under a guard carries its
    indicator into the body. With `guards_wanted` False no one reads the guards of the
    arguments' cotangents (inputs of the outermost graph), and the body carries none out.

    `whole_seeds` add more cotangents to every map output: each a `WholeCt`, iteration i's
    where a loop that read the region's values whole left them (windows that tile the
    values, unguarded). The pullback streams them from there, not a part node each."""
    region: Region = node.attr
    captures, streams = split_args(region, node.args)
    p, q, n = region.sums, region.maps, region.n
    won = region.winners
    seeded_maps = q > 0 and any(p + k in cts for k in range(n * q))  # value by value
    # Where only some map outputs have a cotangent, or some under a guard, a stream of
    # indicators says where: the others' seeds are 0, guarded, not 0 that meets an infinite
    # partial as 0 * inf.
    values = range(p, p + n * q)
    partial = seeded_maps and not all(v in cts and guards.get(v) is None for v in values)
    sum_g = [e for e in range(p) if e in cts and guards.get(e) is not None]
    bb = Builder()
    ports = _body_inputs(bb, region, p + len(won) + len(sum_g),
                         [q] * (seeded_maps + partial + len(whole_seeds)))
    given = {"@i": ports["@i"], "@c": ports["@c"][:region.captures]}
    for j in range(len(streams)):
        given[f"@s{j}"] = ports[f"@s{j}"]
    out = inline(bb, region.body, given)
    seeds, seed_guards = [], {}
    zero = bb.const(0.0)
    for e in range(p):
        if e in cts:
            seed = ports["@c"][region.captures + e]
            held = None  # where the seed may be nonzero: its guard outside, its winner
            if e in sum_g:
                shown = ports["@c"][region.captures + p + len(won) + sum_g.index(e)]
                held = bb.op("ne", shown, zero)
            if e in won:
                winner = ports["@c"][region.captures + p + won.index(e)]
                seed = _at_winner(bb, ports["@i"][0], winner, seed)
                won_here = bb.op("eq", ports["@i"][0], winner)
                held = won_here if held is None else bb.op("and", held, won_here)
            if held is not None:
                seed_guards[seed] = held
            seeds.append((out["@sum"][e], seed))
    if seeded_maps:
        seed_port = ports[f"@s{len(streams)}"]
        seeds += [(out["@map"][t], seed_port[t]) for t in range(q)]
        if partial:
            seed_guards.update(seeded_guards(bb, seed_port, ports[f"@s{len(streams) + 1}"]))
    for e in range(len(whole_seeds)):
        seed_port = ports[f"@s{len(streams) + seeded_maps + partial + e}"]
        seeds += [(out["@map"][t], seed_port[t]) for t in range(q)]
    live_caps = [k for k, a in enumerate(captures) if active[a]]
    live_streams = [j for j, ids in enumerate(streams) if any(active[a] for a in ids)]
    # arrays read whole (in place) by loops in the body: the array, its elements read alone
    in_place = {j: read_alone(bb.nodes, f"@s{j}") for j in live_streams if region.in_place(j)}
    live_streams = [j for j in live_streams if j not in in_place]
    sources = {ports["@c"][k] for k in live_caps}
    sources |= {i for j in live_streams for i in ports[f"@s{j}"]}
    sources |= {i for j, elements in in_place.items() for i in ports[f"@s{j}"] + elements}
    inner: dict = {}
    wholes: dict = {}  # the body's array node -> `WholeCt`s of the loops in it that read it
    ct = sweep.reverse(bb, len(bb.nodes), sweep.active_nodes(bb, sources), seeds,
                       guards_out=inner if guards_wanted else None, seed_guards=seed_guards,
                       wholes_out=wholes)
    # A stream of stride 0 (an outer loop's element, the same in every iteration) has its
    # cotangent summed over the iterations, as a capture's: stacked, a loop of 10^5
    # iterations over a point's 4 coordinates made 4 * 10^5 parts and adds outside.
    bases = _stream_bases(region)
    flat = [j for j in live_streams if region.streams[j][1] == 0 and region.source(j) < 0
            and n > STACKED]
    stacked = [j for j in live_streams if j not in flat]
    summed = [(k, ports["@c"][k]) for k in live_caps]
    summed += [(bases[j] + region.streams[j][2] + t, x) for j in flat
               for t, x in enumerate(ports[f"@s{j}"])]
    # (argument, cotangent or None, guard) per value summed over the iterations; an array
    # read whole gets its elements' cotangents summed so, in order (no guard: its
    # cotangent is an input's, which no pullback reads)
    entries = [(k, ct.get(x), inner.get(x)) for k, x in summed]
    for j, elements in in_place.items():
        got = _array_cotangents(bb, ct, wholes.get(ports[f"@s{j}"][0], ()), elements,
                                region.widths()[j])
        entries += [((j, t), c, None) for t, c in enumerate(got)]
    map_nodes = [i for j in stacked for i in ports[f"@s{j}"]]
    sums = [zero if c is None else c for _, c, _ in entries]
    maps = [ct.get(x, zero) for x in map_nodes]
    # A cotangent the body never computes is exactly 0 in every iteration: no part is made
    # for it outside. One that a branch may make 0 carries its guard out.
    guarded = any(c is not None and g is not None for _, c, g in entries) or \
        any(x in ct and inner.get(x) is not None for x in map_nodes)
    combine: tuple = ()
    if guarded:
        sums += [_indicator(bb, c is not None, g) for _, c, g in entries]
        maps += [_indicator(bb, x in ct, inner.get(x)) for x in map_nodes]
        combine = ("add",) * len(entries) + ("max",) * len(entries)
    if p and not won and not q:  # the region's own sums, last: read from here (share_sums)
        sums += list(out["@sum"])
        combine += ("add",) * p if combine else ()
    body = body_graph(bb.nodes, body_ports(bb, ports), sums, maps)
    seed_args = [cts.get(e, b.const(0.0)) for e in range(p)]
    seed_args += [b.part(at, region.winner_value(e)) for e in won]
    seed_args += present(b, [True] * len(sum_g), [guards[e] for e in sum_g])
    new_streams = list(region.streams)
    stream_args = [a for ids in streams for a in ids]
    sources = [region.source(j) for j in range(len(streams))]
    if seeded_maps:
        new_streams.append((n * q, q, 0))
        stream_args += [cts.get(p + k, b.const(0.0)) for k in range(n * q)]
        sources.append(-1)
    if partial:
        new_streams.append((n * q, q, 0))
        stream_args += present(b, [v in cts for v in values], [guards.get(v) for v in values])
        sources.append(-1)
    for w in whole_seeds:  # read where the readers' pullbacks left them
        new_streams.append((b.nodes[w.region].attr.size - w.base, w.row, 0))
        stream_args.append(w.region)
        sources.append(w.base)
    whole = tuple(sources) if any(k >= 0 for k in sources) else ()
    back = Region(n, body, region.captures + p + len(won) + len(sum_g), tuple(new_streams),
                  combine, 0, whole)
    r = b.region(back, captures + seed_args + stream_args)
    parts: list = [None] * len(node.args)
    shown: list = [None] * len(node.args)  # indicators of where each part may be nonzero
    widths = region.widths()
    for m, (k, c, _) in enumerate(entries):
        if c is None:
            continue
        if type(k) is tuple:  # an array's: its values in a row, whole (made once an array)
            j, t = k
            if parts[bases[j]] is None:
                parts[bases[j]] = WholeCt(r, m - t, widths[j], widths[j], widths[j], 0, 1)
            continue
        parts[k] = b.part(r, m)
        if guarded:
            shown[k] = b.part(r, len(entries) + m)
    width = len(maps)  # the map outputs of one iteration
    column = 0
    for j in stacked:
        _, stride, offset = region.streams[j]
        w = region.widths()[j]
        if region.source(j) >= 0:  # an input read whole: its cotangents stay where they lie
            parts[bases[j]] = WholeCt(r, len(sums) + column, width, w, stride, offset, n,
                                      first=region.source(j))
            column += w
            continue
        reached = [ports[f"@s{j}"][t] in ct for t in range(w)]
        for i in range(n):
            for t in range(w):
                if not reached[t]:
                    continue
                arg = bases[j] + offset + stride * i + t
                at_value = len(sums) + i * width + column + t
                v = b.part(r, at_value)
                parts[arg] = v if parts[arg] is None else b.add(parts[arg], v)
                if guarded:
                    g = b.part(r, at_value + len(map_nodes))
                    shown[arg] = g if shown[arg] is None else b.add(shown[arg], g)
        column += w
    zero_outer = b.const(0.0)
    conds = [None if s is None else b.op("ne", s, zero_outer) for s in shown]
    return parts, conds


def _array_cotangents(bb: Builder, ct: dict, wholes, elements: list, size: int) -> list:
    """Per element of an array a body reads whole, its cotangent in one iteration (None for
    none): from the `WholeCt`s of the loops that stream it, and from its elements read
    alone."""
    got: list = [None] * size
    for w in wholes:
        for at, v in w.listed(bb):
            got[at] = v if got[at] is None else bb.add(got[at], v)
    for x in elements:
        if x in ct:
            at = bb.nodes[x].attr[1]
            got[at] = ct[x] if got[at] is None else bb.add(got[at], ct[x])
    return got


def seeded_guards(bb: Builder, seeds: list, shown: list) -> dict:
    """Guards of seeds that are inputs of a body: each holds where its indicator is not 0."""
    zero = bb.const(0.0)
    return {x: bb.op("ne", g, zero) for x, g in zip(seeds, shown, strict=True)}


def present(b: Builder, which: list, guards: list | None = None) -> list:
    """Indicator arguments: 0 where no derivative is given, 1 where one is, and where one is
    given under a guard (a select's branch, outside the region), 1 where the guard holds."""
    one, zero = b.const(1.0), b.const(0.0)
    guards = guards or [None] * len(which)
    return [zero if not w else one if g is None else b.select(g, one, zero)
            for w, g in zip(which, guards, strict=True)]


def _stream_bases(region: Region) -> list[int]:
    """Where each stream's elements start among a region node's arguments."""
    bases, at = [], region.captures
    for j in range(len(region.streams)):
        bases.append(at)
        at += region.taken(j)
    return bases


def region_tangent(b: Builder, at: int, node, ts: list, sweep, gs: list,
                   guards_wanted: bool = True) -> tuple:
    """A region node whose values are the tangents of those of region node `at`, given the
    tangents `ts` of its arguments (None where none): its sums and maps, and no winners (a
    winner is piecewise constant). A min's or max's tangent is the one of its winner. With
    it, whether its values carry guards (see `region_pullback`; none where `guards_wanted` is
    False: no node reads its values' guards); `tangent_value` reads it."""
    region: Region = node.attr
    won = region.winners
    k = region.captures
    streams = len(region.streams)
    chosen = tangent_choice(region, ts, gs)
    cap_t, cap_g, stream_t, partial = chosen
    bb = Builder()
    widths = region.widths()
    ports = _body_inputs(bb, region, len(cap_t) + len(won) + len(cap_g),
                         [widths[j] for j in stream_t + partial])
    given = {"@i": ports["@i"], "@c": ports["@c"][:k]}
    for j in range(streams):
        given[f"@s{j}"] = ports[f"@s{j}"]
    out = inline(bb, region.body, given)
    tangents, seed_guards = tangent_seeds(bb, ports, region, chosen)
    inner: dict = {}
    t = sweep.forward(bb, len(bb.nodes), sweep.active_nodes(bb, set(tangents)), tangents,
                      guards_out=inner if guards_wanted else None, seed_guards=seed_guards)
    zero = bb.const(0.0)
    sums = [t.get(i, zero) for i in out["@sum"]]
    maps = [t.get(i, zero) for i in out["@map"]]
    outs = list(out["@sum"]) + list(out["@map"])
    guarded = any(x in t and inner.get(x) is not None for x in outs)
    reached = tuple(x in t for x in outs)  # a tangent the body never computes is none
    shown = [_indicator(bb, x in t, inner.get(x)) for x in out["@sum"]] if guarded else []
    for w, e in enumerate(won):
        winner = ports["@c"][k + len(cap_t) + w]
        sums[e] = _at_winner(bb, ports["@i"][0], winner, sums[e])
        if guarded:
            shown[e] = _at_winner(bb, ports["@i"][0], winner, shown[e])
    combine: tuple = ()
    if guarded:
        maps += [_indicator(bb, x in t, inner.get(x)) for x in out["@map"]]
        combine = ("add",) * len(sums) + ("max",) * len(sums)
        sums += shown
    body = body_graph(bb.nodes, body_ports(bb, ports), sums, maps)
    args, new_streams = tangent_args(b, at, node, ts, gs, chosen)
    whole = region.whole + (-1,) * (len(new_streams) - len(region.streams)) \
        if region.whole else ()  # an input read in place, as data, stays so
    tangent = Region(region.n, body, k + len(cap_t) + len(won) + len(cap_g), tuple(new_streams),
                     combine, 0, whole)
    return b.region(tangent, args), (guarded, reached)


def tangent_choice(region: Region, ts: list, gs: list) -> tuple:
    """Which of a region's arguments its tangent region takes a tangent of: (captures with a
    tangent, those under a guard outside, streams with a tangent, those needing an indicator
    stream: a tangent in some places only, or under a guard outside)."""
    bases = _stream_bases(region)
    cap_t = [c for c in range(region.captures) if ts[c] is not None]
    stream_t = [j for j in range(len(region.streams))
                if any(ts[bases[j] + e] is not None for e in range(region.taken(j)))]
    partial = [j for j in stream_t if any(ts[bases[j] + e] is None or gs[bases[j] + e]
                                          is not None for e in range(region.taken(j)))]
    cap_g = [c for c in cap_t if gs[c] is not None]
    return cap_t, cap_g, stream_t, partial


def tangent_seeds(bb: Builder, ports: dict, region: Region, chosen: tuple) -> tuple:
    """The tangent body's seeds, {primal input: its tangent input}, and their guards (from
    the indicators), for the ports `tangent_args` lays out."""
    cap_t, cap_g, stream_t, partial = chosen
    c, streams = region.captures, len(region.streams)
    tangents = {ports["@c"][x]: ports["@c"][c + e] for e, x in enumerate(cap_t)}
    for e, j in enumerate(stream_t):
        for x, dx in zip(ports[f"@s{j}"], ports[f"@s{streams + e}"], strict=True):
            tangents[x] = dx
    seed_guards = {}
    for e, j in enumerate(partial):
        shown = ports[f"@s{streams + len(stream_t) + e}"]
        seed_guards.update(seeded_guards(bb, ports[f"@s{j}"], shown))
    first = c + len(cap_t) + len(region.winners)
    seed_guards.update(seeded_guards(bb, [ports["@c"][x] for x in cap_g],
                                     ports["@c"][first:first + len(cap_g)]))
    return tangents, seed_guards


def tangent_args(b: Builder, at: int, node, ts: list, gs: list, chosen: tuple) -> tuple:
    """The arguments of the tangent region of region node `at` up to its streams (captures,
    captured tangents, winners, captured indicators, streams, streamed tangents, indicator
    streams), and its streams; `chosen` is (captures with a tangent, those under a guard,
    streams with a tangent, those needing an indicator stream)."""
    region: Region = node.attr
    cap_t, cap_g, stream_t, partial = chosen
    captures, streams = split_args(region, node.args)
    bases = _stream_bases(region)
    zero = b.const(0.0)
    args = captures + [ts[c] for c in cap_t]
    args += [b.part(at, region.winner_value(e)) for e in region.winners]
    args += present(b, [True] * len(cap_g), [gs[c] for c in cap_g])
    args += [a for ids in streams for a in ids]
    new_streams = list(region.streams)
    for j in stream_t:
        new_streams.append(region.streams[j])
        args += [ts[bases[j] + e] if ts[bases[j] + e] is not None else zero
                 for e in range(region.streams[j][0])]
    for j in partial:
        new_streams.append(region.streams[j])
        span = range(bases[j], bases[j] + region.streams[j][0])
        args += present(b, [ts[a] is not None for a in span], [gs[a] for a in span])
    return args, new_streams


def tangent_value(region: Region, made: tuple, value: int) -> tuple | None:
    """Where the tangent region of `region` (`made` as `region_tangent` returned it) holds
    the tangent of value `value`, and its guard's indicator (None: none); None for a winner,
    which has no tangent, and for a value whose tangent the body never computes."""
    guarded, reached = made
    p, q = region.sums, region.maps
    if value < p:
        return (value, (p + value if guarded else None)) if reached[value] else None
    if value >= p + region.n * q:
        return None
    i, t = divmod(value - p, q)
    if not reached[p + t]:
        return None
    if not guarded:
        return value, None
    at = 2 * p + i * 2 * q + t
    return at, at + q
