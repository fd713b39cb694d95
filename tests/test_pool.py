"""The spinning pool (backends/pool.py): a batch split over its threads gives, row for row,
the bits the serial row loop gives, whether the workers spin, sleep, are woken, are
interrupted between the pool's two calls, or are busy with another thread's batch; a forked
child and an exiting process neither hang nor crash.

Each test that changes how long workers spin gets a pool of its own (`own_pool`), closed
after it, so the process's pool keeps its calibration.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.backends import cpu, pool

SOURCE = """
input A[3, 3]
input s
output f = s * (A[0, 0] * (A[1, 1] * A[2, 2] - A[1, 2] * A[2, 1]) + sin(A[0, 1]) * A[1, 2]
                - exp(A[1, 0]) * A[2, 0] * A[0, 2])
"""


@pytest.fixture(scope="module")
def prog():
    return diffdsl.compile(SOURCE, backend="cpu", cache=False)


def draw(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (rows, 3, 3))


def serial(prog, monkeypatch, X, s=1.5) -> tuple:
    with monkeypatch.context() as m:
        m.setattr(cpu, "PARALLEL_WORK", 10**18)
        return prog(A=X, s=s), prog.grad(A=X, s=s)


def pooled(prog, monkeypatch, X, threads: int, s=1.5) -> tuple:
    with monkeypatch.context() as m:
        m.setattr(cpu, "PARALLEL_WORK", 0)
        m.setenv(cpu.THREADS_ENV, str(threads))
        return prog(A=X, s=s), prog.grad(A=X, s=s)


def same(a: tuple, b: tuple) -> None:
    assert np.array_equal(a[0], b[0])
    assert a[1].keys() == b[1].keys()
    for name in a[1]:
        assert np.array_equal(a[1][name], b[1][name]), name


@pytest.fixture
def own_pool(monkeypatch):
    """A pool of this test's, whose workers spin for `spin` seconds (set before first use)."""
    made = []

    def make(spin: float) -> pool.Pool:
        monkeypatch.setattr(pool, "SPIN_S", spin)
        monkeypatch.setattr(pool, "_pool", [pool.Pool()])
        made.append(pool._pool[0])
        return made[-1]
    yield make
    for p in made:
        p.close()


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(2, 3000), threads=st.integers(2, 5), seed=st.integers(0, 99))
def test_pooled_batches_give_the_serial_bits(prog, rows, threads, seed):
    """Any row count, slices uneven or of one row, more threads than cores: bit for bit."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        X = draw(rows, seed)
        same(pooled(prog, monkeypatch, X, threads), serial(prog, monkeypatch, X))


def test_a_batch_shares_scalars_and_keeps_its_leading_shape(prog, monkeypatch):
    X = draw(600, 1).reshape(20, 30, 3, 3)
    s = np.linspace(-1, 1, 600).reshape(20, 30)
    got = pooled(prog, monkeypatch, X, 3, s=s)
    assert got[0].shape == (20, 30) and got[1]["A"].shape == (20, 30, 3, 3)
    same(got, serial(prog, monkeypatch, X, s=s))


@pytest.mark.parametrize("spin", [0.0, 0.02])
def test_sleeping_or_spinning_workers_give_the_same_bits(prog, monkeypatch, own_pool, spin):
    """spin 0: a worker sleeps after every slice, so each batch wakes it, and the calling
    thread runs the slice itself when the worker is not up yet; 0.02 s: the batches follow
    each other within the spin, after pauses beyond it too."""
    p = own_pool(spin)
    X = draw(5000, 2)
    expected = serial(prog, monkeypatch, X)
    for k in range(40):
        same(pooled(prog, monkeypatch, X, 2 + k % 3), expected)
        if k % 10 == 9:
            time.sleep(0.05)  # past the spin: the workers are asleep
    assert p._budget >= 1
    assert len(p._threads) >= 2 and all(t.is_alive() for t in p._threads)


def test_workers_leave_their_spin_and_sleep(own_pool, prog, monkeypatch):
    p = own_pool(0.001)
    pooled(prog, monkeypatch, draw(3000, 3), 3)
    deadline = time.monotonic() + 10
    while not np.all(p._slots[:, 0] == pool.AWAY):
        assert time.monotonic() < deadline, p._slots[:, 0]
        time.sleep(0.01)


def outputs_kept(monkeypatch) -> list:
    """The output arrays of every kernel run from now on, appended as they are made."""
    kernel_run = cpu.Kernel.run
    outputs = []

    def keep(self, inputs, strides, outs, rows):
        outputs.append(outs)
        return kernel_run(self, inputs, strides, outs, rows)
    monkeypatch.setattr(cpu.Kernel, "run", keep)
    return outputs


def nothing_stranded(p: pool.Pool) -> None:
    """No slice is left posted or running once a batch has returned."""
    assert np.all(p._slots[:, 0] != pool.POSTED) and np.all(p._slots[:, 0] != pool.TAKEN)


@pytest.mark.parametrize("spin", [0.0, 0.05])
def test_an_interrupt_between_the_pools_calls_ends_every_slice(prog, monkeypatch, own_pool,
                                                               spin):
    """Ctrl-C heard after the first of the pool's two calls: the batch still ends, the
    interrupt reaches the caller, and the pool serves the next batch. spin 0: the workers
    are asleep, so the first call only posted the slices, and the cleanup must run them
    all (none stranded POSTED); spin 0.05: the first call ran the whole batch, and the
    cleanup's second `_finish` must return at once, slice 0 computed again to the same
    bits."""
    p = own_pool(spin)
    X = draw(4000, 4)
    expected = serial(prog, monkeypatch, X)
    pooled(prog, monkeypatch, X, 2)
    time.sleep(0.02)
    real = p._run

    def interrupted(*args):
        real(*args)
        raise KeyboardInterrupt
    monkeypatch.setattr(p, "_run", interrupted)
    outputs = outputs_kept(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        pooled(prog, monkeypatch, X, 2)
    assert np.array_equal(outputs[-1][0], expected[0])
    nothing_stranded(p)
    monkeypatch.setattr(p, "_run", real)
    same(pooled(prog, monkeypatch, X, 2), expected)


def test_a_second_interrupt_in_the_cleanup_still_ends_every_slice(prog, monkeypatch,
                                                                  own_pool):
    """Ctrl-C after the slices were posted to sleeping workers, and again while the
    cleanup wakes them (both raised from an Event's `set`): every slice has run when the
    interrupt reaches the caller."""
    p = own_pool(0.0)
    X = draw(4000, 5)
    expected = serial(prog, monkeypatch, X)
    pooled(prog, monkeypatch, X, 3)
    time.sleep(0.05)

    class Interrupting:
        def set(self):
            raise KeyboardInterrupt
    events = p._events
    p._events = [Interrupting() for _ in events]
    outputs = outputs_kept(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        pooled(prog, monkeypatch, X, 3)
    assert np.array_equal(outputs[-1][0], expected[0])
    nothing_stranded(p)
    p._events = events
    for event in events:  # what the cleanup could not do
        event.set()
    same(pooled(prog, monkeypatch, X, 3), expected)


def test_threads_past_the_mask_are_capped(prog, monkeypatch, own_pool):
    """The AWAY mask holds MOST workers: a batch asking for more threads runs on MOST + 1."""
    p = own_pool(0.0)
    X = draw(300, 6)
    same(pooled(prog, monkeypatch, X, pool.MOST + 30), serial(prog, monkeypatch, X))
    assert len(p._threads) == pool.MOST


def test_closed_workers_end_and_the_next_batch_starts_new_ones(prog, monkeypatch, own_pool):
    p = own_pool(0.02)
    X = draw(3000, 7)
    pooled(prog, monkeypatch, X, 3)
    threads = list(p._threads)
    p.close()
    assert threads and not any(t.is_alive() for t in threads)
    assert np.all(p._slots[:, 0] == pool.CLOSED)
    same(pooled(prog, monkeypatch, X, 3), serial(prog, monkeypatch, X))
    assert len(p._threads) == 2 and all(t.is_alive() for t in p._threads)


def test_batches_from_many_threads_at_once(prog, monkeypatch):
    """One batch holds the pool; the others run on the executor meanwhile."""
    monkeypatch.setattr(cpu, "PARALLEL_WORK", 0)
    monkeypatch.setattr(cpu, "EXECUTOR_WORK", 0)
    monkeypatch.setenv(cpu.THREADS_ENV, "2")
    batches = [draw(2000 + 37 * k, 10 + k) for k in range(8)]
    with monkeypatch.context() as m:
        m.setattr(cpu, "PARALLEL_WORK", 10**18)
        expected = [prog.grad(A=X, s=0.5)["A"] for X in batches]
    got: dict = {}
    start = threading.Barrier(len(batches))

    def work(k):
        start.wait()
        got[k] = [prog.grad(A=batches[k], s=0.5)["A"] for _ in range(20)]
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, runs in got.items():
        for g in runs:
            assert np.array_equal(g, expected[k])


def run_script(body: str, timeout: float = 120) -> subprocess.CompletedProcess:
    script = textwrap.dedent("""
        import os, sys
        import numpy as np
        import diffdsl
        from diffdsl.backends import cpu
        cpu.PARALLEL_WORK = 0
        prog = diffdsl.compile('''{source}''', backend="cpu", cache=False)
        X = np.random.default_rng(0).uniform(-1, 1, (5000, 3, 3))
        """).format(source=SOURCE) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_a_forked_child_starts_workers_of_its_own():
    """The parent's workers spin when it forks; the child's batch must not wait for them,
    and runs on workers the child started."""
    done = run_script("""
        from diffdsl.backends import pool
        first = prog.grad(A=X, s=1.0)["A"]
        pid = os.fork()
        if pid == 0:
            again = prog.grad(A=X, s=1.0)["A"]
            started = pool.pool()._threads
            alive = len(started) >= 1 and all(t.is_alive() for t in started)
            os._exit(0 if np.array_equal(again, first) and alive else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        """)
    assert done.returncode == 0, done.stderr
    assert "child 0" in done.stdout


def test_exit_while_workers_spin_is_clean():
    """A smoke test: the workers are daemon threads in machine code when the process
    ends (stopped by the atexit handler, or left to the process's end)."""
    done = run_script("""
        for _ in range(3):
            prog.grad(A=X, s=1.0)
        print("ran")
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ran" and not done.stderr


def test_a_batch_never_waits_for_a_worker_to_wake():
    """Workers asleep and never woken (their Events dead): the calling thread runs their
    slices itself, so every batch still ends, with the serial bits."""
    done = run_script("""
        from diffdsl.backends import pool
        pool.SPIN_S = 0.0
        cpu.PARALLEL_WORK = 10**18
        expected = prog.grad(A=X, s=1.0)["A"]
        cpu.PARALLEL_WORK = 0
        os.environ[cpu.THREADS_ENV] = "4"
        prog.grad(A=X, s=1.0)
        p = pool.pool()

        class Dead:
            def set(self):
                pass
        p._events = [Dead() for _ in p._events]
        import time
        time.sleep(0.1)
        assert (p._slots[:, 0] == pool.AWAY).all(), p._slots
        for _ in range(20):
            assert np.array_equal(prog.grad(A=X, s=1.0)["A"], expected)
        print("ended")
        os._exit(0)  # the workers sleep on Events of their own, which nothing sets
        """, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ended"
