"""`prod` of a long generator kept as a loop (language/lower/scans.py, `region_product`): a
scan carrying the product from 1, the same numbers as the terms multiplied written out, and
a gradient through the running products that is right where terms are 0. Checked against
the product written out (the reference semantics), and the gradient against the product of
the other terms computed by NumPy, an oracle that shares no code with either."""

from __future__ import annotations

import numpy as np
import pytest
from draws import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl import limits

PROGRAMS = {
    "terms": "input x[1000]\noutput y = prod(x[i] * 0.01 + 1 for i in range(1000))\n",
    "nested": "input x[200]\ninput a\n"
              "output y = sum(prod(1 + 0.001 * a * x[j] * i for j in range(100)) "
              "for i in range(80))\n",
    "index": "input x\noutput y = prod(x + i * 0.01 for i in range(100))\n",
}


def build(source: str, unroll: int = 64):
    with limits.using(unroll=unroll):
        return diffdsl.compile(source, cache=False)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_long_product_is_a_loop_and_agrees_with_its_terms_written_out(name):
    loop, written = build(PROGRAMS[name]), build(PROGRAMS[name], 10**9)
    assert any(node.op == "region" for node in loop.graph.nodes)
    assert len(loop.graph.nodes) * 10 < len(written.graph.nodes)
    rng = np.random.default_rng(0)
    x = {k: rng.normal(size=s) for k, s in loop.inputs.items()}
    for backend in ("numpy", "cpu"):
        assert loop.evaluate(x, backend=backend)["y"] == written.evaluate(x, backend=backend)["y"]
        got, want = loop.grad(x, backend=backend), written.grad(x, backend=backend)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-14)


def test_a_static_product_stays_static():
    """A product of static terms folds when the file is compiled, as a `const` needs."""
    prog = build("const c = prod(1.01 for i in range(100))\ninput x\noutput y = x * c\n")
    assert not any(node.op == "region" for node in prog.graph.nodes)
    assert prog.evaluate({"x": 1.0})["y"] == pytest.approx(1.01 ** 100, rel=1e-13)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=list(HealthCheck))
@given(zeros=st.lists(st.integers(0, 99), max_size=3), seed=st.integers(0, 2**16))
def test_the_gradient_is_the_product_of_the_other_terms_where_terms_are_zero(zeros, seed):
    prog = build("input x[100]\noutput y = prod(x[i] for i in range(100))\n")
    x = np.random.default_rng(seed).uniform(0.5, 1.5, size=100)
    x[zeros] = 0.0
    want = np.array([np.prod(np.delete(x, i)) for i in range(100)])
    for backend in ("numpy", "cpu"):
        got = prog.grad({"x": x}, backend=backend)["x"]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        assert prog.evaluate({"x": x}, backend=backend)["y"] == pytest.approx(np.prod(x),
                                                                             rel=1e-12)
