"""Sums a loop's body adds where they lie (`llvm_loops.accumulates`) and rows a loop writes
straight to where they go (`llvm._Layout.write_in_place`): a pullback's cotangents of the
values a loop captures are added by its body, an inner loop's rows of them (the winning
centroid's alone) where the outer body's sums lie. Each against the interpreter and the
program written out (`unroll` past every loop)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from draws import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kept_reductions import WRITTEN_OUT, build

from diffdsl.backends import llvm, llvm_loops


def kmeans(k: int, d: int = 3, n: int = 200, fn: str = "min", more: str = "a * ") -> str:
    """k-means' cost (`fn` min); `more` the factor of a second loop over the centroids in
    each point's term, None for none."""
    term = "" if more is None else f" + {more}sum(C[j, 0] * P[i, 0] for j in range({k}))"
    return (f"input P[{n}, {d}]\ninput C[{k}, {d}]\ninput a\n"
            f"output cost = sum({fn}([sum((P[i] - C[j]) ** 2) for j in range({k})]){term} "
            f"for i in range({n}))\n")


def functions(text: str) -> dict[str, str]:
    """The LLVM module's functions by name, each its text."""
    found, name = {}, None
    for line in text.splitlines():
        m = re.match(r"define .*@([\w.]+)\(", line)
        if m:
            name = m.group(1)
            found[name] = ""
        elif name is not None:
            found[name] += line + "\n"
    return found


def test_the_winning_centroids_cotangents_are_added_in_place():
    """Per point, the gradient's loop body runs the distances, then the winner's row, added
    to the centroids' cotangents where they lie: no pass over the k · d of them per point
    (before: a memset of the inner loop's rows, a copy into the body's sums, the loop's
    add)."""
    prog = build(kmeans(100, more=None).replace("input a\n", ""))
    graph = prog.derivative("grad", wrt=["C"])
    (outer,) = [i for i, node in enumerate(graph.nodes) if node.op == "region"]
    text, _ = llvm.emit(graph, "float64", 0)
    body = {name: f for name, f in functions(text).items() if name.startswith(f"b{outer}.")}
    assert body and not any("llvm.mem" in f for f in body.values())
    outer_loop = "".join(f for name, f in functions(text).items() if name.startswith("seg"))
    assert f"@b{outer}.run" in outer_loop and ".a0 = " not in outer_loop  # no add in latch


@settings(max_examples=examples(5), deadline=None)
@given(k=st.integers(9, 24), d=st.integers(1, 5), fn=st.sampled_from(["min", "max", "sum"]),
       more=st.sampled_from([None, "a * "]), seed=st.integers(0, 2**16))
def test_sums_added_in_place_match_the_program_written_out(k, d, fn, more, seed):
    """Cotangents of captured centroids, from an inner loop gated to its winner (min, max:
    added in place) or from every iteration (sum: stored, then added by the loop), and from
    a second inner loop or not: the CPU's gradient is the interpreter's and the written-out
    program's."""
    source = kmeans(k, d, 66, fn, more)
    kept = build(source)
    (outer,) = [node.attr for node in kept.derivative("grad").nodes if node.op == "region"]
    if more is None and fn != "sum":  # the rows of a gated inner loop: added in place
        assert llvm_loops.accumulates(outer)
    rng = np.random.default_rng(seed)
    point = {"P": rng.normal(size=(66, d)), "C": rng.normal(size=(k, d)), "a": 0.7}
    want = build(source, WRITTEN_OUT).grad(point, backend="numpy")
    for backend in ("cpu", "numpy"):
        got = kept.grad(point, backend=backend)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12)


def test_a_loops_values_in_two_ports_and_read_by_a_node():
    """Rows written straight to an output port only where that port alone holds them: the
    same loop's values in two outputs, and two of them read by a node, are copied from the
    loop's scratch."""
    source = ("input x[100]\ny = [sin(x[i]) * i for i in range(100)]\n"
              "output a = y\noutput b = y\noutput c = y[3] + y[5]\n"
              "z = [cos(x[i]) for i in range(100)]\noutput d = z\n")
    prog = build(source)
    point = {"x": np.linspace(-2, 2, 100)}
    got, want = prog.evaluate(point, backend="cpu"), prog.evaluate(point, backend="numpy")
    for name in want:  # up to the last bit of sin and cos, vector or not
        np.testing.assert_allclose(got[name], want[name], rtol=1e-14)
    np.testing.assert_array_equal(got["a"], got["b"])
    np.testing.assert_allclose(got["a"], np.sin(point["x"]) * np.arange(100), rtol=1e-14)


@pytest.mark.parametrize("k", [9, 40])
def test_a_sum_of_an_inner_loops_rows_at_a_batch_of_points(k):
    """Rows of points: each row's accumulators start again at zero."""
    prog = build(kmeans(k, 2, 70))
    rng = np.random.default_rng(k)
    batch = {"P": rng.normal(size=(3, 70, 2)), "C": rng.normal(size=(3, k, 2)),
             "a": np.array([0.1, 0.2, 0.3])}
    got = prog.grad(batch, backend="cpu")
    for r in range(3):
        one = {name: v[r] for name, v in batch.items()}
        want = prog.grad(one, backend="numpy")
        for name in want:
            np.testing.assert_allclose(got[name][r], want[name], rtol=1e-12, atol=1e-12)


def test_rows_an_inner_loop_writes_in_every_iteration_are_stored_then_added():
    """An inner loop kept as a loop (70 centroids, every one's cotangent written in every
    iteration, not gated): its rows are stored and the outer loop adds them, vectorised."""
    source = kmeans(70, 2, 66, "sum", None)
    prog = build(source)
    (outer,) = [node.attr for node in prog.derivative("grad").nodes if node.op == "region"]
    assert any(node.op == "region" for node in outer.body.nodes)
    assert not llvm_loops.accumulates(outer)
    rng = np.random.default_rng(9)
    point = {"P": rng.normal(size=(66, 2)), "C": rng.normal(size=(70, 2)), "a": 0.0}
    got, want = prog.grad(point, backend="cpu"), prog.grad(point, backend="numpy")
    np.testing.assert_allclose(got["C"], want["C"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(want["C"], -2 * (point["P"].sum(0) - 66 * point["C"]),
                               rtol=1e-12, atol=1e-12)
