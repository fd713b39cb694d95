"""Code outside a kernel's loops left to the code generator alone: in a graph with loops, LLVM's
O3 pipeline runs on the whole module (native.compile_ir), and on a big graph most of its time
went to the straight-line code outside the loops, which runs once a call. Where that code has
more nodes than a graph without loops is optimised at (native.STRAIGHT: OPTIMIZE_NODES) and
at most OPTIMIZE_LOOP_NODES, its segments that hold no loop are marked `optnone`, as such a
graph's whole code is left unoptimised, and count nothing towards the size that decides
whether the loops are (cpu.code_size). GMM's gradient at d = 10, k = 100: 1.42 -> 0.79 s of
compiling, the same 9.3 ms a call. The emitted arithmetic is the same; only where the
vectoriser would have widened a libm call in that code (exp four lanes at a time, through
glibc's libmvec) may a value differ, in its last bit, as between kernels optimised and not."""

from __future__ import annotations

from ..graph.ir import Graph

SKIPPED = ("input", "const", "part", "region")  # nodes that are no code of their own


def outside_loops(graph: Graph) -> int:
    """How many nodes of `graph` are code outside its loops."""
    return sum(node.op not in SKIPPED for node in graph.nodes)


def cold_segments(graph: Graph, segments: list, straight: tuple | None) -> set[int]:
    """The numbers of the segments (start, stop) of `graph` to mark `optnone`, where its
    code outside the loops has more nodes than `straight[0]` and at most `straight[1]` (past
    them the kernel is compiled at O0 whole: cpu.code_size)."""
    if straight is None or len(segments) < 2:  # one segment is inlined into the entries
        return set()
    loops = [i for i, node in enumerate(graph.nodes) if node.op == "region"]
    if not loops or not straight[0] < outside_loops(graph) <= straight[1]:
        return set()
    return {k for k, (start, stop) in enumerate(segments)
            if not any(start <= i < stop for i in loops)}
