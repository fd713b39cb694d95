"""Inputs read in place by loops nested in loops (`Region.in_place`): the outer loop hands the
input down whole, its body's port an `array` node, and the inner loop streams it as a
top-level loop streams an input. The graph does not grow with the data the inner loop reads,
a gradient keeps that input whole (its cotangents summed over the outer loop's iterations),
and every kind of derivative agrees with the program written out (`unroll` huge: every input
element by element, every loop unrolled), on the CPU and the reference interpreter, over
written and generated nests."""

from __future__ import annotations

import numpy as np
import pytest
from draws import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_wholes import build, close, point

import diffdsl
from diffdsl.graph import autodiff

UNROLLED = 10**9

KERNEL = """input X[{n}, 3]
input Y[{m}, 3]
output k = sum(sum(exp(-sum((X[i, t] - Y[j, t]) ** 2 for t in range(3))) for j in range({m}))
               for i in range({n}))
"""

KMEANS = """input P[80, 3]
input C[70, 3]
output cost = sum(min(sum((P[i, t] - C[j, t]) ** 2 for t in range(3)) for j in range(70))
                  for i in range(80))
"""


def regions_of(graph) -> list:
    """Every region of `graph` and of the bodies in it, outermost first."""
    found = []
    for node in graph.nodes:
        if node.op == "region":
            found.append(node.attr)
            found += regions_of(node.attr.body)
    return found


def listed(graph, name: str) -> bool:
    return any(node.op == "input" and node.attr[0] == name for node in graph.nodes)


def test_the_graph_does_not_grow_with_the_inner_loops_data():
    """A kernel sum over 100 points against 100 or 10,000: the same nodes, in the program's
    graph and in its gradient's, and neither lists an element of Y."""
    small, large = build(KERNEL.format(n=100, m=100)), build(KERNEL.format(n=100, m=10000))
    assert len(small.graph.nodes) == len(large.graph.nodes) == 4
    assert [len(r.body.nodes) for r in regions_of(small.graph)] == \
        [len(r.body.nodes) for r in regions_of(large.graph)]
    outer = regions_of(large.graph)[0]
    assert any(outer.in_place(j) for j in range(len(outer.streams)))
    for prog in (small, large):
        grad = autodiff.grad(prog.graph, "k")
        assert not listed(grad, "Y") and not listed(grad, "X")
        assert grad.outputs["d:Y"].whole is not None and grad.outputs["d:X"].whole is not None
    assert len(autodiff.grad(small.graph, "k").nodes) == len(autodiff.grad(large.graph,
                                                                          "k").nodes)


# Kept from 16 iterations here, not 64: the same nests, a fifteenth of the terms written out
# (the written-out k-means of 80 points and 70 centroids took 3 to 5 minutes of the suite).
SMALL = 16
KMEANS_SMALL = KMEANS.replace("80", "22").replace("70", "18")


@pytest.mark.parametrize("source", [KERNEL.format(n=22, m=18), KMEANS_SMALL])
def test_values_and_derivatives_agree_with_the_program_written_out(source):
    prog, written = build(source, SMALL), build(source, UNROLLED)
    assert any(node.op == "region" for node in prog.graph.nodes)
    assert any(r.in_place(j) for r in regions_of(prog.graph) for j in range(len(r.streams)))
    assert not any(p.whole for p in written.graph.inputs.values())
    x = point(prog, 1)
    x = {name: v * 0.5 for name, v in x.items()}
    tangents = {name: np.cos(np.arange(v.size)).reshape(v.shape) for name, v in x.items()}
    for backend in ("cpu", "numpy"):
        close(prog(x, backend=backend), written(x, backend="numpy"))
        close(prog.grad(x, backend=backend), written.grad(x, backend="numpy"))
        for name in x:  # the other input inactive: read in place, never listed
            close(prog.grad(x, wrt=[name], backend=backend),
                  written.grad(x, wrt=[name], backend="numpy"))
        close(prog.jvp(tangents, x, backend=backend), written.jvp(tangents, x, backend="numpy"))
        close(prog.hvp(tangents, x, backend=backend), written.hvp(tangents, x, backend="numpy"))
        close(prog.grad_and_hessian_diagonal(x, backend=backend)[1],
              written.grad_and_hessian_diagonal(x, backend="numpy")[1])


def test_a_kmeans_gradient_runs_its_loop_once_and_keeps_the_centroids_whole():
    """The centroids' cotangents are the pullback's sums, in a row: the loop over the points
    is the pullback alone (it adds up the cost beside them: share_sums), and d:C is whole
    on its values."""
    grad = autodiff.grad(build(KMEANS).graph, "cost")
    top = [node for node in grad.nodes if node.op == "region"]
    assert len(top) == 1 and not listed(grad, "C") and not listed(grad, "P")
    assert grad.outputs["d:C"].whole == (grad.nodes.index(top[0]), 0)


def test_an_element_read_alone_in_the_outer_body_adds_to_the_whole_gradient():
    source = """input P[80, 2]
input C[70, 2]
output s = sum(C[0, 1] * P[i, 0] + sum((P[i, t] - C[j, t]) ** 2 for j in range(70)
                                         for t in range(2)) for i in range(80))
"""
    prog, written = build(source), build(source, UNROLLED)
    x = point(prog, 2)
    for backend in ("cpu", "numpy"):
        close(prog.grad(x, backend=backend), written.grad(x, backend="numpy"))


def test_a_scan_whose_body_reads_an_input_by_an_inner_loop():
    """A `for` kept as a loop whose body sums over an input: a scan's pullback takes the
    input as captures (loops.as_captures), summed over the iterations backwards."""
    source = """input w[80]
input a
h = a
for s in range(70) {
    h = 0.5 * h + 0.01 * sum(sin(w[j] * h) for j in range(80))
}
output y = h
"""
    prog, written = build(source), build(source, UNROLLED)
    x = point(prog, 3)
    for backend in ("cpu", "numpy"):
        close(prog(x, backend=backend), written(x, backend="numpy"))
        close(prog.grad(x, backend=backend), written.grad(x, backend="numpy"))


def test_formulas_of_a_nested_loop_read_the_input_the_outer_loop_hands_down():
    prog = build("input X[70, 2]\ninput Y[70, 2]\n"
                 "output k = sum(sum(X[i, 0] * Y[j, 1] for j in range(70)) for i in range(70))")
    text = str(prog.to_sympy()["k"])
    assert "Y[" in text and "@s" not in text


@st.composite
def nests(draw):
    """Two or three loops deep, the innermost reading an input at the middle loop's index
    (so the outer loops hand it down whole), through a sum, min, max or logsumexp, with
    an element read alone or not."""
    k = draw(st.integers(65, 80))
    n = draw(st.integers(2, 5))
    reduce = draw(st.sampled_from(["sum", "min", "max", "logsumexp"]))
    f = draw(st.sampled_from(["({}) ** 2", "sin({})", "exp(0.3 * ({}))", "tanh({})"]))
    term = f.format("x[i] * W[j, 0] - W[j, 1]")
    inner = f"{reduce}({term} for j in range({k}))"
    if draw(st.booleans()):  # a loop in between: the input handed down twice
        inner = f"sum({inner.replace('x[i]', '(x[i] + v[c])')} for c in range(3))"
    if draw(st.booleans()):
        inner += " + W[3, 1] * x[i]"
    source = (f"input x[{n}]\ninput v[3]\ninput W[{k}, 2]\n"
              f"output s = sum({inner} for i in range({n}))\n")
    return source


@settings(max_examples=examples(6), deadline=None, suppress_health_check=list(HealthCheck))
@given(source=nests(), seed=st.integers(0, 2**16))
def test_generated_nests_agree_with_the_program_written_out(source, seed):
    with diffdsl.limits.using(unroll=1):  # the outer loops kept, however short
        prog = diffdsl.compile(source, cache=False)
    written = build(source, UNROLLED)
    x = {name: v * 0.5 for name, v in point(prog, seed).items()}
    for backend in ("cpu", "numpy"):
        close(prog(x, backend=backend), written(x, backend="numpy"))
        close(prog.grad(x, backend=backend), written.grad(x, backend="numpy"), 1e-9)
    grad = autodiff.grad(prog.graph, "s")  # W[3, 1], read alone, is its one element node
    assert grad.outputs["d:W"].whole is not None and \
        sum(node.op == "input" and node.attr[0] == "W" for node in grad.nodes) <= 1
