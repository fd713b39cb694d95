"""Code outside a kernel's loops left unoptimised (backends/llvm_cold.py): in a graph with
loops whose straight-line code is over `native.OPTIMIZE_NODES` nodes and less work than its
loops, the segments without a loop are `optnone`, the one with the loop is not, and the
values are those of the kernel optimised whole, to the bit (the code outside the loop is
products and sums, which the optimiser does not round otherwise); a smaller graph, or one
whose straight-line code is the work, is optimised whole."""

from __future__ import annotations

import re

import numpy as np

import diffdsl
from diffdsl.backends import cpu, llvm, llvm_cold, native

# det by minors at n = 7 is about 2,400 nodes of straight-line code beside one loop
BIG = """const n = 7
input A[n, n]
input x[2000]
def det(M) = if rows(M) == 1 then M[0, 0]
             else sum((-1) ** j * M[0, j] * det(minor(M, 0, j)) for j in range(cols(M)))
output y = det(A) * sum(sin(x[i] * A[0, 0]) for i in range(2000))
"""
SMALL = BIG.replace("const n = 7", "const n = 4")


def kernel(graph, straight):
    text, slots = llvm.emit(graph, "float64", cpu.DATA_OFFSET or 0,
                            vector_math=native.vector_math(), straight=straight)
    obj = native.compile_ir(text, cpu.code_size(graph), loops=True)
    return text, cpu.Kernel(graph, "float64", obj=obj, slots=slots)


def segments(text: str) -> dict[str, str]:
    """Each top-level segment's attributes, and whether it runs a loop."""
    found = {}
    for chunk in text.split("\ndefine ")[1:]:
        m = re.match(r"internal void @(seg\d+)\(ptr noalias %p, ptr noalias %s, ptr %x\) "
                     r"([a-z ]+) \{", chunk)
        if m:
            loop = " phi " in chunk or "call void @b" in chunk
            found[m.group(1)] = (m.group(2), loop)
    return found


def test_code_outside_loops_is_left_unoptimised():
    prog = diffdsl.compile(BIG, cache=False)
    graph = prog.derivative("grad")
    assert cpu.code_size(graph) <= native.OPTIMIZE_LOOP_NODES  # the module gets O3
    text, cold = kernel(graph, native.STRAIGHT)
    _, warm = kernel(graph, None)
    found = segments(text)
    assert any("optnone" in attrs for attrs, _ in found.values())
    assert all(("optnone" in attrs) != loop for attrs, loop in found.values()), found
    assert "optnone" in cpu.emit(graph, "float64")[0]  # the engine's kernels are so
    rng = np.random.default_rng(4)
    for _ in range(3):
        point = {"A": rng.uniform(-1, 1, (7, 7)), "x": rng.uniform(-2, 2, 2000)}
        inputs = [np.ascontiguousarray(point[name], dtype=float).reshape(-1)
                  for name in graph.inputs]
        got, want = ([np.empty(port.size) for port in graph.outputs.values()]
                     for _ in range(2))
        cold.point(inputs, got)
        warm.point(inputs, want)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        reference, computed = (prog.grad(point, backend=b) for b in ("numpy", "cpu"))
        for name in reference:
            np.testing.assert_allclose(computed[name], reference[name], rtol=1e-12, atol=1e-13)


def test_a_small_graph_is_optimised_whole():
    prog = diffdsl.compile(SMALL, cache=False)
    assert "optnone" not in cpu.emit(prog.derivative("grad"), "float64")[0]
    # nor one whose straight-line code is more work than its loop (200 iterations of a sine):
    # there the code outside the loop is what runs, and it counts towards the kernel's size
    short = diffdsl.compile(BIG.replace("range(2000)", "range(200)").replace("x[2000]", "x[200]"),
                            cache=False).derivative("grad")
    assert any(node.op == "region" for node in short.nodes)
    assert "optnone" not in cpu.emit(short, "float64")[0]
    assert cpu.code_size(short) > llvm_cold.outside_loops(short)
    # nor is a graph without loops, however large: it is compiled at O0 whole instead
    no_loop = diffdsl.compile(BIG.replace("range(2000)", "range(3)"), cache=False)
    graph = no_loop.derivative("grad")
    assert not any(node.op == "region" for node in graph.nodes)
    assert "optnone" not in cpu.emit(graph, "float64")[0]
