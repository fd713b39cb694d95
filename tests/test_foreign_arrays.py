"""Arrays of other libraries wherever inputs go (issue 23, item 4).

What NumPy reads is an input: objects with `__array__` or `__array_interface__`, the buffer
protocol (`array.array`, `memoryview`), `__dlpack__`; PyTorch CPU tensors and JAX arrays when
they are installed. Each gives the answers its NumPy twin gives, in `prog(...)`, `grad`,
batches, tangents, seeds and `objective`, and is read in place where its layout allows. What
cannot be read on the host is a clear `InputError`, with the article its type name takes.
"""

from __future__ import annotations

import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.errors import InputError
from diffdsl.runtime.inputs import a_or_an, host_array, prepare_inputs

SOURCE = "input x[3]\ninput s\noutput y = s * (x[0] * x[1] + sin(x[2]))\n"
X = np.array([0.5, -1.25, 2.0])


class WithArray:
    """An array library that NumPy reads through `__array__` (pandas, xarray, ...)."""

    def __init__(self, data):
        self.data = data

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype)


class WithInterface:
    """One that publishes its memory through `__array_interface__` (no copy to make)."""

    def __init__(self, data):
        self.data = data
        self.__array_interface__ = data.__array_interface__


class WithDLPack:
    """One that speaks DLPack only (as an array of a library NumPy does not know would)."""

    def __init__(self, data, device=None):
        self.data = data
        self.device = device

    def __dlpack__(self, **kwargs):
        if self.device is not None:  # as a GPU library does when asked for host memory
            raise BufferError(f"cannot export to the CPU from device {self.device}")
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device or self.data.__dlpack_device__()


WRAPPERS = {
    "__array__": WithArray,
    "__array_interface__": WithInterface,
    "__dlpack__": WithDLPack,
    "memoryview": memoryview,
    "array.array": lambda a: array.array({"d": "d", "f": "f", "i": "i", "l": "q"}.get(
        a.dtype.char, a.dtype.char), a.ravel().tolist()) if a.ndim <= 1 else memoryview(a),
}


@pytest.fixture(scope="module")
def prog():
    return diffdsl.compile(SOURCE, backend="cpu", cache=False)


@pytest.mark.parametrize("kind", list(WRAPPERS))
def test_every_call_takes_arrays_of_other_libraries(prog, kind):
    wrap = WRAPPERS[kind]
    want = prog.grad(x=X, s=2.0)
    assert prog(x=wrap(X.copy()), s=2.0) == prog(x=X, s=2.0)
    got = prog.grad(x=wrap(X.copy()), s=wrap(np.array(2.0)) if kind != "array.array" else 2.0)
    assert np.array_equal(got["x"], want["x"]) and got["s"] == want["s"]
    assert np.array_equal(prog.grad({"x": wrap(X.copy())}, s=2.0)["x"], want["x"])
    # batches, tangents, seeds
    rows = np.stack([X, X * 2, X - 1])
    batch = prog.grad(x=wrap(rows.copy()) if kind != "array.array" else memoryview(rows),
                      s=2.0)["x"]
    assert np.array_equal(batch, prog.grad(x=rows, s=2.0)["x"])
    assert prog.jvp({"x": wrap(np.ones(3))}, x=X, s=2.0) == prog.jvp({"x": np.ones(3)}, x=X,
                                                                      s=2.0)
    assert np.array_equal(prog.vjp(wrap(np.array(3.0)) if kind != "array.array" else 3.0,
                                   x=wrap(X.copy()), s=2.0)["x"], 3 * want["x"])
    hvp = prog.hvp({"x": wrap(np.ones(3))}, x=wrap(X.copy()), s=2.0)["x"]
    assert np.array_equal(hvp, prog.hvp({"x": np.ones(3)}, x=X, s=2.0)["x"])
    o = prog.objective(wrt="x", x=wrap(X.copy()), s=wrap(np.array(2.0))
                       if kind != "array.array" else 2.0)
    assert np.array_equal(o.x0, X) and o.fun(o.x0) == prog(x=X, s=2.0)


@pytest.mark.parametrize("kind", list(WRAPPERS))
def test_arrays_are_read_in_place(kind):
    """A float64 array in C order is a view of the memory given, never a copy."""
    prog = diffdsl.compile(SOURCE, cache=False)
    data = np.array([1.0, 2.0, 3.0]) if kind != "array.array" else None
    value = WRAPPERS[kind](data) if data is not None else array.array("d", [1.0, 2.0, 3.0])
    _, arrays = prepare_inputs(prog.graph, {"x": host_array(value), "s": 1.0})
    memory = data if data is not None else np.frombuffer(value)
    assert np.shares_memory(arrays["x"], memory)


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(list(WRAPPERS)), rows=st.sampled_from([None, 1, 4]),
       dtype=st.sampled_from(["float64", "float32", "int32", "int64"]),
       seed=st.integers(0, 2**16))
def test_any_wrapper_any_dtype_gives_the_numpy_twins_answers(kind, rows, dtype, seed):
    prog = _prog()
    rng = np.random.default_rng(seed)
    data = (rng.uniform(-3, 3, (3,) if rows is None else (rows, 3)) * 4).astype(dtype)
    value = WRAPPERS[kind](data.copy()) if kind != "array.array" or rows is None else \
        memoryview(data.copy())
    np.testing.assert_array_equal(prog(x=value, s=1.5), prog(x=data, s=1.5))
    got, want = prog.grad(x=value, s=1.5), prog.grad(x=data, s=1.5)
    assert all(np.array_equal(got[k], want[k]) for k in want)


_progs: list = []


def _prog():
    if not _progs:
        _progs.append(diffdsl.compile(SOURCE, backend="cpu", cache=False))
    return _progs[0]


def test_dask_batches_take_other_arrays_beside_them(prog):
    da = pytest.importorskip("dask.array")
    rows = np.stack([X + k for k in range(6)])
    got = prog.grad(x=da.from_array(rows, chunks=2), s=memoryview(np.array(2.0)))["x"]
    assert np.array_equal(got.compute(), prog.grad(x=rows, s=2.0)["x"])


class ArrayImpl:
    """Not an array NumPy can read: the message names it with the right article."""


class Tensor(WithArray):
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                           "tensor.detach().numpy() instead.")


def test_what_cannot_be_read_says_so_with_the_right_article(prog):
    with pytest.raises(InputError, match="input 'x': expected numbers, got an ArrayImpl"):
        prog.grad(x=ArrayImpl(), s=1.0)
    with pytest.raises(InputError, match="got a WithArray"):
        prog.grad(x=[1.0, WithArray(X), 2.0], s=1.0)
    with pytest.raises(InputError, match="cannot read a Tensor as an array in host memory: "
                                         "Can't call numpy") as info:
        prog(x=Tensor(X), s=1.0)
    assert "detach" in str(info.value)
    on_gpu = WithDLPack(X, device=(2, 0))  # DLPack's kDLCUDA: memory NumPy cannot read
    with pytest.raises(InputError, match="input 'x': cannot read a WithDLPack") as info:
        prog.grad(x=on_gpu, s=1.0)
    assert "cpu()" in str(info.value)
    with pytest.raises(InputError, match="the tangent for 'x': cannot read a Tensor"):
        prog.jvp({"x": Tensor(X)}, x=X, s=1.0)
    with pytest.raises(InputError, match="expected real numbers, got an array of <U1"):
        prog(x=array.array("u", "abc"), s=1.0)


@pytest.mark.parametrize("word, said", [
    ("ArrayImpl", "an ArrayImpl"), ("Tensor", "a Tensor"), ("ndarray", "an ndarray"),
    ("int", "an int"), ("UserList", "a UserList"), ("object", "an object"),
    ("memoryview", "a memoryview"), ("EagerTensor", "an EagerTensor"),
    ("unicode", "a unicode"), ("OneHot", "a OneHot"), ("Euro", "a Euro")])
def test_articles(word, said):
    assert a_or_an(word) == said


def test_torch_cpu_tensors(prog):
    torch = pytest.importorskip("torch")
    for dtype in (torch.float64, torch.float32):
        t = torch.tensor(X, dtype=dtype)
        want = prog.grad(x=t.numpy(), s=2.0)["x"]
        assert np.array_equal(prog.grad(x=t, s=2.0)["x"], want)
    batch = torch.tensor(np.stack([X, X * 2]))
    assert prog(x=batch, s=torch.tensor(2.0)).shape == (2,)
    with pytest.raises(InputError, match="a Tensor"):
        prog(x=torch.tensor(X, requires_grad=True), s=1.0)


def test_jax_arrays(prog):
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.array(X)  # float32, JAX's default precision: converted
    np.testing.assert_array_equal(prog.grad(x=x, s=2.0)["x"],
                                  prog.grad(x=np.asarray(x), s=2.0)["x"])
    rows = jnp.stack([x, 2 * x])
    np.testing.assert_array_equal(prog(x=rows, s=jnp.array(2.0)),
                                  prog(x=np.asarray(rows), s=2.0))
