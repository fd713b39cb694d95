"""Loops that run several iterations at once (`backends/llvm_lanes.py`): the interleaved
graph against the graph it came from on the interpreter (the same values, up to the order in
which sums add), the kernel the engine compiles from it against the interpreter, which loops
are taken (those with a running power), and llsq's powers: one pow a loop, the other copies
products."""

from __future__ import annotations

import numpy as np
import pytest
from draws import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.backends import llvm_lanes, llvm_powers
from diffdsl.backends import numpy as numpy_backend

BODIES = {
    # a sum with a running power: llsq's inner loop
    "power": "sum(c[j] * a ** (j + {b}) for j in range({n}))",
    # a map over strided, offset windows of a stream (`w`, an output too), with a power
    "strided": "sum(w * w)",
    # sums and a map in one body
    "both": "sum(exp(c[j] - a) * a ** (j + {b}) for j in range({n})) "
            "+ sum([c[j] * a ** j for j in range({n})])",
    # loops in a loop: the inner ones are interleaved, the outer one is not
    "nested": "sum(sum(c[j] * (a * i / {n}) ** (j + {b}) for j in range({n})) * x[i] "
              "for i in range({n}))",
}


def source(kind: str, n: int, b: int) -> str:
    return (f"input c[{n}]\ninput x[{2 * n + 4}]\ninput a\n"
            f"w = [x[2 * j + {b}] * c[j] * a ** j for j in range({n})]\noutput m = w\n"
            f"output y = {BODIES[kind].format(n=n, b=b)}\n")


def build(text: str):
    with diffdsl.limits.using(unroll=2):
        return diffdsl.compile(text, cache=False)


def regions(graph):
    for node in graph.nodes:
        if node.op == "region":
            yield node.attr
            yield from regions(node.attr.body)


def point(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"c": rng.normal(size=n), "x": rng.normal(size=2 * n + 4), "a": rng.uniform(-1, 1)}


def close(got: dict, want: dict, rtol=1e-12):
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=1e-13)


@settings(max_examples=examples(20), deadline=None)
@given(kind=st.sampled_from(sorted(BODIES)), n=st.integers(3, 40), b=st.integers(0, 3),
       seed=st.integers(0, 2**16))
def test_an_interleaved_loop_computes_what_the_loop_computes(kind, n, b, seed):
    prog = build(source(kind, n, b))
    values = point(n, seed)
    for graph in (prog.graph, prog.derivative("grad", of="y")):
        inputs = {name: np.asarray(values[name], dtype=float).reshape(-1)
                  for name in graph.inputs}
        lanes = llvm_lanes.interleave(graph, "double")
        want = numpy_backend.evaluate(graph, inputs)
        close(numpy_backend.evaluate(lanes, inputs), want)
        taken = [r for r in regions(graph) if llvm_lanes.lanes(r, "double") > 1]
        assert not taken or lanes is not graph
        for region in taken:  # the first of 4 or 2 that divides the trip count, twice over
            k = llvm_lanes.lanes(region, "double")
            assert k == next(k for k in (4, 2) if region.n % k == 0 and region.n >= 2 * k)
    close(prog.evaluate(values, backend="cpu"), prog.evaluate(values, backend="numpy"))
    close(prog.grad(values, of="y", backend="cpu"), prog.grad(values, of="y", backend="numpy"),
          1e-11)


def test_llsq_runs_four_iterations_of_its_inner_loops_at_once():
    """GradBench's llsq: both inner loops (the residual's sum, the gradient's rows) take four
    lanes, each with one running power of step 4 and products for the other three."""
    n, m = 16, 128
    text = (f"input x[{m}]\ndef t(i) = -1 + i * 2 / ({n} - 1)\n"
            f"output cost = sum((sign(t(i)) - sum(x[j] * t(i) ** j for j in range({m}))) ** 2"
            f" for i in range({n})) / 2\n")
    prog = diffdsl.compile(text, cache=False)
    graph = prog.derivative("grad", of="cost")
    inner = [r for r in regions(llvm_lanes.interleave(graph, "double")) if r.n == m // 4]
    assert len(inner) == 2
    for region in inner:
        pows = [node for node in region.body.nodes if node.op == "pow"]
        assert len(pows) == 1
        assert list(llvm_powers.running_powers(region.body, "double").values()) == [4]
    x = np.random.default_rng(1).normal(size=m)
    close(prog.grad({"x": x}, backend="cpu"), prog.grad({"x": x}, backend="numpy"), 1e-11)


@pytest.mark.parametrize("text", [
    # a min or max: a winner
    "input x[40]\ninput a\noutput y = max(x[j] * a ** j for j in range(40))",
    # 7 iterations: neither 4 nor 2 divides them, and too few to run 4 at once and 3 apart
    "input x[7]\ninput a\noutput y = sum(x[j] * a ** j for j in range(7))",
    # a power of step 2: its copies would call pow each (llvm_powers runs it by products)
    "input x[40]\ninput a\noutput y = sum(x[j] * a ** (2 * j) for j in range(40))",
    # no running power: the loop vectoriser takes it
    "input x[40]\noutput y = sum(x[j] * x[j] for j in range(40))",
    # a body long enough to run side by side on its own
    "input x[40]\ninput a\noutput y = sum(a ** j * " + " * ".join(f"sin(x[j] + {k})"
                                                              for k in range(45))
    + " for j in range(40))",
    # a scan
    "input x[40]\ninput a\ns = 0\nfor j in range(40) {\n    s = s * 0.5 + x[j] * a ** j\n}\n"
    "output y = s",
])
def test_loops_left_as_they_are(text):
    graph = build(text).graph
    assert any(True for _ in regions(graph))
    assert all(llvm_lanes.lanes(r, "double") == 1 for r in regions(graph))
    assert llvm_lanes.interleave(graph, "double") is graph


@pytest.mark.parametrize("step", [2, 4, 8])
@pytest.mark.parametrize("a", [0.0, -0.0, -1.0, 0.999, -1.3, np.inf, -np.inf, np.nan, 1e-30])
def test_a_power_stepping_by_k_is_pow_at_every_edge(step, a):
    """`a ** (k*j + 1)`: a product by a ** k squared up from a, pow every FRESH / k
    iterations; within FRESH roundings of pow, equal at every edge."""
    n = 300
    prog = build(f"input a\noutput p = [a ** ({step} * j + 1) for j in range({n})]\n")
    bodies = [r.body for r in regions(prog.graph)]
    assert [list(llvm_powers.running_powers(b, "double").values()) for b in bodies] == [[step]]
    got = prog.evaluate({"a": a}, backend="cpu")["p"]
    with np.errstate(all="ignore"):
        want = np.power(a, step * np.arange(n) + 1.0)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.signbit(got), np.signbit(want))
    agree(got, want)


@pytest.mark.parametrize("shift", [-1, -2, -3, -5])
@pytest.mark.parametrize("a", [0.0, -0.0, -1.0, 0.999, -1.3, np.inf, -np.inf, np.nan, 1e-30])
def test_a_power_shifted_below_zero_beside_a_running_power(shift, a):
    """`a ** (j - c)` in a body with `a ** j`: the copies whose exponent is never below 0
    take the running power of the first of them times a, a*a; the others (and every copy
    where c is 4 or more) call pow. pow's value at every edge: inf at 0 ** -1, NaN, signs."""
    n = 200
    prog = build(f"input a\noutput p = [[a ** j, a ** (j - {-shift})] for j in range({n})]\n")
    region = next(regions(prog.graph))
    lanes = next(regions(llvm_lanes.interleave(prog.graph, "double")))
    assert llvm_lanes.lanes(region, "double") == 4
    calls = sum(node.op == "pow" for node in lanes.body.nodes)
    assert calls == 1 + min(-shift, 4) if -shift < 4 else calls == 5
    got = prog.evaluate({"a": a}, backend="cpu")["p"].reshape(n, 2)
    with np.errstate(all="ignore"):
        want = np.power(a, np.stack([np.arange(n), np.arange(n) + shift], axis=1).astype(float))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.signbit(got), np.signbit(want))
    agree(got, want)


def agree(got, want):
    """pow's specials (NaN, infinities, zeros of either sign) exactly, normal values within
    FRESH roundings, subnormal ones within FRESH steps of 2 ** -1074."""
    assert np.array_equal(np.isnan(got), np.isnan(want))
    number = ~np.isnan(want)  # a NaN's sign bit is not pow's to keep
    assert np.array_equal(np.signbit(got[number]), np.signbit(want[number]))
    special = np.isinf(want) | (want == 0)
    np.testing.assert_array_equal(got[special], want[special])
    normal = np.isfinite(want) & (np.abs(want) >= np.finfo(float).tiny)
    np.testing.assert_allclose(got[normal], want[normal], rtol=llvm_powers.FRESH * 2.0**-53)
    tiny = np.isfinite(want) & ~normal & ~special
    np.testing.assert_allclose(got[tiny], want[tiny], rtol=0, atol=llvm_powers.FRESH * 2.0**-1074)


@pytest.mark.parametrize("n", [9, 11, 13, 63, 65, 301])
def test_a_trip_count_four_does_not_divide_runs_its_last_iterations_apart(n):
    """sum(c[j] * a ** j) and a map read at two of its values, over n iterations: the first
    4 * (n // 4) four at a time, the last n % 4 in a loop of their own (each value read from
    the loop that computes it), the values those of the interpreter, the gradient's too."""
    prog = build(f"input c[{n}]\ninput a\noutput y = sum(c[j] * a ** j for j in range({n}))\n"
                 f"q = [a ** j * c[j] for j in range({n})]\noutput p = q[1] - q[{n - 1}]\n")
    # (the gradient by c is a port on a run of its loop's values: that loop stays whole)
    for graph in (prog.graph, prog.derivative("grad", of="y", wrt=["a"])):
        lanes = llvm_lanes.interleave(graph, "double")
        trips = sorted(r.n for r in regions(lanes))
        assert n // 4 in trips and n % 4 in trips
        values = {"c": np.random.default_rng(n).normal(size=n), "a": 0.97}
        inputs = {name: np.asarray(values[name], float).reshape(-1) for name in graph.inputs}
        close(numpy_backend.evaluate(lanes, inputs), numpy_backend.evaluate(graph, inputs))
    values = {"c": np.linspace(-1, 1, n), "a": -0.97}
    close(prog.evaluate(values, backend="cpu"), prog.evaluate(values, backend="numpy"))
    close(prog.grad(values, of="y", backend="cpu"), prog.grad(values, of="y", backend="numpy"))


def test_a_power_of_a_constant_zero_is_left_to_pow():
    """A body whose running power's base is the constant -0.0 (built by hand: the front end
    writes such a loop out): a copy's product by -0.0 would be folded to +0.0 by the
    builder's x * 0 = 0, so the loop is left as it is, and -0.0 ** j keeps its signs."""
    from diffdsl.graph.ir import Graph, Node
    from diffdsl.graph.region import Region
    prog = build("input x[40]\noutput p = [x[j] * 2.0 ** j for j in range(40)]\n")
    at, node = next((i, n) for i, n in enumerate(prog.graph.nodes) if n.op == "region")
    body = node.attr.body
    nodes = tuple(Node("const", (), -0.0) if n.op == "const" and n.attr == 2.0 else n
                  for n in body.nodes)
    region = node.attr.with_body(Graph(nodes, body.inputs, body.outputs))
    assert isinstance(region, Region) and llvm_lanes.lanes(region, "double") == 1
    graph = Graph(tuple(Node("region", node.args, region) if i == at else n
                        for i, n in enumerate(prog.graph.nodes)), prog.graph.inputs,
                  prog.graph.outputs)
    assert llvm_lanes.interleave(graph, "double") is graph
    got = numpy_backend.evaluate(graph, {"x": np.ones(40)})["p"]
    assert np.array_equal(np.signbit(got), np.arange(40) % 2 == 1)
