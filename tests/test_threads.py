"""First use from many threads at once (issue 23, item 7): each graph and kernel built once.

A program's first value, gradient, Hessian, jvp and batch build a derivative graph each and a
kernel each. Sixteen threads asking for them at the same moment must share those builds (the
first thread builds, the others wait), with the answers one thread gets. The builds are
slowed down here, so that without that rule the threads would surely overlap.
The limits of `limits.using` belong to the thread that set them, and go with the work that
`deepstack.call` moves to a thread of its own.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import diffdsl
from diffdsl import deepstack, limits
from diffdsl.backends import cpu
from diffdsl.graph import autodiff

THREADS = 16
SOURCE = """
input A[3, 3]
input s
output f = s * (A[0, 0] * A[1, 1] * A[2, 2] + sin(A[0, 1]) * A[1, 2] - A[2, 0] * exp(A[1, 0]))
"""
A = np.array([[1.0, 0.5, -0.3], [0.2, 2.0, 0.7], [0.4, -1.1, 1.5]])
BATCH = np.stack([A * (1 + k / 10) for k in range(5)])
TANGENT = np.linspace(-1, 1, 9).reshape(3, 3)


def work(prog) -> dict:
    """What one thread asks of a fresh program: every first use it has."""
    return {"value": prog(A=A, s=2.0),
            "grad": prog.grad(A=A, s=2.0),
            "hessian": prog.hessian(A=A, s=2.0),
            "jvp": prog.jvp({"A": TANGENT}, A=A, s=2.0),
            "batch": prog.evaluate({"A": BATCH, "s": 2.0})["f"]}


@pytest.fixture
def counted(monkeypatch):
    """Counts of kernels compiled (by graph key) and graphs derived (by kind), each build
    slowed down so that threads asking at once would overlap."""
    kernels: Counter = Counter()
    graphs: Counter = Counter()

    class SlowKernel(cpu.Kernel):
        def __init__(self, graph, dtype, obj=None, slots=None, cache=True):
            if obj is None:  # compiled here, not loaded from the disk cache
                kernels[graph.key()] += 1
                time.sleep(0.05)
            super().__init__(graph, dtype, obj, slots, cache)

    monkeypatch.setattr(cpu, "Kernel", SlowKernel)
    for kind in ("grad", "hessian", "jvp"):
        monkeypatch.setattr(autodiff, kind, _slowed(kind, getattr(autodiff, kind), graphs))
    return kernels, graphs


def _slowed(kind: str, real, graphs: Counter):
    def slow(*args, **kwargs):
        graphs[kind] += 1
        time.sleep(0.05)
        return real(*args, **kwargs)
    return slow


@pytest.mark.parametrize("cache", [False, True])
def test_sixteen_threads_build_each_graph_and_kernel_once(counted, cache, tmp_path,
                                                          monkeypatch):
    """With the cache on, the threads also add their graphs to one plan entry on disk."""
    monkeypatch.setenv("DIFFDSL_CACHE_DIR", str(tmp_path))  # empty: every kernel is built
    kernels, graphs = counted
    alone = work(diffdsl.compile(SOURCE, cache=False, backend="cpu"))
    one_thread = (sum(kernels.values()), sum(graphs.values()))
    assert one_thread == (4, 3)  # the value's, gradient's, Hessian's and jvp's kernels
    kernels.clear()
    graphs.clear()

    prog = diffdsl.compile(SOURCE, cache=cache, backend="cpu")
    start = threading.Barrier(THREADS)

    def first_use(_):
        start.wait(timeout=60)
        return work(prog)

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(first_use, range(THREADS)))
    assert all(count == 1 for count in kernels.values()), kernels
    assert graphs == Counter({"grad": 1, "hessian": 1, "jvp": 1})
    assert prog.stats.kernels_built == 4 and prog.stats.graphs_built == 1 + 3
    for got in results:
        np.testing.assert_allclose(got["value"], alone["value"], rtol=1e-15)
        np.testing.assert_allclose(got["grad"]["A"], alone["grad"]["A"], rtol=1e-15)
        np.testing.assert_allclose(got["hessian"]["A"]["A"], alone["hessian"]["A"]["A"],
                                   rtol=1e-15)
        np.testing.assert_allclose(got["jvp"], alone["jvp"], rtol=1e-15)
        np.testing.assert_allclose(got["batch"], alone["batch"], rtol=1e-15)
    if cache:  # the plan on disk holds every graph: a new process derives nothing
        again = diffdsl.compile(SOURCE, cache=True, backend="cpu")
        work(again)
        assert again.stats.builds == 0


def test_a_failed_build_raises_in_its_thread_and_the_next_asker_builds(monkeypatch):
    prog = diffdsl.compile(SOURCE, cache=False, backend="cpu")
    real = autodiff.grad
    calls = []

    def fails_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the first build fails")
        return real(*args, **kwargs)

    monkeypatch.setattr(autodiff, "grad", fails_once)
    with pytest.raises(RuntimeError, match="first build"):
        prog.grad(A=A, s=2.0)
    got = prog.grad(A=A, s=2.0)["s"]
    assert got == pytest.approx(prog(A=A, s=1.0))  # f is linear in s
    assert len(calls) == 2


def test_dask_chunks_on_threads_build_once(counted):
    da = pytest.importorskip("dask.array")
    kernels, graphs = counted
    prog = diffdsl.compile(SOURCE, cache=False, backend="cpu")
    rows = np.stack([A + k / 100 for k in range(64)])
    lazy = prog.grad(A=da.from_array(rows, chunks=4), s=2.0)["A"]
    got = lazy.compute(scheduler="threads", num_workers=8)
    assert sum(kernels.values()) == 1 and graphs == Counter({"grad": 1})
    np.testing.assert_allclose(got, prog.grad(A=rows, s=2.0)["A"], rtol=1e-15)


def test_limits_belong_to_the_thread_that_set_them():
    """Two threads inside `using` blocks at once each see their own limits (with one list
    for the process, the block entered last won in both)."""
    inside = threading.Barrier(2)
    seen = {}

    def run(nodes):
        with limits.using(nodes=nodes):
            inside.wait(timeout=30)  # both blocks are open now
            seen[nodes] = limits.current().nodes
            inside.wait(timeout=30)

    threads = [threading.Thread(target=run, args=(n,)) for n in (1234, 5678)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {1234: 1234, 5678: 5678}
    assert limits.current().nodes == limits.Limits().nodes


def test_deepstack_work_runs_under_the_callers_limits():
    with limits.using(steps=4321):
        assert deepstack.call(2000, 2**24, lambda: limits.current().steps) == 4321
    assert deepstack.call(2000, 2**24, lambda: limits.current().steps) == limits.Limits().steps


def test_a_limit_set_around_compile_holds_in_its_lowering():
    """Lowering runs on a deepstack thread: the node limit set around `compile` reaches it."""
    source = "input x[50]\noutput y = sum(sin(x[i]) for i in range(50))\n"
    with limits.using(nodes=20), pytest.raises(diffdsl.errors.LimitError):
        diffdsl.compile(source, cache=False)
    assert diffdsl.compile(source, cache=False)(x=np.zeros(50)) == 0.0
