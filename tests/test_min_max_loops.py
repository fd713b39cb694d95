"""A min or max kept as a loop folds its values as the program written out folds them, bit
for bit, whatever they are: NaN, infinities, -0.0 beside 0.0, ties, the extreme first or
last. The loop starts from inf (min) or -inf (max) with iteration 0 as its winner and keeps
the running value by a branch (llvm_loops.loop), where the written-out fold takes the first
value and then selects; Hypothesis draws the values from a pool of those edges, and the
value, the winner the gradient is routed to, and the float32 kernel must agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.graph.loops import has_regions

N = 80  # past the `unroll` limit (64): a loop
EDGES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, 1e308, -1e308, 5e-324]


def build(kind: str, form: str, unroll: int | None = None, dtype: str = "float64"):
    """The loop as machine code, or (`unroll`) the program written out, interpreted."""
    body = {"builtin": f"{kind}(x)",
            "generator": f"{kind}(x[i] * c for i in range(n))"}[form]
    source = f"const n = {N}\ninput x[n]\ninput c\noutput f = {body}\n"
    if unroll is None:
        return diffdsl.compile(source, cache=False, dtype=dtype, backend="cpu")
    with diffdsl.limits.using(unroll=unroll):
        return diffdsl.compile(source, cache=False, dtype=dtype, backend="numpy")


PROGRAMS = {(kind, form): (build(kind, form), build(kind, form, unroll=10**9))
            for kind in ("min", "max") for form in ("builtin", "generator")}


def same_bits(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.all(
        (np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))))


def test_the_programs_are_loops_and_written_out():
    for loop, written in PROGRAMS.values():
        assert has_regions(loop.graph) and not has_regions(written.graph)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(range(len(EDGES))), min_size=N, max_size=N),
       st.sampled_from(sorted(PROGRAMS)))
def test_a_loop_folds_edges_as_written_out(picks, which):
    x = np.array([EDGES[k] for k in picks])
    loop, written = PROGRAMS[which]
    values = {"x": x, "c": 1.0}
    assert same_bits(loop.evaluate(values)["f"], written.evaluate(values)["f"])
    got, want = loop.grad(values), written.grad(values)
    for name in ("x", "c"):
        assert same_bits(got[name], want[name]), (which, name, x)


@pytest.mark.parametrize("kind", ["min", "max"])
def test_ties_go_to_the_first_and_signed_zeros_keep_theirs(kind):
    loop, written = PROGRAMS[(kind, "builtin")]
    for first, later in ((0.0, -0.0), (-0.0, 0.0), (3.0, 3.0)):
        x = np.full(N, later)
        x[5] = first
        x[:5] = np.inf if kind == "min" else -np.inf
        values = {"x": x, "c": 1.0}
        value = loop.evaluate(values)["f"]
        assert same_bits(value, first) and same_bits(value, written.evaluate(values)["f"])
        grad = loop.grad(values)["x"]
        assert grad[5] == 1.0 and np.count_nonzero(grad) == 1


@pytest.mark.parametrize("kind", ["min", "max"])
def test_float32_kernels_fold_the_same(kind):
    loop = build(kind, "builtin", dtype="float32")
    written = build(kind, "builtin", unroll=10**9, dtype="float32")
    rng = np.random.default_rng(3)
    x = rng.choice(np.array(EDGES[:7] + [0.5, -0.5]), size=N)
    values = {"x": x, "c": 1.0}
    assert same_bits(loop.evaluate(values)["f"], written.evaluate(values)["f"])
    assert same_bits(loop.grad(values)["x"], written.grad(values)["x"])
