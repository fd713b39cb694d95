"""What `ir.verify` and hashing graphs by key cost, side by side in one run (README).

    python bench/verify.py [--sizes 5 6 7 8] [--markdown]

1. Compile: for det-by-minors gradient graphs, seconds per node of `ir.verify` (what each
   backend pays before it compiles) against the emitter's LLVM IR text and the compile of that
   text to machine code (what the CPU backend pays anyway), and against printing and hashing the
   graph's canonical text (`Graph.key`, which the kernel cache computes). Ratios are
   verify / (emit + compile).
2. The single-point hot path: the engine looks its plan up by `(graph, dtype)`; the lookup with
   the graph as key (hashed by its cached key) against the old key `(id(graph), dtype)`, both in
   one loop, and for scale `prog(A=x)` (which looks the plan up) and `prog.grad(A=x)` (whose
   own fast path does not) per call.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from common import det_source, machine, per_call, table, uniform_draw

import diffdsl
from diffdsl.backends import cpu, native
from diffdsl.graph.ir import Graph, verify


def _seconds(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compile_costs(sizes, markdown: bool) -> str:
    rows = []
    for n in sizes:
        prog = diffdsl.compile(det_source(n), cache=False)
        graph = prog.derivative("grad")
        nodes = len(graph.nodes)
        check = _seconds(lambda g=graph: verify(g))
        keyed = _seconds(lambda g=graph: Graph(g.nodes, g.inputs, g.outputs).key())
        emit = _seconds(lambda g=graph: cpu.emit(g, "float64"), 3)
        text, _ = cpu.emit(graph, "float64")
        build = _seconds(lambda t=text, k=nodes: native.compile_ir(t, k), 1)
        rows.append([n, f"{nodes:,}", f"{check / nodes * 1e6:.2f}", f"{keyed / nodes * 1e6:.2f}",
                     f"{emit / nodes * 1e6:.2f}", f"{build / nodes * 1e6:.2f}",
                     f"{check / (emit + build):.3f}"])
    return table(["n", "nodes", "verify us/node", "key us/node", "emit us/node",
                  "compile us/node", "verify / (emit + compile)"], rows, markdown)


def hot_path(markdown: bool) -> str:
    prog = diffdsl.compile(det_source(3), backend="cpu", cache=False)
    graph = prog.graph
    plans = {(graph, "float64"): 1, (id(graph), "float64"): 1}
    loops = 1_000_000
    by_graph, by_id = [], []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(loops):
            plans.get((graph, "float64"))
        by_graph.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(loops):
            plans.get((id(graph), "float64"))
        by_id.append(time.perf_counter() - start)
    g, i = statistics.median(by_graph) / loops, statistics.median(by_id) / loops
    value = per_call(lambda A: prog(A=A), uniform_draw(3, 0))["seconds"]  # engine.run
    grad = per_call(lambda A: prog.grad(A=A), uniform_draw(3, 0))["seconds"]  # api's own path
    rows = [["plan lookup by (graph, dtype)", f"{g * 1e9:.0f}", f"{g / i:.2f}"],
            ["plan lookup by (id(graph), dtype)", f"{i * 1e9:.0f}", "1.00"],
            ["prog(A=x), det 3, cpu (looks the plan up)", f"{value * 1e9:.0f}", ""],
            ["prog.grad(A=x), det 3, cpu (no lookup)", f"{grad * 1e9:.0f}", ""]]
    return table(["call", "ns", "ratio to id()"], rows, markdown, left=(0,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 6, 7, 8])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    print(machine())
    print(compile_costs(args.sizes, args.markdown))
    print()
    print(hot_path(args.markdown))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
