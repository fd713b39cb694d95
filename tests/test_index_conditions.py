"""A loop index compared with a static value inside a loop kept as a loop: where the answer
is the same in every iteration the loop stays a loop (the condition is static), where it
changes the loop is written out, as before; either way the values and derivatives are those
of the program written out (`unroll` past every loop)."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from draws import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kept_reductions import WRITTEN_OUT, build

from diffdsl.graph.loops import has_regions

TESTS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
         "==": operator.eq, "!=": operator.ne}


def same_as_written_out(source: str, x: np.ndarray):
    kept, out = build(source), build(source, WRITTEN_OUT)
    assert not has_regions(out.graph)
    for backend in ("numpy", "cpu"):
        got = kept.evaluate({"x": x}, backend=backend)
        want = out.evaluate({"x": x}, backend=backend)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-13, atol=1e-300)
        grad = kept.grad({"x": x}, backend=backend)["x"]
        np.testing.assert_allclose(grad, out.grad({"x": x}, backend=backend)["x"],
                                   rtol=1e-13, atol=1e-300)
    return kept


@settings(max_examples=examples(20), deadline=None)
@given(op=st.sampled_from(sorted(TESTS)), start=st.integers(0, 5), length=st.integers(65, 80),
       c=st.integers(-3, 90), half=st.booleans(), flip=st.booleans(), k=st.sampled_from([1, 2]))
def test_a_condition_on_the_index_keeps_the_loop_where_it_is_static(op, start, length, c,
                                                                    half, flip, k):
    stop = start + length
    bound = f"{c}.5" if half else str(c)
    test = f"{bound} {op} {k} * i" if flip else f"{k} * i {op} {bound}"
    source = (f"input x[{2 * stop}]\n"
              f"output y = sum(if {test} then x[{k} * i] * 3 else sin(x[{k} * i])"
              f" for i in range({start}, {stop}))\n")
    x = np.random.default_rng(length).normal(size=2 * stop)
    kept = same_as_written_out(source, x)
    value = c + 0.5 if half else c
    answers = {(TESTS[op](value, k * i) if flip else TESTS[op](k * i, value))
               for i in range(start, stop)}
    assert has_regions(kept.graph) == (len(answers) == 1), answers


@pytest.mark.parametrize("last", [False, True])
def test_a_scan_testing_its_first_or_last_step_stays_a_loop(last):
    # A `for` kept as a loop writes its first and last iterations out: its body, from the
    # second to the one before the last, has `t == 0` (or `t == 99`) false throughout.
    step = 99 if last else 0
    source = ("input x[100]\ny = 1.0\nfor t in range(100) {\n"
              f"  y = if t == {step} then y * x[t] else sin(y) + x[t]\n}}\noutput z = y\n")
    kept = same_as_written_out(source, np.linspace(0.1, 1.0, 100))
    assert has_regions(kept.graph)


def test_two_indices_compared_write_the_loop_out():
    source = ("input x[70, 70]\n"
              "output y = sum(sum(if i == j then x[i, j] else 0 for j in range(70))"
              " for i in range(70))\n")
    kept = build(source)
    x = np.random.default_rng(0).normal(size=(70, 70))
    assert kept.evaluate({"x": x})["y"] == pytest.approx(np.trace(x), rel=1e-13)
    np.testing.assert_array_equal(kept.grad({"x": x})["x"], np.eye(70))
