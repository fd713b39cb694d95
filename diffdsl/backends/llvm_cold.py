"""Code outside a kernel's loops left to the code generator alone: in a graph with loops, LLVM's
O3 pipeline runs on the whole module (native.compile_ir), and on a big graph most of its time
went to the straight-line code outside the loops, which runs once a call. Where that code has
more nodes than a graph without loops is optimised at (`straight`, native.STRAIGHT:
OPTIMIZE_NODES), at most OPTIMIZE_LOOP_NODES (O2's code generator on more unoptimised code
than that took longer than the O0 kernel: a second-order derivative of a scan, 130,000 nodes
outside its loops, ran a test from 9 s to minutes), and the loops do at least as much work a
call (`Region.work`: their bodies written out),
its segments that hold no loop are marked `optnone`, as such a graph's whole code is left
unoptimised, and count nothing towards the size that decides whether the loops are
(cpu.code_size). Where the code outside is the work (det by minors at n = 10 beside a short
loop, 28,700 nodes), it counts as before, and the kernel is compiled at O0 whole: O2's code
generator on that much unoptimised code took twice as long (0.73 s against 0.32). GMM's
gradient at d = 10, k = 100: 1.42 -> 0.79 s of compiling, the same 9.3 ms a call. The emitted
arithmetic is the same; only where the vectoriser would have widened a libm call in that
code (exp four lanes at a time, through glibc's libmvec) may a value differ, in its last bit,
as between kernels optimised and not."""

from __future__ import annotations

from ..graph.ir import Graph

SKIPPED = ("input", "const", "part", "region")  # nodes that are no code of their own


def outside_loops(graph: Graph) -> int:
    """How many nodes of `graph` are code outside its loops."""
    return sum(node.op not in SKIPPED for node in graph.nodes)


def cold(graph: Graph, straight: tuple[int, int]) -> bool:
    """Whether `graph`'s code outside its loops is left unoptimised (module docstring): more
    nodes than straight[0], at most straight[1], and less work than its loops."""
    outside = outside_loops(graph)
    if not straight[0] < outside <= straight[1]:
        return False
    work = sum(node.attr.work for node in graph.nodes if node.op == "region")
    return work >= outside


def cold_segments(graph: Graph, segments: list, straight: tuple | None) -> set[int]:
    """The numbers of the segments (start, stop) of `graph` to mark `optnone`."""
    if straight is None or len(segments) < 2:  # one segment is inlined into the entries
        return set()
    loops = [i for i, node in enumerate(graph.nodes) if node.op == "region"]
    if not loops or not cold(graph, straight):
        return set()
    return {k for k, (start, stop) in enumerate(segments)
            if not any(start <= i < stop for i in loops)}
