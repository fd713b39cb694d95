"""A region as LLVM IR: a loop in the segment that holds it, calling its body's function once
per iteration (llvm.py emits the body's segments as it emits a graph's). `plan` is the
graph's layout (llvm._Layout): where each value lives, and each region's areas of scratch.
"""

from __future__ import annotations

import math
from itertools import pairwise

from ..graph.ir import Graph
from .llvm_gather import gather
from .llvm_powers import PORT as POWERS
from .llvm_powers import power_state

LOCAL = 64  # a region's captures, sums or next state up to this many values are allocas
ADD_LOOP = 16  # from this many sums in a row, a loop adds them (`_add_runs`)
COPY_RUN = 16  # from this many captures in a row, a block copies them (`_pieces`)
BRANCH_FROM = 200  # past this many iterations a min or max is kept by a branch (`branches`)
_START = {"min": "0x7FF0000000000000", "max": "0xFFF0000000000000"}  # inf, -inf


def _follows(graph: Graph, plan, a: int, b: int) -> bool:
    """Whether value b lies right after value a: the next element of one input's port, or
    the next value of one region."""
    if a in plan.source:
        k, e = plan.source[a]
        return plan.source.get(b) == (k, e + 1)
    first, then = graph.nodes[a], graph.nodes[b]
    return first.op == "part" and then.op == "part" and then.args[0] == first.args[0] \
        and then.attr == first.attr + 1


def _run_of(graph: Graph, plan, ids) -> tuple | None:
    """Where a stream's elements already lie in a row, one after another: (port, first
    element) of an input, or ("buf", first scratch element) of a region's values."""
    if not ids or not all(_follows(graph, plan, a, b) for a, b in pairwise(ids)):
        return None
    first = ids[0]
    if first in plan.source:
        return plan.source[first]
    node = graph.nodes[first]
    if node.op != "part":
        return None
    return "buf", plan.areas[node.args[0]]["buf"] + node.attr


def _pieces(graph: Graph, plan, ids) -> list[tuple]:
    """`ids` cut into (first, count, run): runs of at least COPY_RUN elements that lie in a
    row (`_run_of`), copied as blocks, and single values (run None), stored one by one. A
    loop that captures a whole matrix (k-means' centroids, in every iteration over the
    points) then copies it with one call, not an instruction pair per element."""
    pieces, k = [], 0
    while k < len(ids):
        m = 1
        while k + m < len(ids) and _follows(graph, plan, ids[k + m - 1], ids[k + m]):
            m += 1
        if m == 1:  # or one constant in a row (a Hessian's seeds of 1.0, one per column)
            while k + m < len(ids) and _same_constant(graph, ids[k], ids[k + m]):
                m += 1
        if m >= COPY_RUN:
            first = graph.nodes[ids[k]]
            run = ("const", first.attr) if first.op == "const" else \
                _run_of(graph, plan, ids[k:k + m])
            pieces.append((k, m, run))
        else:
            pieces += [(k + q, 1, None) for q in range(m)]
        k += m
    return pieces


def _same_constant(graph: Graph, a: int, b: int) -> bool:
    return a == b and graph.nodes[a].op == "const"  # the builder makes one node per value


def stream_run(graph: Graph, plan, region, j: int, ids) -> tuple | None:
    """Where stream j's elements (its arguments `ids`) lie, as `_run_of` says; a stream that
    reads a region's values whole lies where that region keeps them, an input's where the
    caller put it."""
    if region.source(j) >= 0:
        node = graph.nodes[ids[0]]
        if node.op == "array":  # an input read in place
            return plan.port_of[node.attr[0]], region.source(j)
        return "buf", plan.areas[ids[0]]["buf"] + region.source(j)
    return _run_of(graph, plan, ids)


def gate(region) -> int | None:
    """The capture k where every value of an iteration is 0 unless the index equals capture
    k: each output is a select of `@i == @c[k]` with 0 otherwise, or a negation, sum or
    difference of such (a min's pullback, whose cotangent goes to the iteration it came
    from). The loop then runs that iteration alone; None where the region is not so."""
    if region.winners or region.carry:
        return None
    body = region.body
    nodes = body.nodes
    found: set[int] = set()  # the selects' conditions
    todo = list(body.outputs["@sum"].ids + body.outputs["@map"].ids)
    if not todo:
        return None
    seen: set[int] = set()
    while todo:  # a walk, not a recursion: a cotangent may be a sum of thousands of terms
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        node = nodes[x]
        if node.op == "select":
            found.add(node.args[0])
            if not (nodes[node.args[2]].op == "const" and nodes[node.args[2]].attr == 0.0):
                return None
        elif node.op in ("neg", "add", "sub"):
            todo += node.args
        elif not (node.op == "const" and node.attr == 0.0):
            return None
    if len(found) != 1:
        return None
    test = nodes[found.pop()]
    if test.op != "eq":
        return None
    sides = sorted((nodes[a].attr for a in test.args if nodes[a].op == "input"), key=str)
    if len(sides) != 2 or sides[1] != ("@i", 0) or sides[0][0] != "@c":
        return None
    return sides[0][1]


def _gated(r: str, w: str, n: int, t: str) -> list[str]:
    """The one iteration of a gated loop: `{r}.gi`, where capture value `w` is an iteration
    (a whole number in [0, n)); `{r}.gok` whether it is."""
    return [f"{r}.gn = sitofp i64 {n} to {t}", f"{r}.glo = fcmp oge {t} {w}, 0.0",
            f"{r}.ghi = fcmp olt {t} {w}, {r}.gn", f"{r}.gin = and i1 {r}.glo, {r}.ghi",
            f"{r}.gw = select i1 {r}.gin, {t} {w}, {t} 0.0",
            f"{r}.gi = fptosi {t} {r}.gw to i64", f"{r}.gb = sitofp i64 {r}.gi to {t}",
            f"{r}.geq = fcmp oeq {t} {r}.gb, {w}", f"{r}.gok = and i1 {r}.gin, {r}.geq",
            f"{r}.gend = add i64 {r}.gi, 1"]


def loop(graph: Graph, plan, i: int, value, port, block: list, t: str, prefix: str,
         zero: str, spread=None) -> list[str]:
    """Region node i as a loop over its iterations, each a call of its body's `run` with the
    body's ports pointing at the index, the captures, this iteration's window of each stream,
    the sums of one iteration and this iteration's row of the region's values. The sums
    start at -0.0 (`zero`), which x + -0.0 leaves as it is, and add in iteration order.
    `spread(where, block)`, where the loop may be split over threads (llvm_spread): this
    code makes the pointers its iterations read (`where`), and `spread` runs them."""
    node = graph.nodes[i]
    region, area, r = node.attr, plan.areas[i], f"%r{i}"
    out: list[str] = []

    def scratch(name: str, element: int) -> str:
        out.append(f"{name} = getelementptr inbounds {t}, ptr %s, i64 {element}")
        return name

    def local(name: str, count: int, where: str) -> str:
        # A few values live per call, not in the scratch: the optimiser keeps them in
        # registers once the body is inlined, and a store to them is no dependence between
        # iterations (`_segment` moves allocas to the entry block, where SROA finds them).
        # More stay in the scratch: a thread's stack may be 512 KB, and a scan's state a
        # million values.
        if count > LOCAL:
            return scratch(name, area[where])
        out.append(f"{name} = alloca {t}, i64 {max(count, 1)}")
        return name

    cap = local(f"{r}.cap", region.captures, "cap")
    size = 4 if t == "float" else 8
    for k, m, run in _pieces(graph, plan, node.args[:region.captures]):
        out.append(f"{r}.c{k} = getelementptr inbounds {t}, ptr {cap}, i64 {k}")
        if run is None:
            out.append(f"store {t} {value(node.args[k])}, ptr {r}.c{k}")
            continue
        if run[0] == "const":  # a loop that stores it
            f = f"r{i}.f{k}"
            out += [f"br label %{f}", f"{f}:",
                    f"%{f}.e = phi i64 [ 0, %{block[0]} ], [ %{f}.en, %{f} ]",
                    f"%{f}.p = getelementptr inbounds {t}, ptr {r}.c{k}, i64 %{f}.e",
                    f"store {t} {value(node.args[k])}, ptr %{f}.p",
                    f"%{f}.en = add i64 %{f}.e, 1", f"%{f}.more = icmp slt i64 %{f}.en, {m}",
                    f"br i1 %{f}.more, label %{f}, label %{f}.done", f"{f}.done:"]
            block[0] = f"{f}.done"
            continue
        base = "%s" if run[0] == "buf" else port(run[0])
        out += [f"{r}.cf{k} = getelementptr inbounds {t}, ptr {base}, i64 {run[1]}",
                f"call void @llvm.memcpy.p0.p0.i64(ptr {r}.c{k}, ptr {r}.cf{k}, "
                f"i64 {m * size}, i1 false)"]
    bases, at = [], region.captures
    for j in range(len(region.streams)):
        ids = node.args[at:at + region.taken(j)]
        at += region.taken(j)
        run = stream_run(graph, plan, region, j, ids)
        if run is None and len(ids) >= COPY_RUN and \
                all(graph.nodes[a].op == "const" for a in ids):
            # A stream of constants (a Hessian's seeds of one colour, 1.0 and 0.0 by turns)
            # is a table the loop reads in place: 20,000 of them stored one by one were
            # 100,000 lines of IR and 20 s of LLVM.
            bases.append(f"@{prefix.replace('.', '_')}r{i}s{j}")
            plan.tables.append((bases[-1], [graph.nodes[a].attr for a in ids]))
        elif run is None:
            out += gather(graph, plan, ids, area["gather"][j],
                          f"{prefix.replace('.', '_')}r{i}s{j}", t, value, block)
            bases.append(scratch(f"{r}.s{j}", area["gather"][j]))
        elif run[0] == "buf":
            bases.append(scratch(f"{r}.s{j}", run[1]))
        else:
            out.append(f"{r}.s{j} = getelementptr inbounds {t}, ptr {port(run[0])}, "
                       f"i64 {run[1]}")
            bases.append(f"{r}.s{j}")
    buf = scratch(f"{r}.buf", area["buf"])
    if i in plan.direct:  # the rows go straight to the output port (_Layout.write_in_place)
        k, e = plan.direct[i]
        out.append(f"{r}.rows = getelementptr inbounds {t}, ptr {port(k)}, i64 {e}")
    else:
        out.append(f"{r}.rows = getelementptr inbounds {t}, ptr {buf}, i64 {region.sums}")
    where = {"cap": cap, "acc": buf, "rows": f"{r}.rows", "bases": bases,
             "body": scratch(f"{r}.bs", area["body"]), "powers": area["powers"]}
    if not area["adds"]:
        where["sums"] = local(f"{r}.sums", region.sums, "sums")
    if spread is not None:
        return out + spread(where, block)
    if region.carry:  # a scan: the state lies in its final place, the next beside it
        first = region.carry_value(0)
        for k, a in enumerate(node.args[len(node.args) - region.carry:]):
            out.append(f"store {t} {value(a)}, ptr {scratch(f'{r}.h{k}', area['buf'] + first + k)}")
        where["h"], where["next"] = f"{r}.h0", local(f"{r}.nx", region.carry, "next")
    first, end, enter = "0", str(region.n), f"br label %r{i}.head"
    only = gate(region)
    if only is not None:  # the one iteration whose values are not 0, if any; rows of 0
        out += _gated(r, value(node.args[only]), region.n, t)
        first, end = f"{r}.gi", f"{r}.gend"
        enter = f"br i1 {r}.gok, label %r{i}.head, label %r{i}.done"
        if region.maps and plan.direct.get(i, (None,))[0] not in plan.adding:
            out.append(f"call void @llvm.memset.p0.i64(ptr {r}.rows, i8 0, "
                       f"i64 {region.n * region.maps * size}, i1 false)")
    return out + iterate(region, i, t, prefix, zero, where, (first, end, enter), block)


def iterate(region, i: int, t: str, prefix: str, zero: str, where: dict, span: tuple,
            block: list) -> list[str]:
    """The iterations `span` = (first, end, the branch that enters them) of region node i,
    with its sums started and added up at `where["acc"]`; `where` names the pointers they
    read and write: the captures, each stream's base, the rows, the body's scratch, one
    iteration's sums (absent where the body adds them itself), a scan's state and next."""
    r = f"%r{i}"
    names = list(region.body.inputs) + list(region.body.outputs)
    out: list[str] = []
    acc, powers = where["acc"], where["powers"]
    if powers:
        names.append(POWERS)
    out.append(f"{r}.pp = alloca ptr, i64 {len(names)}")

    def bind(port_name: str, pointer: str, tag: str) -> None:
        slot = f"{r}.pp{tag}"
        out.append(f"{slot} = getelementptr inbounds ptr, ptr {r}.pp, i64 "
                   f"{names.index(port_name)}")
        out.append(f"store ptr {pointer}, ptr {slot}")

    def at(name: str, element: int) -> str:
        out.append(f"{name} = getelementptr inbounds {t}, ptr {acc}, i64 {element}")
        return name

    out.append(f"{r}.ix = alloca {t}, i64 1")
    bind("@i", f"{r}.ix", "i")
    if powers:  # each power's state: none made yet (llvm_powers)
        out += power_state(f"{r}.pw", powers, t)
        bind(POWERS, f"{r}.pw", "pw")
    bind("@c", where["cap"], "c")
    adds = "sums" not in where  # the body adds its sums into the accumulators itself
    bind("@sum", acc if adds else where["sums"], "sum")
    zeroed = _add_runs(region)
    looped = {e for start, stop in zeroed for e in range(start, stop)}
    for e in range(region.sums):
        kind = region.kind(e)  # a min or max starts at inf or -inf and its winner at 0, as
        if e not in looped:  # the first iteration would set them: no test of it in the chain
            out.append(f"store {t} {_START.get(kind, zero)}, ptr {at(f'{r}.acc{e}', e)}")
        if kind != "add":
            out.append(f"store {t} 0.0, ptr {at(f'{r}.w{e}.p', region.winner_value(e))}")
    for start, stop in zeroed:  # their accumulators start at -0.0, stored by a loop
        z = f"r{i}.z{start}"
        out += [f"br label %{z}", f"{z}:",
                f"%{z}.e = phi i64 [ {start}, %{block[0]} ], [ %{z}.en, %{z} ]",
                f"%{z}.p = getelementptr inbounds {t}, ptr {acc}, i64 %{z}.e",
                f"store {t} {zero}, ptr %{z}.p", f"%{z}.en = add i64 %{z}.e, 1",
                f"%{z}.more = icmp slt i64 %{z}.en, {stop}",
                f"br i1 %{z}.more, label %{z}, label %{z}.done", f"{z}.done:"]
        block[0] = f"{z}.done"
    if adds:  # a body adding +0.0 adds no instruction: its sum is +0.0, as written out
        body, ids = region.body.nodes, region.body.outputs["@sum"].ids
        for e, o in enumerate(ids):
            if body[o].op == "const" and body[o].attr == 0 and \
                    math.copysign(1.0, body[o].attr) > 0:
                out.append(f"store {t} 0.0, ptr {at(f'{r}.pz{e}', e)}")
    if region.carry:
        bind("@h", where["h"], "h")
        bind("@next", where["next"], "next")
    # The block that ends an iteration, which the index's phi names: the last min's or
    # max's where they branch (below), else the last add loop's.
    runs = [] if adds else zeroed  # the latch's add loops
    if branches(region):
        latch = f"r{i}.m{region.winners[-1]}.keep"
    else:
        latch = f"r{i}.a{runs[-1][0]}.done" if runs else f"r{i}.head"
    first, end, enter = span
    out += [enter, f"r{i}.head:",
            f"{r}.it = phi i64 [ {first}, %{block[0]} ], [ {r}.next, %{latch} ]",
            f"{r}.itf = sitofp i64 {r}.it to {t}", f"store {t} {r}.itf, ptr {r}.ix"]
    for j, (_, stride, offset) in enumerate(region.streams):
        out += [f"{r}.o{j} = mul i64 {r}.it, {stride}", f"{r}.q{j} = add i64 {r}.o{j}, {offset}",
                f"{r}.w{j} = getelementptr inbounds {t}, ptr {where['bases'][j]}, i64 {r}.q{j}"]
        bind(f"@s{j}", f"{r}.w{j}", f"s{j}")
    out += [f"{r}.mo = mul i64 {r}.it, {region.maps}",
            f"{r}.row = getelementptr inbounds {t}, ptr {where['rows']}, i64 {r}.mo"]
    bind("@map", f"{r}.row", "map")
    out.append(f"call void @{prefix}b{i}.run(ptr {r}.pp, ptr {where['body']})")
    if region.carry:  # the body has read the whole state: the next takes its place
        size = region.carry * (4 if t == "float" else 8)
        out.append(f"call void @llvm.memcpy.p0.p0.i64(ptr {where['h']}, ptr {where['next']}, "
                   f"i64 {size}, i1 false)")
    tail = [f"r{i}.head"]
    sums = where.get("sums")
    for start, stop in runs:  # acc[e] += sums[e], as a loop the vectoriser takes
        out += add_loop(f"r{i}.a{start}", acc, sums, start, stop, t, tail)
    for e in range(region.sums):
        if e in looped or adds:
            continue
        out += [f"{r}.t{e}.p = getelementptr inbounds {t}, ptr {sums}, i64 {e}",
                f"{r}.t{e} = load {t}, ptr {r}.t{e}.p",
                f"{r}.u{e} = load {t}, ptr {r}.acc{e}"]
        kind = region.kind(e)
        if kind == "add":
            out.append(f"{r}.v{e} = fadd {t} {r}.u{e}, {r}.t{e}")
        else:  # min or max: keep the earlier value on a tie (`ole`/`oge` as the op's row)
            m, keep = f"r{i}.m{e}", f"{r}.k{e}"
            out.append(f"{keep} = fcmp {'ole' if kind == 'min' else 'oge'} {t} {r}.u{e}, "
                       f"{r}.t{e}")
            if branches(region):
                out += [f"br i1 {keep}, label %{m}.keep, label %{m}.take, "
                        '!prof !{!"branch_weights", i32 1000, i32 1}', f"{m}.take:",
                        f"store {t} {r}.t{e}, ptr {r}.acc{e}",
                        f"store {t} {r}.itf, ptr {r}.w{e}.p", f"br label %{m}.keep",
                        f"{m}.keep:"]
                continue
            # The winner from the new value (kept exactly where it is the old one, NaN never
            # kept), not from `keep`: one compare feeding both selects went through the flags
            # and a mask move, a chain of ~9 cycles an iteration; each alone, ~4.
            out += [f"{r}.v{e} = select i1 {keep}, {t} {r}.u{e}, {t} {r}.t{e}",
                    f"{r}.kept{e} = fcmp oeq {t} {r}.v{e}, {r}.u{e}",
                    f"{r}.wo{e} = load {t}, ptr {r}.w{e}.p",
                    f"{r}.wn{e} = select i1 {r}.kept{e}, {t} {r}.wo{e}, {t} {r}.itf",
                    f"store {t} {r}.wn{e}, ptr {r}.w{e}.p"]
        out.append(f"store {t} {r}.v{e}, ptr {r}.acc{e}")
    out += [f"{r}.next = add i64 {r}.it, 1", f"{r}.more = icmp slt i64 {r}.next, {end}",
            f"br i1 {r}.more, label %r{i}.head, label %r{i}.done", f"r{i}.done:"]
    block[0] = f"r{i}.done"
    return out


def branches(region) -> bool:
    """Whether the loop keeps its mins' and maxes' running values by a branch rather than by
    selects. Over a long loop the value changes in few iterations (about log n of n in a
    random order) and the branch is predicted, where the selects' compare is a chain of about
    4 cycles an iteration: max(x) of 10^6 elements 10 times as fast. Over a short one (k-means'
    10 centroids a point) the branch misses about one time in three, and the chain hides
    behind the body's own work: the selects are twice as fast at 10 and 30 iterations, as
    fast at 200, and the branch 1.16 times at 500 and 1,000 (bench/minmax.py)."""
    return bool(region.winners) and region.n > BRANCH_FROM


def accumulates(region) -> bool:
    """Whether the body of `region` adds its sums into the region's accumulators itself
    (llvm._Layout.adding) rather than storing them for the loop to add: all added, none a
    min or max, no state carried, and most of them not rows of an inner loop that runs
    every iteration. A pullback's cotangents of values captured from outside are then added
    where the body computes them (a GMM's of k <= 10 components, each a store: 25 % faster
    a gradient), and an inner loop that runs one iteration (`gate`: k-means' winning
    centroid) adds its row where they lie: no pass over all of them per iteration to zero,
    copy or add. Rows an inner loop writes in every iteration (a GMM's of 100 components)
    are stored and added by the loop's vectorised add instead: 20 % faster there."""
    if not region.sums or region.winners or region.carry:
        return False
    nodes = region.body.nodes
    dense = {i for i, node in enumerate(nodes) if node.op == "region" and
             gate(node.attr) is None}
    rows = sum(1 for i in region.body.outputs["@sum"].ids
               if nodes[i].op == "part" and nodes[i].args[0] in dense)
    return 2 * rows <= region.sums


def add_loop(name: str, to: str, values: str, start: int, stop: int, t: str,
             block: list) -> list[str]:
    """`to[e] += values[e]` for e in [start, stop), as a loop the vectoriser takes, written
    after block `block[0]`, which is left at the loop's end."""
    a = name
    out = [f"br label %{a}", f"{a}:",
           f"%{a}.e = phi i64 [ {start}, %{block[0]} ], [ %{a}.en, %{a} ]",
           f"%{a}.tp = getelementptr inbounds {t}, ptr {values}, i64 %{a}.e",
           f"%{a}.t = load {t}, ptr %{a}.tp",
           f"%{a}.up = getelementptr inbounds {t}, ptr {to}, i64 %{a}.e",
           f"%{a}.u = load {t}, ptr %{a}.up", f"%{a}.v = fadd {t} %{a}.u, %{a}.t",
           f"store {t} %{a}.v, ptr %{a}.up", f"%{a}.en = add i64 %{a}.e, 1",
           f"%{a}.more = icmp slt i64 %{a}.en, {stop}",
           f"br i1 %{a}.more, label %{a}, label %{a}.done", f"{a}.done:"]
    block[0] = f"{a}.done"
    return out


def _add_runs(region) -> list[tuple[int, int]]:
    """Runs [start, stop) of at least ADD_LOOP sums combined by `+`, which the loop's latch
    adds as a loop of its own rather than one instruction each: a pullback that sums the
    cotangents of thousands of captured values stays short code (each accumulator still
    adds its iterations in order)."""
    runs, e = [], 0
    while e < region.sums:
        stop = e
        while stop < region.sums and region.kind(stop) == "add":
            stop += 1
        if stop - e >= ADD_LOOP:
            runs.append((e, stop))
        e = stop + 1
    return runs
