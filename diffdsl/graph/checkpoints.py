"""A scan's pullback in segments: checkpoints, where storing every state would take too much
memory (DESIGN.md, decision 9).

A scan's pullback reads back the state each iteration read, stored by a copy of the scan
(scan_sweeps.py): n iterations × its state's m values. Past the `stored` limit it stores
only the state at the start of each segment of K (about √n) iterations, by a scan over the
segments whose body is a scan over K iterations. The pullback then runs over the segments
backwards: each segment recomputes its K states from its checkpoint, then runs the
pullback's body back over them, carrying the state's cotangent on to the segment before.
The last n mod K iterations run back first, over states stored as before. Memory:
(n / K + K + n mod K) × m values instead of n × m. Time: two more forward runs of the loop,
the checkpoints' and the segments' again (the gradient that stores every state takes the
loop's value from its stored copy, `loops.share_stored`; the checkpoints' copy is not
shared so).
The states are computed by the same operations in the same order, so the derivatives are
those of the pullback that stores everything, but for the order in which a capture's
cotangent is summed (segment by segment).

A segment's iterations read windows of the loop's streams: the segment's loop reads, per
stream, the window that covers its K iterations' windows, and the loop inside it reads
that window as the whole loop read the array (`_window`). A body reads its iteration's index
as its index in the segment plus the segment's first index, a capture (`shifted_body`).
"""

from __future__ import annotations

import math

from .. import limits
from .ir import Builder
from .loops import body_graph, body_ports, inline, split_args, stored_region
from .region import Region


def segment_length(n: int, carry: int) -> int:
    """The iterations of a segment, K, for a scan of `n` iterations carrying `carry`
    values; 0 where every state is stored (within the `stored` limit)."""
    if n * carry <= limits.current().stored or n < 4:
        return 0
    return math.isqrt(n - 1) + 1


def shifted_body(body, captures: int):
    """`body` reading as its index "@i" its own plus capture number `captures` (one more
    capture than it had): the body of a loop over a part of the iterations."""
    bb = Builder()
    index = bb.input("@i", 0)
    caps = [bb.input("@c", k) for k in range(captures + 1)]
    ports = {"@i": [index], "@c": caps}
    given = {"@i": [bb.add(index, caps[captures])], "@c": caps[:captures]}
    for name, port in body.inputs.items():
        if name in ("@i", "@c"):
            continue
        if port.whole is not None:
            ports[name] = [bb.array(name, port.size)]
        else:
            ports[name] = [bb.input(name, k) for k in range(port.size)]
        given[name] = ports[name]
    out = inline(bb, body, given)
    return body_graph(bb.nodes, body_ports(bb, ports), out["@sum"], out["@map"],
                      out.get("@next"))


def _window(stream: tuple, width: int, k: int, first: int, in_place: bool):
    """For a stream (length, stride, offset) of windows `width` wide: the stream of a loop
    over segments of `k` iterations from iteration `first` on, its width, and the stream
    of the loop over one segment inside it, which reads that window."""
    length, stride, offset = stream
    if in_place:
        return stream, width, stream
    start = offset + stride * first
    wide = (k - 1) * abs(stride) + width
    return ((length, stride * k, start + min(0, stride * (k - 1))), wide,
            (wide, stride, max(0, -stride * (k - 1))))


def _ports(bb: Builder, region: Region, widths: list[int], carry: int) -> dict:
    ports = {"@i": [bb.input("@i", 0)],
             "@c": [bb.input("@c", k) for k in range(region.captures)]}
    for j, w in enumerate(widths):
        in_place = j < len(region.streams) and region.in_place(j)
        ports[f"@s{j}"] = [bb.array(f"@s{j}", w)] if in_place else \
            [bb.input(f"@s{j}", t) for t in range(w)]
    ports["@h"] = [bb.input("@h", k) for k in range(carry)]
    return ports


def checkpoints(b: Builder, node, k: int) -> int:
    """A scan over the segments of scan `node` (each a scan of `k` iterations) that stacks
    the state each segment starts from: that of segment g, element e, is its value
    g * carry + e; its final state is the state after the last whole segment."""
    scan: Region = node.attr
    m, c = scan.carry, scan.captures
    carried = shifted_body(body_graph(scan.body.nodes, dict(scan.body.inputs), [], [],
                                      list(scan.body.outputs["@next"].ids)), c)
    bb = Builder()
    made = [_window(s, w, k, 0, scan.in_place(j))
            for j, (s, w) in enumerate(zip(scan.streams, scan.widths(), strict=True))]
    ports = _ports(bb, scan, [w for _, w, _ in made], m)
    start = bb.mul(ports["@i"][0], bb.const(float(k)))
    inner = Region(k, carried, c + 1, tuple(s for _, _, s in made), (), m,
                   _inner_sources(scan))
    args = ports["@c"] + [start] + [a for j in range(len(made)) for a in ports[f"@s{j}"]]
    r = bb.region(inner, args + ports["@h"])
    nexts = [bb.part(r, inner.carry_value(e)) for e in range(m)]
    body = body_graph(bb.nodes, body_ports(bb, ports), [], ports["@h"], nexts)
    outer = Region(scan.n // k, body, c, tuple(s for s, _, _ in made), (), m, scan.whole)
    return b.region(outer, node.args)


def _inner_sources(region: Region) -> tuple:
    """The sources of the streams of a loop over one segment of `region`: an array read in
    place is the segment body's array node; a window is listed."""
    sources = [0 if region.in_place(j) else -1 for j in range(len(region.streams))]
    return tuple(sources) if any(s >= 0 for s in sources) else ()


def _tail_states(b: Builder, node, first: int, count: int, state: list[int]) -> int:
    """The stored states (`stored_region`) of the last `count` iterations of scan `node`,
    from iteration `first` on, which starts from `state`."""
    scan: Region = node.attr
    stored = stored_region(scan)
    streams = tuple((length, stride, offset + stride * first)
                    for length, stride, offset in scan.streams)
    tail = Region(count, shifted_body(stored.body, scan.captures), scan.captures + 1, streams,
                  (), scan.carry, scan.whole)
    captures, windows = split_args(scan, node.args)
    return b.region(tail, captures + [b.const(float(first))] + [a for ids in windows
                                                                 for a in ids] + state)


def pullback(b: Builder, node, back: Region, args: list, states_at: int, final: list,
             k: int):
    """The pullback `back` of scan `node` (its arguments `args` but for the stored states,
    which its stream `states_at` reads, and `final`, its initial carry), run in segments of
    `k` iterations from checkpoints: a function from each value of `back` to a node of `b`
    that holds it."""
    scan: Region = node.attr
    n, m = scan.n, scan.carry
    whole_segments = n // k
    rest = n - whole_segments * k
    marks = checkpoints(b, node, k)
    marked = b.nodes[marks].attr
    end = [b.part(marks, marked.carry_value(e)) for e in range(m)]
    head, windows = split_args(_without(back, states_at), args)
    carry = final
    tail = None
    if rest:
        states = _tail_states(b, node, whole_segments * k, rest, end)
        streams = list(back.streams)
        streams[states_at] = (rest * m, -m, (rest - 1) * m)
        tail_region = Region(rest, back.body, back.captures, tuple(streams), back.combine,
                             back.carry, back.whole)
        tail = b.region(tail_region, _with(head, windows, states_at, states) + carry)
        carry = [b.part(tail, tail_region.carry_value(e)) for e in range(back.carry)]
    outer = _segments(back, scan, states_at, k, rest)
    body_args = _with(head, windows, states_at, marks)
    segments = b.region(outer, body_args + carry)
    width = back.maps

    def value(v: int) -> int:
        if v < back.sums:
            part = b.part(segments, v)
            return part if tail is None else b.add(b.part(tail, v), part)
        if v >= back.size - back.carry:
            return b.part(segments, outer.carry_value(v - (back.size - back.carry)))
        row, column = divmod(v - back.sums, width)
        if row < rest:
            return b.part(tail, back.sums + row * width + column)
        return b.part(segments, back.sums + (row - rest) * width + column)
    return value


def _without(region: Region, j: int) -> Region:
    """`region` without its stream j (for splitting its other arguments)."""
    streams = region.streams[:j] + region.streams[j + 1:]
    whole = region.whole[:j] + region.whole[j + 1:] if region.whole else ()
    return Region(region.n, region.body, region.captures, streams, region.combine,
                  region.carry, whole)


def _with(head: list, windows: list, at: int, states: int) -> list:
    """Arguments: the captures `head`, then the streams' with the states' node at `at`."""
    streams = windows[:at] + [[states]] + windows[at:]
    return list(head) + [a for ids in streams for a in ids]


def _segments(back: Region, scan: Region, states_at: int, k: int, rest: int) -> Region:
    """The loop over the segments, last first, of pullback `back` (of `scan`): each
    recomputes its states from its checkpoint (stream `states_at`, from `checkpoints`)
    and runs `back`'s body over them."""
    m, c = scan.carry, scan.captures
    segments = scan.n // k
    widths = back.widths()
    made = [None if j == states_at else
            _window(s, widths[j], k, rest, back.in_place(j))
            for j, s in enumerate(back.streams)]
    bb = Builder()
    ports = _ports(bb, back, [m if x is None else x[1] for x in made], back.carry)
    index = ports["@i"][0]
    # the segment's first iteration, forwards and in `back`'s order (it runs backwards)
    forwards = bb.mul(bb.sub(bb.const(float(segments - 1)), index), bb.const(float(k)))
    backwards = bb.add(bb.mul(index, bb.const(float(k))), bb.const(float(rest)))
    # the same windows read forwards, as the scan reads them (`back` reads them backwards)
    forward_streams = tuple(_window(s, w, k, 0, scan.in_place(j))[2]
                            for j, (s, w) in enumerate(zip(scan.streams, scan.widths(),
                                                           strict=True)))
    again = Region(k, shifted_body(stored_region(scan).body, c), c + 1, forward_streams, (),
                   m, _inner_sources(scan))
    streamed = [a for j in range(len(scan.streams)) for a in ports[f"@s{j}"]]
    states = bb.region(again, ports["@c"][:c] + [forwards] + streamed + ports[f"@s{states_at}"])
    inner_streams = [(k * m, -m, (k - 1) * m) if x is None else x[2] for x in made]
    sources = [0 if j == states_at else 0 if back.in_place(j) else -1
               for j in range(len(back.streams))]
    inner = Region(k, shifted_body(back.body, back.captures), back.captures + 1,
                   tuple(inner_streams), back.combine, back.carry,
                   tuple(sources) if any(s >= 0 for s in sources) else ())
    args = ports["@c"] + [backwards]
    for j in range(len(back.streams)):
        args += [states] if j == states_at else ports[f"@s{j}"]
    r = bb.region(inner, args + ports["@h"])
    sums = [bb.part(r, e) for e in range(back.sums)]
    maps = [bb.part(r, back.sums + t) for t in range(k * back.maps)]
    nexts = [bb.part(r, inner.carry_value(e)) for e in range(back.carry)]
    body = body_graph(bb.nodes, body_ports(bb, ports), sums, maps, nexts)
    outer_streams = [(segments * m, -m, (segments - 1) * m) if x is None else x[0]
                     for x in made]
    sources = [0 if j == states_at else back.source(j) for j in range(len(back.streams))]
    return Region(segments, body, back.captures, tuple(outer_streams), back.combine,
                  back.carry, tuple(sources))
