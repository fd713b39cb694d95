"""A loop's stream whose elements do not lie in a row, gathered into the stream's area of the
scratch before the loop runs (llvm_loops.loop): constants copied from a table in one call,
values the scratch already holds copied by a loop over a table of their places, and only
the rest stored one by one.

Stored one by one, every element is an instruction pair in one basic block, and LLVM's code
generator takes time that grows faster than a block's length: a second-order derivative of
`examples/loops/pendulums.dd` gathered 16,000 elements, 13,000 of them zeros, into one
stream, a block of 40,000 instructions that took 30 s to compile.
"""

from __future__ import annotations

from ..graph.ir import Graph

TABLE_FROM = 16  # from this many constants, a table copied in one call
LOOP_FROM = 256  # from this many values in the scratch, a loop over their places


def place(graph: Graph, plan, a: int) -> int | None:
    """Where value `a` lies in the scratch: a region's value in its buffer, or a value with
    a slot of its own; None for a constant, an input element or a value held in a register
    only."""
    node = graph.nodes[a]
    if node.op == "part":
        return plan.areas[node.args[0]]["buf"] + node.attr
    return plan.slot.get(a)


def gather(graph: Graph, plan, ids, first: int, name: str, t: str, value, block: list
           ) -> list[str]:
    """Lines that write the values `ids` to scratch elements `first`, `first` + 1, ...;
    `name` prefixes their names and the tables' (a global's name, without its @); `value(a)`
    names a value in a register (loading it where needed); `block` holds the name of the
    block being written, which the loop ends."""
    size = 4 if t == "float" else 8
    nodes = graph.nodes
    out = [f"%{name}.to = getelementptr inbounds {t}, ptr %s, i64 {first}"]
    done = [False] * len(ids)
    consts = [m for m, a in enumerate(ids) if nodes[a].op == "const"]
    if len(consts) >= TABLE_FROM:
        table = [0.0] * len(ids)
        for m in consts:
            table[m], done[m] = nodes[ids[m]].attr, True
        plan.tables.append((f"@{name}.k", table))
        out.append(f"call void @llvm.memcpy.p0.p0.i64(ptr %{name}.to, ptr @{name}.k, "
                   f"i64 {len(ids) * size}, i1 false)")
    places = [(m, e) for m, a in enumerate(ids) if not done[m]
              and (e := place(graph, plan, a)) is not None]
    if len(places) >= LOOP_FROM:
        pairs = [x for pair in places for x in pair]  # element, then where it lies
        plan.indices.append((f"@{name}.at", pairs))
        for m, _ in places:
            done[m] = True
        g = f"{name}.g"
        out += [f"br label %{g}", f"{g}:",
                f"%{g}.e = phi i64 [ 0, %{block[0]} ], [ %{g}.en, %{g} ]",
                f"%{g}.k = shl i64 %{g}.e, 1",
                f"%{g}.mp = getelementptr inbounds i64, ptr @{name}.at, i64 %{g}.k",
                f"%{g}.m = load i64, ptr %{g}.mp",
                f"%{g}.k1 = or i64 %{g}.k, 1",
                f"%{g}.fp = getelementptr inbounds i64, ptr @{name}.at, i64 %{g}.k1",
                f"%{g}.f = load i64, ptr %{g}.fp",
                f"%{g}.from = getelementptr inbounds {t}, ptr %s, i64 %{g}.f",
                f"%{g}.v = load {t}, ptr %{g}.from",
                f"%{g}.at = getelementptr inbounds {t}, ptr %{name}.to, i64 %{g}.m",
                f"store {t} %{g}.v, ptr %{g}.at",
                f"%{g}.en = add i64 %{g}.e, 1",
                f"%{g}.more = icmp slt i64 %{g}.en, {len(places)}",
                f"br i1 %{g}.more, label %{g}, label %{g}.done", f"{g}.done:"]
        block[0] = f"{g}.done"
    for m, a in enumerate(ids):
        if not done[m]:
            out += [f"%{name}.{m} = getelementptr inbounds {t}, ptr %s, i64 {first + m}",
                    f"store {t} {value(a)}, ptr %{name}.{m}"]
    return out
