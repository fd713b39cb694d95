"""Values copied in blocks: an output whose elements are one loop's values at a step (a
Hessian's diagonal whose columns take two or three colours) is written by a loop of
`memcpy`s, not a load and a store per element (llvm.py's layout finds the runs; llvm.py and
c.py emit the loop)."""

from __future__ import annotations

from ..graph.ir import Graph


def strided_copies(graph: Graph, ids, covered, least: int) -> list[tuple]:
    """Runs of an output's elements not `covered` (which it updates) that are one region's
    values in blocks at steps: elements e + m * step + c are values v + m * by + c, for m
    below count and c below width, at least `least` in all; each (e, region, v, count, step,
    by, width). A Hessian's diagonal whose columns take two colours reads its even elements
    from one sweep's loop and its odd ones from the other's (blocks of 1; of 2 and 1 for
    three columns an iteration): a loop copies them, not a load and a store per element
    (20,000 were 40,000 lines of IR)."""
    by_region: dict[int, list[tuple[int, int]]] = {}
    for e, i in enumerate(ids):
        node = graph.nodes[i]
        if node.op == "part" and not covered[e]:
            by_region.setdefault(node.args[0], []).append((e, node.attr))
    found = []
    for r, pairs in by_region.items():
        blocks = blocks_of(pairs)
        k = 0
        while k + 1 < len(blocks):
            (e, v, w), m = blocks[k], 2
            if blocks[k + 1][2] != w:
                k += 1
                continue
            step, by = blocks[k + 1][0] - e, blocks[k + 1][1] - v
            while k + m < len(blocks) and blocks[k + m][2] == w and \
                    blocks[k + m][0] - blocks[k + m - 1][0] == step and \
                    blocks[k + m][1] - blocks[k + m - 1][1] == by:
                m += 1
            # `by` < 0: a reverse scan's cotangent of step i is its value at iteration n-1-i.
            if m * w >= least and abs(by) >= w:
                found.append((e, r, v, m, step, by, w))
                covered[[e + q * step + c for q in range(m) for c in range(w)]] = True
                k += m
            else:  # a run from any of its blocks but the last fails the same way: linear
                k += m - 1
    return found


def blocks_of(pairs: list[tuple[int, int]]) -> list[list[int]]:
    """(element, value) pairs in element order as blocks [element, value, width]: values in a
    row at elements in a row."""
    blocks: list[list[int]] = []
    for e, v in pairs:
        if blocks and blocks[-1][0] + blocks[-1][2] == e and blocks[-1][1] + blocks[-1][2] == v:
            blocks[-1][2] += 1
        else:
            blocks.append([e, v, 1])
    return blocks


def nests(strided: list[tuple]) -> list[tuple]:
    """The layout's strided copies (port, element, region, value, count, step, by, width) with
    each run of them alike but for their first element and value, which advance by the same
    amounts from one to the next, as one: (port, element, region, value, count, (step, by,
    width), (runs, element advance, value advance)). A gradient by a matrix its loop nest reads
    by columns is one strided copy per row of the matrix: 140 loops of 66 copies each, which
    LLVM's unroller wrote out into a block of 37,000 instructions; one nest of two loops."""
    found: list = []
    for k, e, r, v, count, *steps in strided:
        if found:
            k0, e0, r0, v0, count0, steps0, (runs, de, dv) = found[-1]
            if (k0, r0, count0, steps0) == (k, r, count, tuple(steps)) and (
                    runs == 1 or (e - e0, v - v0) == (runs * de, runs * dv)):
                found[-1] = (k0, e0, r0, v0, count0, steps0,
                             (runs + 1, (e - e0) // runs, (v - v0) // runs))
                continue
        found.append((k, e, r, v, count, tuple(steps), (1, 0, 0)))
    return found


def strided_loop(name: str, to: str, first: int, e: int, count: int, steps: tuple, t: str,
                 block: list, runs: tuple = (1, 0, 0)) -> list[str]:
    """`to[e + q * de + m * step + c] = scratch[first + q * dv + m * by + c]` for m below
    `count`, c below the width and q below the runs: `steps` is (step, by, width), `runs`
    (runs, de, dv)."""
    a, (step, by, width), (outer, de, dv) = name, steps, runs
    size = 4 if t == "float" else 8
    out = []
    if outer > 1:  # a loop over the runs around the loop over one run's copies
        out = [f"br label %{a}.o", f"{a}.o:",
               f"%{a}.q = phi i64 [ 0, %{block[0]} ], [ %{a}.qn, %{a}.done ]",
               f"%{a}.qv = mul i64 %{a}.q, {dv}", f"%{a}.qe = mul i64 %{a}.q, {de}",
               f"%{a}.f0 = add i64 %{a}.qv, {first}", f"%{a}.e0 = add i64 %{a}.qe, {e}"]
        block[0], first, e = f"{a}.o", f"%{a}.f0", f"%{a}.e0"
    out += [f"br label %{a}", f"{a}:",
            f"%{a}.m = phi i64 [ 0, %{block[0]} ], [ %{a}.mn, %{a} ]",
            f"%{a}.fo = mul i64 %{a}.m, {by}", f"%{a}.fi = add i64 %{a}.fo, {first}",
            f"%{a}.tp = getelementptr inbounds {t}, ptr %s, i64 %{a}.fi",
            f"%{a}.eo = mul i64 %{a}.m, {step}", f"%{a}.ei = add i64 %{a}.eo, {e}",
            f"%{a}.up = getelementptr inbounds {t}, ptr {to}, i64 %{a}.ei",
            f"call void @llvm.memcpy.p0.p0.i64(ptr %{a}.up, ptr %{a}.tp, i64 {width * size}, "
            "i1 false)", f"%{a}.mn = add i64 %{a}.m, 1",
            f"%{a}.more = icmp slt i64 %{a}.mn, {count}",
            f"br i1 %{a}.more, label %{a}, label %{a}.done", f"{a}.done:"]
    block[0] = f"{a}.done"
    if outer > 1:
        out += [f"%{a}.qn = add i64 %{a}.q, 1", f"%{a}.qmore = icmp slt i64 %{a}.qn, {outer}",
                f"br i1 %{a}.qmore, label %{a}.o, label %{a}.end", f"{a}.end:"]
        block[0] = f"{a}.end"
    return out
