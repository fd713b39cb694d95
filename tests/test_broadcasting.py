"""Arrays as NumPy users expect them: broadcasting of elementwise operations and reductions
along an axis (`sum(A, axis=0)`), each against NumPy itself, values and gradients."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

import diffdsl

PAIRS = [((2, 3), (3,)), ((2, 3), (2, 1)), ((4, 1, 3), (2, 1)), ((3,), ()), ((1,), (5,)),
         ((2, 1, 4), (3, 1)), ((), ())]


def decl(name: str, shape: tuple) -> str:
    return f"input {name}[{', '.join(map(str, shape))}]" if shape else f"input {name}"


@pytest.mark.parametrize("a_shape,b_shape", PAIRS)
@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_elementwise_operations_broadcast_as_numpy(a_shape, b_shape, op):
    source = f"{decl('a', a_shape)}\n{decl('b', b_shape)}\noutput y = sin(a) {op} (b + 2)\n"
    prog = diffdsl.compile(source, cache=False)
    rng = np.random.default_rng(len(a_shape) * 7 + len(b_shape))
    a, b = rng.normal(size=a_shape), rng.normal(size=b_shape)
    expected = eval(f"np.sin(a) {op} (b + 2)")
    np.testing.assert_allclose(prog(a=a, b=b), expected, rtol=1e-15)


@pytest.mark.parametrize("a_shape,b_shape", PAIRS)
def test_gradients_through_broadcasting_sum_over_the_repeated_axes(a_shape, b_shape):
    source = (f"{decl('a', a_shape)}\n{decl('b', b_shape)}\n"
              "c = a * b + b ** 2\n"
              f"output y = {' + '.join(_element('c', k) for k in _indices(a_shape, b_shape))}\n")
    prog = diffdsl.compile(source, cache=False)
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=a_shape), rng.normal(size=b_shape)
    grads = prog.grad(a=a, b=b)
    shape = np.broadcast_shapes(a_shape, b_shape)
    ones = np.ones(shape)
    # d/da sum(a * b + b**2) = b broadcast, summed back to a's shape; d/db likewise.
    np.testing.assert_allclose(grads["a"], _unbroadcast(ones * b, a_shape), rtol=1e-14)
    np.testing.assert_allclose(grads["b"], _unbroadcast(ones * (a + 2 * b), b_shape),
                               rtol=1e-14)


def _indices(a_shape, b_shape):
    return list(itertools.product(*[range(d) for d in np.broadcast_shapes(a_shape, b_shape)]))


def _element(name, index):
    return f"{name}[{', '.join(map(str, index))}]" if index else name


def _unbroadcast(x, shape):
    """Sum `x` down to `shape`, as NumPy's broadcasting rules would have expanded it."""
    while x.ndim > len(shape):
        x = x.sum(axis=0)
    for axis, d in enumerate(shape):
        if d == 1:
            x = x.sum(axis=axis, keepdims=True)
    return x


@pytest.mark.parametrize("a_shape,b_shape,message", [
    ((2, 3), (2,), r"shapes \[2, 3\] and \[2\] do not broadcast"),
    ((3,), (2, 3, 2), r"shapes \[3\] and \[2, 3, 2\] do not broadcast"),
])
def test_shapes_that_do_not_broadcast_are_named_in_the_operands_order(a_shape, b_shape,
                                                                      message):
    with pytest.raises(diffdsl.ShapeError, match=message) as info:
        diffdsl.compile(f"{decl('a', a_shape)}\n{decl('b', b_shape)}\noutput y = a + b\n",
                        cache=False)
    assert info.value.span.line == 3


REDUCTIONS = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max, "mean": np.mean,
              "logsumexp": logsumexp}


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
       name=st.sampled_from(sorted(REDUCTIONS)), data=st.data())
def test_reductions_along_an_axis_are_numpys(shape, name, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    prog = diffdsl.compile(f"{decl('A', shape)}\noutput y = {name}(A, axis={axis})\n",
                           cache=False)
    A = np.random.default_rng(len(shape)).normal(size=shape)
    np.testing.assert_allclose(prog(A=A), REDUCTIONS[name](A, axis=axis), rtol=1e-14)


def test_a_sum_along_an_axis_has_the_gradient_of_its_elements():
    prog = diffdsl.compile("input A[3, 4]\ninput w[4]\n"
                           "output y = sum(logsumexp(A * w, axis=1) ** 2)\n", cache=False)
    rng = np.random.default_rng(0)
    A, w = rng.normal(size=(3, 4)), rng.normal(size=4)
    grads = prog.grad(A=A, w=w)
    for name, value in (("A", A), ("w", w)):
        direction = rng.normal(size=value.shape)
        h = 1e-6
        up = prog(**{"A": A, "w": w, name: value + h * direction})
        down = prog(**{"A": A, "w": w, name: value - h * direction})
        assert np.isclose(np.sum(grads[name] * direction), (up - down) / (2 * h), rtol=1e-7)


@pytest.mark.parametrize("source,message", [
    ("input A[2]\noutput y = sum(A, axis=1)", "axis 1 is out of range"),
    ("input A[2]\noutput y = sin(A, axis=0)", r"sin\(\) takes no keyword argument 'axis'"),
    ("input A[2]\noutput y = sum(A, ax=0)", "no keyword argument 'ax'"),
    ("input A[2]\ndef f(x) = x\noutput y = f(A, axis=0)", "no keyword argument 'axis'"),
    ("input A[2]\ninput k\noutput y = sum(A, axis=k)", "axis= is a static integer"),
    ("input A[2]\noutput y = sum(axis=0, A)", "after the positional"),
    ("input x\noutput y = sum(x, axis=0)", "needs an array"),
])
def test_keyword_mistakes_are_located_errors(source, message):
    with pytest.raises(diffdsl.DiffDSLError, match=message) as info:
        diffdsl.compile(source, cache=False)
    assert info.value.span is not None
