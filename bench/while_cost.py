"""Compile cost of `while c max N { ... }` against N: lowering, the gradient graph, CPU build.

    python bench/while_cost.py [--steps 10 100 1000] [--markdown]

A `while` loop is unrolled N times with a running flag (diffdsl/language/lower/while_loop.py),
so every cost should grow linearly in N and in the size of the body. Two bodies: a Newton step
for the square root, written out, and the same step with its derivative taken inside the
program by `grad(e, r)`. Each row is one fresh compilation; the CPU build is of the gradient
graph (text to loaded machine code, no disk cache). """

from __future__ import annotations

import argparse
import time

from common import machine, table

from diffdsl.backends import cpu
from diffdsl.graph import autodiff
from diffdsl.language.lower import lower
from diffdsl.language.parse import parse

BODIES = {
    "newton": "r = r - (r * r - c) / (2 * r)",
    "newton, grad inside": "r = r - (r * r - c) / grad(r * r - c, r)",
}
SOURCE = """\
input x
input c
r = x
while abs(r * r - c) > 1e-300 max {n} {{
    {body}
}}
output r
"""


def measure(body: str, n: int) -> list:
    text = SOURCE.format(n=n, body=body)
    start = time.perf_counter()
    graph = lower(parse(text, "loop.dd", cache=False))
    lowered = time.perf_counter()
    grad = autodiff.grad(graph)
    derived = time.perf_counter()
    cpu.Kernel(grad, "float64")
    built = time.perf_counter()
    return [n, f"{len(graph):,}", f"{len(grad):,}", f"{lowered - start:.3f}",
            f"{derived - lowered:.3f}", f"{built - derived:.3f}",
            f"{(built - start) / n * 1e3:.2f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    measure(BODIES["newton"], 1)  # loads Lark's tables and LLVM once, outside the rows
    print(f"machine: {machine()}")
    for name, body in BODIES.items():
        print(f"\n{name}: `{body}`")
        rows = [measure(body, n) for n in args.steps]
        print(table(["N", "nodes", "grad nodes", "lower s", "grad s", "cpu build s",
                     "ms a step"], rows, markdown=args.markdown))


if __name__ == "__main__":
    main()
