"""Costs of building a derivative, each beside what it was, in one run.

    python bench/build_costs.py [--rounds 3] [--quick]

1. Forward sweeps (graph/reach.py): the graph of a forward-mode Jacobian, each column's sweep
   walking the nodes its seed reaches, against every active node (how it was, by replacing
   `Reach.order` with the whole range). GradBench's hand tracking (`bench/gradbench/ht.dd`,
   by u and theta, as `ht.py` asks for it) and a written-out `[x[i] * 2 for i in range(n)]`.
2. Segments (backends/llvm.py): compiling a Jacobian kernel whose output holds each of 100
   values at 99 places (10,000 stores), with segments cut by nodes and stores against by
   nodes alone (SEGMENT nodes a segment, whatever it stores).
3. Gathered streams (backends/llvm_gather.py): compiling a loop over a vector written out
   element by element, 16,000 elements of which 13,000 are zeros and the rest values computed
   before the loop (as a second-order derivative of `examples/loops/pendulums.dd` gathers its
   tangents): zeros copied from a table and values by a loop over their places, against each
   element stored alone.
4. Strided copies in one nest (backends/llvm_blocks.py): compiling the gradient of a loop nest
   whose inner loop reads a column of a matrix (tests/test_regions.py): its 140 copies of 66
   values each, one per row of the matrix, as one nest of two loops, against 140 loops, which
   LLVM's unroller wrote out into a block of 37,000 instructions, so that the kernel was
   optimised again without unrolling (backends/native.py; kept, it took most of a minute).
5. Short loops over rows (language/lower/regions.py, `BodyBuilder.listing`): lowering a list
   of 4 mixture components, each a function of 10^5 rows, reduced along it: the short loop
   written out as soon as its body would list the rows, against its body built element by
   element first (once each: that takes half a minute).
6. One output asked (graph/autodiff.py, `_asked`): deriving the Jacobian of a comprehension
   stored beside a sum over it, from that output's nodes alone, against from the whole graph.

The best of `--rounds` for each, seconds.
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

from common import machine

import diffdsl
from diffdsl.backends import cpu, llvm, llvm_gather, llvm_segment
from diffdsl.graph import autodiff
from diffdsl.graph.reach import Reach
from diffdsl.language.lower import regions

HERE = Path(__file__).resolve().parent
# tests/test_rows.py's "outputs kept by rows beside a derivative inside", written out: d t / d x
# holds 6 a^2 x[j] at the 99 places of column j off the diagonal.
STORES = ("input x[100]\ninput a\ng = grad(sum(x ** 2) * a ** 3, a)\n"
          "output t = x * grad(a ** 3, a) + g\n")


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def sweeps(rounds: int) -> list[tuple[str, float, float]]:
    rows = []
    cases = [("hand tracking: jacobian by u, theta", (HERE / "gradbench" / "ht.dd").read_text(),
              "err", ["u", "theta"]),
             ("[x[i] * 2 for i in range(2000)], written out",
              "input x[2000]\noutput y = [x[i] * 2 for i in range(2000)]\n", "y", ["x"])]
    for label, source, of, wrt in cases:
        with diffdsl.limits.using(unroll=10**9):
            graph = diffdsl.compile(source, cache=False).graph
        build = partial(autodiff.jacobian, graph, of, wrt, mode="forward")
        reached = best(build, rounds)
        order = Reach.order
        Reach.order = lambda self, seeds: list(range(self.start, self.stop))
        try:
            every = best(build, rounds)
        finally:
            Reach.order = order
        rows.append((label, reached, every))
    return rows


def segments(rounds: int) -> tuple[str, float, float]:
    with diffdsl.limits.using(unroll=10**9):
        prog = diffdsl.compile(STORES, cache=False)
    graph = autodiff.jacobian(prog.graph, "t", mode="reverse")

    def compile_it():
        cpu.Kernel(graph, "float64", cache=False)

    cut = best(compile_it, rounds)
    weighted = llvm._Layout._segments

    def by_nodes(self, n):
        stores, self.stores = self.stores, {}
        try:
            return weighted(self, n)
        finally:
            self.stores = stores

    llvm._Layout._segments = by_nodes
    try:
        nodes_only = best(compile_it, rounds)
    finally:
        llvm._Layout._segments = weighted
    return "a Jacobian storing 10,000 elements: compile", cut, nodes_only


def gathered(rounds: int) -> tuple[str, float, float]:
    items = [f"sin(x[{k // 5}]) * a" if k % 5 == 4 else "0.0" for k in range(16_000)]
    source = (f"input x[3200]\ninput a\ninput w[16000]\nv = [{', '.join(items)}]\n"
              "output s = sum(v[i] * w[i] for i in range(16000))\n")
    graph = diffdsl.compile(source, cache=False).graph

    def compile_it():
        cpu.Kernel(graph, "float64", cache=False)

    now = best(compile_it, rounds)
    limits = llvm_gather.TABLE_FROM, llvm_gather.LOOP_FROM
    llvm_gather.TABLE_FROM = llvm_gather.LOOP_FROM = 10**9
    try:
        alone = best(compile_it, rounds)
    finally:
        llvm_gather.TABLE_FROM, llvm_gather.LOOP_FROM = limits
    return "a loop's stream of 16,000 scattered elements: compile", now, alone


def unrolled_blocks() -> tuple[str, float, float]:
    source = ("const n = 66\nconst m = 140\ninput B[m, n]\ninput v[m]\n"
              "output y = sum(tanh(sum(B[j, i] * v[j] for j in range(m))) ** 2 "
              "for i in range(n))\n")
    graph = autodiff.grad(diffdsl.compile(source, cache=False).graph)

    def compile_it():
        cpu.Kernel(graph, "float64", cache=False)

    nested = best(compile_it, 1)
    joined = llvm_segment.nests
    llvm_segment.nests = lambda strided: [(*copy[:5], tuple(copy[5:]), (1, 0, 0))
                                          for copy in strided]
    try:
        redone = best(compile_it, 1)
    finally:
        llvm_segment.nests = joined
    return "a loop nest's gradient by a matrix read by columns: compile", nested, redone


def short_loops() -> tuple[str, float, float]:
    source = ("input X[100000, 3]\ninput alpha[4]\ninput mu[4, 3]\ninput q[4, 3]\n"
              "def component(X, a, m, s) = a + sum(s) - 0.5 * sum((exp(s) * (X - m)) ** 2, "
              "axis=1)\noutput s = sum(logsumexp([component(X, alpha[c], mu[c], q[c]) "
              "for c in range(4)], axis=0))\n")

    def lower():
        diffdsl.compile(source, cache=False, backend="numpy")

    now = best(lower, 1)
    listing, regions.BodyBuilder.listing = regions.BodyBuilder.listing, lambda self, size: None
    try:
        before = best(lower, 1)
    finally:
        regions.BodyBuilder.listing = listing
    return "4 components over 10^5 rows, in a list reduced along it: lower", now, before


def one_output(rounds: int) -> tuple[str, float, float]:
    body = " + ".join(f"sin(x[i] * {k + 1})" for k in range(90))
    graph = diffdsl.compile(f"input x[100]\nr = [{body} for i in range(100)]\noutput o = r\n"
                            "output s = sum(r * x)\n", cache=False).graph

    def derive():
        autodiff.jacobian(graph, "o", mode="forward")

    now = best(derive, rounds)
    asked, autodiff._asked = autodiff._asked, lambda g, of: g
    try:
        before = best(derive, rounds)
    finally:
        autodiff._asked = asked
    return "jacobian of a comprehension stored beside a sum over it: derive", now, before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="leave out the loop nest and the short loops (a minute)")
    args = parser.parse_args()
    print(machine())
    print("| what | now | before | before / now |\n|---|---:|---:|---:|")
    parts = [*sweeps(args.rounds), segments(args.rounds), gathered(args.rounds),
             one_output(args.rounds)]
    if not args.quick:
        parts += [unrolled_blocks(), short_loops()]
    for label, now, before in parts:
        print(f"| {label} | {now:.3f} s | {before:.3f} s | {before / now:.1f} |")


if __name__ == "__main__":
    main()
