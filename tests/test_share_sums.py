"""A gradient's loop run forwards once (graph/share_sums.py): the pullback of a region of
sums adds up the region's own sums too, and the derivative reads the value from there, so
the forward loop is gone from the graph. Checked against the program's own evaluation (the
same sums, in the same order: equal to the bit) and the program written out; where the
pullback's seed depends on the value (`log` of a sum), nothing is shared."""

from __future__ import annotations

import numpy as np
import pytest
from draws import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kept_reductions import WRITTEN_OUT, build

from diffdsl.graph.loops import has_regions


def regions(graph) -> set:
    return {node.attr for node in graph.nodes if node.op == "region"}


KMEANS = """input P[300, 3]
input C[20, 3]
def dist2(p, c) = sum((p - c) ** 2)
output cost = sum(min([dist2(P[i], C[j]) for j in range(20)]) for i in range(300))
"""

CASES = {
    # (source, whether the forward loop is read from the pullback)
    "kmeans": (KMEANS, True),
    "mean": ("input x[200]\ninput w\noutput y = mean(sin(x[i] * w) for i in range(200))\n",
             True),
    "two sums": ("input x[200]\ninput w\n"
                 "output y = sum(x[i] * w for i in range(200)) + "
                 "sum(cos(x[i] - w) for i in range(200))\n", True),
    "log of a sum": ("input x[200]\ninput w\n"
                     "output y = log(sum(exp(x[i] * w) for i in range(200)))\n", False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_gradient_runs_its_loop_forwards_once(name):
    source, shared = CASES[name]
    prog, out = build(source), build(source, WRITTEN_OUT)
    assert has_regions(prog.graph) and not has_regions(out.graph)
    # the forward loops are gone from the gradient's graph where shared, there where not
    kept = regions(prog.graph) & regions(prog.derivative("grad"))
    assert (not kept) == shared, kept
    rng = np.random.default_rng(3)
    point = {k: rng.random(shape) for k, shape in prog.inputs.items()}
    want = out.value_and_grad(point, backend="numpy")
    for backend in ("numpy", "cpu"):
        value, grads = prog.value_and_grad(point, backend=backend)
        evaluated = next(iter(prog.evaluate(point, backend=backend).values()))
        assert value == evaluated  # the same sums in the same order
        assert value == pytest.approx(want[0], rel=1e-12)
        for k in grads:
            np.testing.assert_allclose(grads[k], want[1][k], rtol=1e-11, atol=1e-13)


def test_a_derivative_alone_does_not_run_the_loop_for_the_value():
    """`hessian` returns no value: its graph has no "value" output, nor the forward loop only
    the value needed (k-means' Newton step: the tangent of the pullback alone);
    `value_and(..., value=False)` gives None for it and the same derivative."""
    prog = build(KMEANS)
    full = prog.derivative("hessian_diagonal", wrt=["C"])
    alone = prog.derivative("hessian_diagonal", wrt=["C"], value=False)
    assert "value" in full.outputs and "value" not in alone.outputs
    assert regions(prog.graph) & regions(full) and not regions(prog.graph) & regions(alone)
    rng = np.random.default_rng(5)
    point = {"P": rng.random((300, 3)), "C": rng.random((20, 3))}
    for backend in ("numpy", "cpu"):
        value, diag = prog.value_and("hessian_diagonal", point, wrt=["C"], backend=backend)
        none, same = prog.value_and("hessian_diagonal", point, wrt=["C"], backend=backend,
                                    value=False)
        assert none is None and value == prog.evaluate(point, backend=backend)["cost"]
        np.testing.assert_array_equal(same["C"], diag["C"])
        np.testing.assert_array_equal(
            prog.hessian(point, wrt=["C"], diagonal=True, backend=backend)["C"], diag["C"])


@settings(max_examples=examples(10), deadline=None)
@given(reduce=st.sampled_from(["min", "max", "sum"]), inner=st.sampled_from(
    ["(p - c) ** 2", "abs(p - c)", "sin(p * c)", "sqrt((p - c) ** 2 + 0.5)"]),
    outer=st.sampled_from(["{}", "{} ** 2", "sin({})", "log(1 + {} ** 2)"]),
    k=st.integers(3, 6), n=st.integers(5, 9))
def test_nested_loops_derive_as_written_out(reduce, inner, outer, k, n):
    """A sum over points of a function of a min, max or sum over centroids: the gradient
    with its value (shared with the pullback where its seed allows), and the Hessian's
    diagonal alone (`hessian`, a gated pullback's tangent for min and max), on the CPU and
    the interpreter, against the program written out (loops kept from 3 iterations: the
    written-out Hessian of a min over many is large)."""
    item = f"sum([{inner.replace('p', 'P[i, t]').replace('c', 'C[j, t]')} for t in range(2)])"
    source = (f"input P[{n}, 2]\ninput C[{k}, 2]\n"
              f"output cost = sum({outer.format(f'{reduce}([{item} for j in range({k})])')}"
              f" for i in range({n}))\n")
    kept, out = build(source, 2), build(source, WRITTEN_OUT)
    assert has_regions(kept.graph)
    rng = np.random.default_rng(k * n)
    point = {"P": rng.normal(size=(n, 2)), "C": rng.normal(size=(k, 2))}
    want_value, want = out.value_and_grad(point, wrt=["C"], backend="numpy")
    want_diag = out.hessian(point, wrt=["C"], diagonal=True, backend="numpy")["C"]
    for backend in ("numpy", "cpu"):
        value, grads = kept.value_and_grad(point, wrt=["C"], backend=backend)
        assert value == pytest.approx(want_value, rel=1e-12)
        np.testing.assert_allclose(grads["C"], want["C"], rtol=1e-10, atol=1e-12)
        diag = kept.hessian(point, wrt=["C"], diagonal=True, backend=backend)["C"]
        np.testing.assert_allclose(diag, want_diag, rtol=1e-10, atol=1e-12)


REDUCTIONS = ["sum", "max", "min", "mean"]


@settings(max_examples=examples(20), deadline=None)
@given(first=st.sampled_from(REDUCTIONS), second=st.sampled_from(REDUCTIONS),
       body=st.sampled_from(["x[i]", "x[i] * x[i]", "exp(x[i] * w)", "sin(x[i]) * w"]),
       shape=st.sampled_from(["{a} * {b}", "{b} * {a}", "{a} * sum(x[i] * {b} for i in "
                              "range(N))", "{a} + {b} ** 2", "{b} * sum(x[i] * {a} for i in "
                              "range(N))"]),
       n=st.integers(2, 70), seed=st.integers(0, 2**16))
def test_reductions_of_one_body_are_told_apart(first, second, body, shape, n, seed):
    """Two reductions over the same iterations and the same body, told apart only by how
    they combine (a sum and a max of `x[i]`: the same body, the same streams): a gradient
    reads a loop's sums from its pullback only where that pullback adds them as the loop
    does. `max(v) * sum(v * sum(v))` read the max as the sum. Value and gradient, kept
    (from 2 iterations) and at the default limits, against the program written out."""
    terms = {k: f"{r}({body} for i in range(N))" for k, r in (("a", first), ("b", second))}
    source = (f"input x[{n}]\ninput w\noutput y = "
              + shape.format(**terms).replace("N", str(n)) + "\n")
    rng = np.random.default_rng(seed)
    point = {"x": rng.normal(size=n), "w": rng.uniform(-1, 1)}
    want_value, want = build(source, WRITTEN_OUT).value_and_grad(point, backend="numpy")
    for unroll in (1, None):
        prog = build(source, unroll)
        for backend in ("numpy", "cpu"):
            value, grads = prog.value_and_grad(point, backend=backend)
            assert value == pytest.approx(want_value, rel=1e-11, abs=1e-12), source
            for k in grads:
                np.testing.assert_allclose(grads[k], want[k], rtol=1e-9, atol=1e-11,
                                           err_msg=source)
            np.testing.assert_allclose(prog.grad(point, backend=backend)["x"], want["x"],
                                       rtol=1e-9, atol=1e-11, err_msg=source)
