"""A min or max kept as a loop folds its values as the program written out folds them, bit
for bit, whatever they are: NaN, infinities, -0.0 beside 0.0, ties, the extreme first or
last. The loop starts from inf (min) or -inf (max) with iteration 0 as its winner and keeps
the running value by a branch past `llvm_loops.BRANCH_FROM` iterations and by selects below
(each form is tested here, on the same programs), where the written-out fold takes the first
value and then selects; Hypothesis draws the values from a pool of those edges, and the
value, the winner the gradient is routed to, and the float32 kernel must agree. The loops run
as machine code (backend "cpu"); the programs written out on the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.backends import llvm_loops
from diffdsl.graph.loops import has_regions

N = 80  # past the `unroll` limit (64): a loop
EDGES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, 1e308, -1e308, 5e-324]


FORMS = {"branch": 0, "selects": 10**18}  # BRANCH_FROM for each way of keeping the value


def build(kind: str, form: str, unroll: int | None = None, dtype: str = "float64",
          keep: str = "branch"):
    """The loop as machine code, its min or max kept as `keep` says (its kernels built here,
    under that setting), or (`unroll`) the program written out, interpreted."""
    body = {"builtin": f"{kind}(x)",
            "generator": f"{kind}(x[i] * c for i in range(n))"}[form]
    source = f"const n = {N}\ninput x[n]\ninput c\noutput f = {body}\n"
    if unroll is None:
        default, llvm_loops.BRANCH_FROM = llvm_loops.BRANCH_FROM, FORMS[keep]
        try:
            prog = diffdsl.compile(source, cache=False, dtype=dtype, backend="cpu")
            prog.evaluate({"x": np.zeros(N), "c": 1.0})
            prog.grad({"x": np.zeros(N), "c": 1.0})
        finally:
            llvm_loops.BRANCH_FROM = default
        return prog
    with diffdsl.limits.using(unroll=unroll):
        return diffdsl.compile(source, cache=False, dtype=dtype, backend="numpy")


PROGRAMS = {(kind, form, keep): (build(kind, form, keep=keep), build(kind, form, unroll=10**9))
            for kind in ("min", "max") for form in ("builtin", "generator") for keep in FORMS}


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
    # The gradient's zeros may differ in sign (the loop's pullback runs the winner alone,
    # the program written out adds the other items' zeros to it): equal as numbers.
    got, want = loop.grad(values), written.grad(values)
    for name in ("x", "c"):
        assert np.array_equal(got[name], want[name], equal_nan=True), (which, name, x)


@pytest.mark.parametrize("keep", sorted(FORMS))
@pytest.mark.parametrize("kind", ["min", "max"])
def test_ties_go_to_the_first_and_signed_zeros_keep_theirs(kind, keep):
    loop, written = PROGRAMS[(kind, "builtin", keep)]
    for first, later in ((0.0, -0.0), (-0.0, 0.0), (3.0, 3.0)):
        x = np.full(N, later)
        x[5] = first
        x[:5] = np.inf if kind == "min" else -np.inf
        values = {"x": x, "c": 1.0}
        value = loop.evaluate(values)["f"]
        assert same_bits(value, first) and same_bits(value, written.evaluate(values)["f"])
        grad = loop.grad(values)["x"]
        assert grad[5] == 1.0 and np.count_nonzero(grad) == 1


@pytest.mark.parametrize("keep", sorted(FORMS))
@pytest.mark.parametrize("kind", ["min", "max"])
def test_float32_kernels_fold_the_same(kind, keep):
    loop = build(kind, "builtin", dtype="float32", keep=keep)
    written = build(kind, "builtin", unroll=10**9, dtype="float32")
    rng = np.random.default_rng(3)
    x = rng.choice(np.array(EDGES[:7] + [0.5, -0.5]), size=N)
    values = {"x": x, "c": 1.0}
    assert same_bits(loop.evaluate(values)["f"], written.evaluate(values)["f"])
    assert np.array_equal(loop.grad(values)["x"], written.grad(values)["x"], equal_nan=True)


INTERPRETED = {kind: diffdsl.compile(f"const n = {N}\ninput x[n]\ninput c\noutput f = "
                                     f"{kind}(x[i] * c for i in range(n))\n", cache=False,
                                     backend="numpy") for kind in ("min", "max")}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(range(len(EDGES))), min_size=3 * N, max_size=3 * N),
       st.sampled_from(["min", "max"]))
def test_the_interpreters_loop_folds_edges_as_written_out(picks, kind):
    """The reference interpreter runs a loop's fold over all iterations at once (not the
    left fold, step by step): its value and winner, in each of 3 rows, are the fold's."""
    x = np.array([EDGES[k] for k in picks]).reshape(3, N)
    loop, (_, written) = INTERPRETED[kind], PROGRAMS[(kind, "generator", "branch")]
    assert has_regions(loop.graph)
    values = {"x": x, "c": 1.0}
    assert same_bits(loop.evaluate(values)["f"], written.evaluate(values)["f"])
    got, want = loop.grad(values), written.grad(values)
    for name in ("x", "c"):
        assert np.array_equal(got[name], want[name], equal_nan=True), (kind, name, x)
