"""The value alone as quick as its gradient, a batch in another dtype converted on the way
(issue 23, item 7; bench/value_paths.py measures both).

`prog(A=x)` once compiled goes straight to the kernel as `prog.grad(A=x)` does, and keeps the
general path's answers and rules (another backend or dtype asked for, lists, several outputs).
A batch given in another dtype than the program's (float64 data to a float32 program) is
converted a chunk of rows at a time inside the kernel's threads, never copied whole: the same
answers as converting first, at every chunk and slice boundary.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import diffdsl
from diffdsl.backends import cpu
from diffdsl.runtime import engine

DET3 = """
input A[3, 3]
output d = A[0,0]*(A[1,1]*A[2,2] - A[1,2]*A[2,1]) - A[0,1]*(A[1,0]*A[2,2] - A[1,2]*A[2,0]) +
    A[0,2]*(A[1,0]*A[2,1] - A[1,1]*A[2,0])
"""
MIXED = """
input x[3]
input s
output y = s * sin(x[0]) * x[1] + exp(x[2] / 4)
"""


def test_the_value_goes_straight_to_the_kernel_once_compiled(monkeypatch):
    prog = diffdsl.compile(DET3, backend="cpu", cache=False)
    rng = np.random.default_rng(1)
    first = rng.uniform(size=(3, 3))
    assert prog(A=first) == pytest.approx(np.linalg.det(first), rel=1e-13)

    def general_path(*args, **kwargs):
        raise AssertionError("the general path was taken")

    monkeypatch.setattr(prog.engine, "run", general_path)
    for _ in range(5):
        A = rng.uniform(size=(3, 3))
        value = prog(A=A)
        assert type(value) is np.float64 and value == pytest.approx(np.linalg.det(A), 1e-13)
    monkeypatch.undo()
    # Anything else takes the general path, with its answers: a list, a batch, a dict.
    assert prog(A=first.tolist()) == pytest.approx(np.linalg.det(first), rel=1e-13)
    batch = rng.uniform(size=(4, 3, 3))
    np.testing.assert_allclose(prog(A=batch), np.linalg.det(batch), rtol=1e-12)
    assert prog({"A": first}) == pytest.approx(np.linalg.det(first), rel=1e-13)


def test_the_fast_value_keeps_the_backend_and_dtype_asked_for(monkeypatch):
    prog = diffdsl.compile(DET3, backend="cpu", cache=False)
    A = np.eye(3) * 2
    assert prog(A=A) == 8.0
    seen = []
    run = prog.engine.run
    monkeypatch.setattr(prog.engine, "run",
                        lambda graph, inputs, backend, dtype: seen.append((backend, dtype))
                        or run(graph, inputs, backend, dtype))
    assert prog(A=A, backend="numpy") == 8.0
    single = prog(A=A, dtype="float32")
    assert single == 8.0 and single.dtype == np.float32
    assert seen == [("numpy", "float64"), ("cpu", "float32")]


def test_several_outputs_come_back_by_name_on_the_fast_path():
    prog = diffdsl.compile("input x[2]\noutput a = x[0] * x[1]\noutput b = [x[0], -x[1]]\n",
                           backend="cpu", cache=False)
    for k in range(3):
        x = np.array([2.0, 3.0 + k])
        out = prog(x=x)
        assert out["a"] == 2.0 * (3 + k) and out["b"].tolist() == [2.0, -3.0 - k]


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few rows and threads from the first row, so that a small batch crosses
    many chunk and slice boundaries."""
    monkeypatch.setattr(cpu, "CONVERT_BYTES", 200)
    monkeypatch.setattr(cpu, "PARALLEL_WORK", 1)
    monkeypatch.setenv(cpu.THREADS_ENV, "3")


@pytest.mark.parametrize("rows", [1, 7, 250, 1001])
def test_a_batch_in_another_dtype_is_converted_chunk_by_chunk(small_chunks, rows):
    rng = np.random.default_rng(rows)
    x64 = rng.uniform(-2, 2, (rows, 3))
    s64 = rng.uniform(1, 2, rows)
    for dtype, other in (("float32", np.float64), ("float64", np.float32)):
        prog = diffdsl.compile(MIXED, backend="cpu", dtype=dtype, cache=False)
        x, s = x64.astype(other), s64.astype(other)
        mine = {"x": x.astype(dtype), "s": s.astype(dtype)}  # converted first, by NumPy
        got = prog.evaluate({"x": x, "s": s})["y"]
        assert got.dtype == np.dtype(dtype)
        assert np.array_equal(got, prog.evaluate(mine)["y"])
        grads = prog.grad(x=x, s=s)
        want = prog.grad(mine)
        assert all(np.array_equal(grads[k], want[k]) for k in want)
        # shared by every row, integers, not contiguous: the same answers
        shared = prog.evaluate({"x": x, "s": 3})["y"]
        assert np.array_equal(shared, prog.evaluate({"x": mine["x"], "s": 3.0})["y"])
        wide = np.repeat(x, 2, axis=1)[:, ::2]
        assert np.array_equal(prog.evaluate({"x": wide, "s": s})["y"], got)
        ints = np.arange(rows * 3).reshape(rows, 3) % 5
        assert np.array_equal(prog.evaluate({"x": ints, "s": s})["y"],
                              prog.evaluate({"x": ints.astype(dtype), "s": mine["s"]})["y"])


def test_a_float64_batch_for_a_float32_program_is_not_copied_whole(monkeypatch):
    """Converting the whole batch first held a float32 copy of it (and read and wrote it
    once more); a chunk at a time holds a few hundred kilobytes a thread."""
    monkeypatch.setenv(cpu.THREADS_ENV, "2")
    prog = diffdsl.compile(DET3, backend="cpu", dtype="float32", cache=False)
    batch = np.random.default_rng(0).uniform(size=(200_000, 3, 3))
    prog.evaluate({"A": batch[:10]})  # compiled before measuring
    copy = batch.size * 4
    tracemalloc.start()
    try:
        out = prog.evaluate({"A": batch})["d"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < copy / 4, f"{peak:,} bytes at the peak; a whole copy is {copy:,}"
    np.testing.assert_allclose(out, np.linalg.det(batch), rtol=1e-4, atol=1e-5)


def test_a_single_point_in_another_dtype_is_converted():
    prog = diffdsl.compile(DET3, backend="cpu", dtype="float32", cache=False)
    A = np.diag([2.0, 3.0, 4.0])
    value = prog(A=A)
    assert value == 24.0 and value.dtype == np.float32
    assert prog.grad(A=A.astype(np.int64))["A"].dtype == np.float32
    assert engine.check_dtype(np.float32) == "float32"


def test_grad_computes_the_gradient_alone():
    """`grad` (a point, a batch, the fast path) compiles the derivative without the value's
    own nodes, which `value_and_grad` asks for: the determinant's last products, a loop run
    for the value alone."""
    prog = diffdsl.compile(DET3, backend="cpu", cache=False)
    A = np.random.default_rng(2).uniform(size=(4, 3, 3))
    for x in (A, A[0], A[1]):  # a batch, a first point, then the fast path
        np.testing.assert_allclose(prog.grad(A=x)["A"],
                                   np.linalg.det(x)[..., None, None] * np.swapaxes(
                                       np.linalg.inv(x), -1, -2), rtol=1e-12)
    graphs = [key[0] for key, _ in prog.engine._kernels.items()]
    assert graphs and all("value" not in g.outputs for g in graphs)
    value, grads = prog.value_and_grad(A=A[0])
    assert value == pytest.approx(np.linalg.det(A[0]), rel=1e-13)
    assert any("value" in key[0].outputs for key, _ in prog.engine._kernels.items())


def test_a_dict_of_inputs_takes_the_fast_path_too(monkeypatch):
    """`prog.grad({"A": A})`, `prog({"A": A})` and the Hessian's diagonal, as
    `prog.grad(A=A)`: after a first call,
    a single point goes straight to the kernel (7 µs a call less at GradBench's lse,
    n = 2,500), without the slow path's checks and conversions."""
    prog = diffdsl.compile(DET3, backend="cpu", cache=False)
    A = np.random.default_rng(5).uniform(size=(3, 3))
    first, value = prog.grad({"A": A}), prog({"A": A})
    diagonal = prog.hessian({"A": A}, diagonal=True)["A"]

    def slow(*args, **kwargs):
        raise AssertionError("the slow path")
    monkeypatch.setattr(prog, "value_and", slow)
    monkeypatch.setattr(prog, "evaluate", slow)
    B = A + 0.5
    got = prog.grad({"A": B})
    np.testing.assert_allclose(got["A"], np.linalg.det(B) * np.linalg.inv(B).T, rtol=1e-12)
    assert prog({"A": B}) == pytest.approx(np.linalg.det(B), rel=1e-13)
    assert prog({"A": A}) == value and np.array_equal(prog.grad({"A": A})["A"], first["A"])
    assert np.array_equal(prog.hessian({"A": A}, diagonal=True)["A"], diagonal)
    assert not np.any(prog.hessian(A=B, diagonal=True)["A"])  # det is linear in each element
    # A batch of arrays of the kernel's dtype goes straight to the kernel too, row by row
    # the points' results; one of another dtype is converted, on the slow path.
    batch = prog.grad({"A": np.stack([A, B])})["A"]
    assert np.array_equal(batch[0], first["A"]) and np.array_equal(batch[1], got["A"])
    assert np.array_equal(prog({"A": np.stack([B, A])}), [prog({"A": B}), value])
    with pytest.raises(AssertionError, match="slow path"):
        prog.grad({"A": np.stack([A, B]).astype(np.float32)})
    with pytest.raises(AssertionError, match="slow path"):  # nor the whole Hessian
        prog.hessian({"A": B})


@pytest.mark.parametrize("backend", ["auto", "cpu"])
def test_a_batch_auto_may_send_to_a_gpu_leaves_the_fast_path(monkeypatch, backend):
    """The batch fast path (`_Plan._batch`) runs on the CPU only what the general path would:
    with a GPU present, "auto" sends a batch of CUDA_AUTO_ROWS rows or more there."""
    monkeypatch.delenv(engine.BACKEND_ENV, raising=False)  # "auto" as a user has it
    prog = diffdsl.compile(DET3, backend=backend, cache=False)
    X = np.random.default_rng(8).uniform(size=(6, 3, 3))
    expected = prog.grad(A=X)["A"]
    graph = prog.derivative("grad", value=False)
    fast = prog.engine.fast_function(graph, "float64", backend, single=False)
    plan = prog.engine.compiled_plan(graph, "float64")
    assert np.array_equal(fast({"A": X})["d:A"], expected)
    assert np.array_equal(plan.try_point({"A": X})["d:A"], expected)
    monkeypatch.setattr(engine, "gpu_present", lambda: True)
    monkeypatch.setattr(engine, "CUDA_AUTO_ROWS", 6)
    assert plan.try_point({"A": X}) is None  # Engine.run's is for "auto" and "cpu" alike
    assert (fast({"A": X}) is None) == (backend == "auto")
    assert np.array_equal(fast({"A": X[:5]})["d:A"], expected[:5])
    monkeypatch.setattr(engine, "gpu_present", lambda: False)
    assert np.array_equal(plan.try_point({"A": X})["d:A"], expected)


def test_a_large_batch_without_a_cuda_driver_does_not_import_numba_cuda():
    """Where no CUDA driver loads, "auto" picks the CPU for a batch past CUDA_AUTO_ROWS without
    importing numba.cuda (half a second of a first call); where one loads, it asks numba.cuda."""
    code = ("import sys, numpy as np, diffdsl\n"
            "from diffdsl.backends import cuda\n"
            "from diffdsl.runtime import engine\n"
            "prog = diffdsl.compile('input x\\noutput y = x * x', cache=False)\n"
            "x = np.arange(float(engine.CUDA_AUTO_ROWS))\n"
            "assert np.array_equal(prog.grad(x=x)['x'], 2 * x)\n"
            "print(cuda.driver_found(), 'numba.cuda' in sys.modules)")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DIFFDSL_BACKEND", "NUMBA_ENABLE_CUDASIM", "NUMBA_CUDA_DRIVER")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    found, imported = done.stdout.split()
    assert imported == found


def test_driver_found_follows_the_loader_and_numbas_variable(monkeypatch):
    from diffdsl.backends import cuda
    tried = []

    def loader(name):
        tried.append(name)
        if name != "/usr/lib64/libcuda.so.1":
            raise OSError(name)

    found = cuda.driver_found.__wrapped__  # the search itself, not its answer kept
    monkeypatch.delenv("NUMBA_CUDA_DRIVER", raising=False)
    monkeypatch.setattr(cuda.ctypes, "CDLL", loader)
    monkeypatch.setattr(cuda.sys, "platform", "linux")
    assert found() and tried[0] == "libcuda.so" and tried[-1].startswith("/usr/lib64")
    monkeypatch.setattr(cuda.ctypes, "CDLL", lambda name: loader("none"))
    assert not found()
    monkeypatch.setattr(cuda, "available", lambda: pytest.fail("numba.cuda asked"))
    monkeypatch.setattr(cuda, "driver_found", found)
    assert not engine.gpu_present()
    monkeypatch.setenv("NUMBA_CUDA_DRIVER", "/opt/cuda/libcuda.so")
    assert found()
