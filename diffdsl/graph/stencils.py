"""Gradients of inputs read at overlapping windows (stencils: `x[i]` and `x[i + 1]`, `X[i]`
and `X[i + 1]`), kept whole.

Iteration i of a loop reads elements `offset + stride * i + t` (t below `width`) of the input;
its pullback leaves their cotangents among its values (a `WholeCt`). Element e's gradient
adds the cotangents of every (i, t) that read it, which a loop over the input's groups of
`stride` elements gathers: in group g, element `stride * g + u` was read by t = u - offset
(mod stride), t + stride, ..., each at iteration g + c for a static c. Near the ends, some of
those iterations do not exist, and a stream cannot read past its array: so each cotangent is
first copied by a loop of its iterations that lays zeros on both sides (`_padded`), and the
gather reads that copy at offsets that stay inside it, adding exact zeros where no iteration
read the element.
"""

from __future__ import annotations

from .ir import Builder, Port
from .loops import body_graph
from .region import Region


def gathered(b: Builder, size: int, parts: list, elements: dict, few: int) -> int | None:
    """A region whose `size` map values are the gradient of an input of `size` elements read
    by `parts` (`WholeCt`s of one stride that divides `size`) and alone (`elements`: element
    -> cotangent node, at most `few`); None where they are not so (the caller lists it)."""
    stride = parts[0].stride
    if stride < 1 or size % stride or len(elements) > few or any(
            p.stride != stride or p.first for p in parts):
        return None
    groups = size // stride
    reads = [_reads(p) for p in parts]  # per part: {u: [(c, t)]}
    pads = [_padded(b, p, r, groups) for p, r in zip(parts, reads, strict=True)]
    bb = Builder()
    index = bb.input("@i", 0)
    captured = list(elements.values())
    caps = [bb.input("@c", k) for k in range(len(captured))]
    zero = bb.const(0.0)
    ports, specs, out = {}, [], []
    windows = []  # per part: where its stream's window starts among the padded values
    for j, (p, r, (_, front, length)) in enumerate(zip(parts, reads, pads, strict=True)):
        at = [front + p.width * c + t for pairs in r.values() for c, t in pairs]
        low, high = min(at), max(at)
        ports[f"@s{j}"] = [bb.input(f"@s{j}", k) for k in range(high - low + 1)]
        specs.append((length, p.width, low))
        windows.append(low)
    for u in range(stride):
        total = None
        for j, (p, r) in enumerate(zip(parts, reads, strict=True)):
            for c, t in r.get(u, ()):
                v = ports[f"@s{j}"][pads[j][1] + p.width * c + t - windows[j]]
                total = v if total is None else bb.add(total, v)
        for m, k in enumerate(elements):
            if k % stride == u:
                here = bb.op("eq", index, bb.const(float(k // stride)))
                term = bb.select(here, caps[m], zero)
                total = term if total is None else bb.add(total, term)
        out.append(zero if total is None else total)
    inputs = {"@i": Port((1,), (index,)), "@c": Port((len(caps),), tuple(caps))}
    inputs.update({name: Port((len(ids),), tuple(ids)) for name, ids in ports.items()})
    body = body_graph(bb.nodes, inputs, [], out)
    region = Region(groups, body, len(caps), tuple(specs), (), 0, (0,) * len(parts))
    return b.region(region, captured + [node for node, _, _ in pads])


def _reads(p) -> dict:
    """{u: [(c, t)]}: element `stride * g + u` was read by window place t in iteration g + c
    (where that iteration exists)."""
    s, found = p.stride, {}
    for t in range(p.width):
        u = (p.offset + t) % s
        c = -((p.offset + t) // s)  # g + c = (s * g + u - offset - t) / s
        found.setdefault(u, []).append((c, t))
    return found


def _padded(b: Builder, p, reads: dict, groups: int) -> tuple[int, int, int]:
    """A loop over `p`'s iterations that copies each one's window of cotangents (width
    values; 0 where its guard does not hold), with zeros before and after: (its node, where
    iteration 0's window starts among its values, how many values it has). The zeros before
    are sums of a constant 0; those after, the winners of mins of a constant 0 (each
    iteration 0, as 0.0: a tie keeps the first), which a region's values list after its map
    outputs."""
    w = p.width
    cs = [c for pairs in reads.values() for c, _ in pairs]
    front = max(0, -w * min(cs))  # values before iteration 0 read by group 0
    back = max(0, w * (groups - 1 + max(cs) - (p.n - 1)))
    bb = Builder()
    index = bb.input("@i", 0)
    window = [bb.input("@s0", t) for t in range(w)]
    caps = [bb.input("@c", 0)] if p.guard is not None else []
    zero = bb.const(0.0)
    maps = [bb.select(caps[0], v, zero) for v in window] if caps else window
    front_sums = max(0, front - back)  # the mins' own sums stand before the maps too
    body = body_graph(bb.nodes, {"@i": Port((1,), (index,)), "@c": Port((len(caps),),
                                                                       tuple(caps)),
                                 "@s0": Port((w,), tuple(window))},
                      [zero] * (front_sums + back), maps)
    combine = ("add",) * front_sums + ("min",) * back if back else ()
    spec = ((p.n - 1) * p.row + w, p.row, 0)
    region = Region(p.n, body, len(caps), (spec,), combine, 0, (p.base,))
    node = b.region(region, ([p.guard] if caps else []) + [p.region])
    start = front_sums + back
    return node, start, start + p.n * w + back
