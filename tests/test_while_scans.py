"""`while c max N` past the `unroll` limit: the steps after the first are one scan carrying
the names the body assigns, the running flag and a named loop's count of steps
(language/lower/while_loop.py). Each program is built so and written out (the reference
semantics) and must agree on values, `label.steps` and `label.converged`, gradients, jvps and
Hessians, on the numpy interpreter and the CPU; the graph does not grow with N. (The
fuzzer's programs, whose loops have up to 4 steps, run both ways in test_regions_fuzz at
`unroll=1`, where those loops are scans too.)"""

from __future__ import annotations

import numpy as np
import pytest
from test_scans import close

import diffdsl
from diffdsl import limits

NEWTON = """
input c
r = c
while abs(r * r - c) > 1e-12 * c max 100 as newton {
    r = 0.5 * (r + c / r)
}
output y = r + newton.steps * 0.001
output steps = newton.steps
output converged = newton.converged
"""

# runs to its `max` for some inputs and stops early for others
HALVING = """
input x
input a
t = x
while t > 1 max 100 as h {
    t = t * a / 2
}
output t = t * (1 + h.converged)
"""

# a `break if` in the middle of a step, a counter that varies (not a static number)
BREAK = """
input x
s = x
k = 0.001 * x
while s < 50 max 100 {
    k = k + 1
    s = s * 1.05 + sin(k)
    break if s > 5 * x
    s = s + 0.01
}
output y = s * k
"""

# a vector state and a loop that may stop at any step
VECTOR = """
input v[3]
h = v * 1.0
while sum(h * h) < 50 max 90 as w {
    h = [h[1] + 0.1, h[2] * 1.1, sqrt(abs(h[0]) + 1)]
}
output y = sum(h) + w.steps
"""

PROGRAMS = {"newton": NEWTON, "halving": HALVING, "break": BREAK, "vector": VECTOR}


def build(source: str, unroll: int = 64):
    with limits.using(unroll=unroll):
        return diffdsl.compile(source, cache=False)


def scans(graph) -> list:
    return [node.attr for node in graph.nodes if node.op == "region" and node.attr.carry]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_while_as_a_scan_agrees_with_its_steps_written_out(name):
    source = PROGRAMS[name]
    loop, written = build(source), build(source, 10**9)
    assert scans(loop.graph) and not scans(written.graph)
    longer = build(source.replace("max 100", "max 1000").replace("max 90", "max 900"))
    assert len(longer.graph.nodes) == len(loop.graph.nodes)
    of = next(iter(loop.outputs))
    rng = np.random.default_rng(3)
    for trial in range(4):  # points where the loops stop at different steps
        x = {n: np.abs(rng.normal(size=s)) * (1 + 2 * trial) + 0.3
             for n, s in loop.inputs.items()}
        tangents = {n: rng.normal(size=s) for n, s in loop.inputs.items()}
        for backend in ("numpy", "cpu"):
            close(loop.evaluate(x, backend=backend), written.evaluate(x, backend="numpy"))
            close(loop.grad(x, of=of, backend=backend), written.grad(x, of=of, backend="numpy"))
            close(loop.jvp(tangents, x, of=of, backend=backend),
                  written.jvp(tangents, x, of=of, backend="numpy"))
            close(loop.hessian(x, of=of, backend=backend),
                  written.hessian(x, of=of, backend="numpy"))


def test_newton_steps_and_its_derivative_by_the_implicit_function_theorem():
    """sqrt(c) by Newton: d/dc = 1 / (2 sqrt(c)), an oracle sharing no code with either."""
    prog = build(NEWTON)
    for c in (0.3, 2.0, 50.0):
        got = prog.evaluate({"c": c})
        assert got["converged"] == 1.0 and 3 <= got["steps"] <= 12
        assert abs(prog.grad({"c": c}, of="y")["c"] - 0.5 / np.sqrt(c)) < 1e-9


def test_a_static_counter_keeps_the_loop_written_out():
    """`k = 0` then `k = k + 1` under a static condition: after the first step (which
    always runs) `k` is the static number 1, which folds differently written out than as a
    state (as for `for` loops). Under a dynamic condition the first step's select makes it
    vary, and the loop is a scan."""
    source = "input x\ns = x\nk = 0\nwhile 1 > 0 max 100 {\n    k = k + 1\n" \
             "    s = s * 1.5\n    break if s > 50\n}\noutput y = s + k\n"
    assert not scans(build(source).graph)
    close(build(source).grad({"x": 0.7}), build(source, 10**9).grad({"x": 0.7}))
    dynamic = source.replace("1 > 0", "s < 40")
    assert scans(build(dynamic).graph)
    for x in (0.7, 45.0, 60.0):
        close(build(dynamic).evaluate({"x": x}), build(dynamic, 10**9).evaluate({"x": x}))
        close(build(dynamic).grad({"x": x}), build(dynamic, 10**9).grad({"x": x}))
