"""Long loops split over threads within one evaluation (backends/llvm_spread.py): with the
work threshold at 0, every loop of a kernel's top level that may spread does, and its values
and derivatives on 2, 3 and 5 threads agree with one thread's and with the numpy
interpreter's, up to the order in which sums add; a batch, whose rows already run on the
pool, runs the loops whole; workers found asleep leave their slices to the caller."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from draws import examples
from fuzzing import programs
from hypothesis import HealthCheck, given, settings
from test_regions_fuzz import agree, build

import diffdsl
from diffdsl.backends import cpu, llvm_spread, pool

KMEANS = """const n = 300
const d = 3
const k = 4
input P[n, d]
input C[k, d]
def dist2(p, c) = sum((p - c) ** 2)
output cost = sum(min([dist2(P[i], C[c]) for c in range(k)]) for i in range(n))
"""
# a GMM's shape: the pullback adds each point's cotangents of the captured means into them
MIXTURE = """const n = 200
const k = 3
input x[n, 2]
input mu[k, 2]
input w[k]
output y = sum(logsumexp([w[c] - sum((x[i] - mu[c]) ** 2) for c in range(k)]) for i in range(n))
"""
# streams read at i and i + 1, a map (the rows of z) beside a sum; SHORT: fewer iterations
# than slices
NEIGHBOURS = """input x[500]
input a
output s = sum(a * sin(x[i]) * x[i + 1] for i in range(499))
output z = [x[i] * x[i + 1] + a for i in range(499)]
"""
SHORT = """input x[3]

input a
output y = sum(exp(a * x[i]) for i in range(3))
"""
PROGRAMS = {"kmeans": KMEANS, "mixture": MIXTURE, "neighbours": NEIGHBOURS, "short": SHORT}


@pytest.fixture
def everywhere(monkeypatch):
    """Every loop that may spread does: no work threshold."""
    monkeypatch.setattr(llvm_spread, "SPREAD_WORK", 0)
    monkeypatch.setattr(llvm_spread, "SUMS_WORK", 0)
    return monkeypatch


def point_of(prog, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {name: rng.normal(size=shape) for name, shape in prog.inputs.items()}


def derivatives(prog, point: dict, backend: str) -> dict:
    out = {"value": prog.evaluate(point, backend=backend)}
    for name, shape in prog.outputs.items():
        if shape == ():
            out[f"grad {name}"] = prog.grad(point, of=name, backend=backend)
            seeds = {k: np.ones(s) for k, s in prog.inputs.items()}
            out[f"hvp {name}"] = prog.hvp(point, seeds, of=name, backend=backend)
    return out


def kernels(prog) -> list:
    return [k for k in prog.engine._kernels._made.values() if isinstance(k, cpu.Kernel)]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_split_loops_agree_with_one_thread(everywhere, name):
    with diffdsl.limits.using(unroll=1):  # every loop a region, the short ones too
        prog = diffdsl.compile(PROGRAMS[name], cache=False)
    point = point_of(prog, 1)
    reference = derivatives(prog, point, "numpy")
    everywhere.setenv(cpu.THREADS_ENV, "1")
    alone = derivatives(prog, point, "cpu")
    assert agree(alone, reference)
    assert any(k.spread for k in kernels(prog))  # the kernels do split their loops
    for threads in ("2", "3", "5"):
        everywhere.setenv(cpu.THREADS_ENV, threads)
        for _ in range(3):  # the workers spinning, then as they find the next call
            assert agree(derivatives(prog, point, "cpu"), alone), (name, threads)


def test_float32_kernels_split_alike(everywhere):
    prog = diffdsl.compile(MIXTURE, cache=False, dtype="float32")
    point = point_of(prog, 2)
    everywhere.setenv(cpu.THREADS_ENV, "1")
    alone = prog.grad(point, backend="cpu")
    assert any(k.spread for k in kernels(prog))
    everywhere.setenv(cpu.THREADS_ENV, "2")
    split = prog.grad(point, backend="cpu")
    for key in alone:
        np.testing.assert_allclose(split[key], alone[key], rtol=1e-4, atol=1e-4)


def test_a_batch_runs_its_loops_whole(everywhere):
    """Rows of a batch run on the pool already: their loops run on the row's thread, and
    each row equals its own evaluation split over threads."""
    prog = diffdsl.compile(NEIGHBOURS, cache=False)
    rng = np.random.default_rng(3)
    rows = {"x": rng.normal(size=(6, 500)), "a": rng.normal(size=6)}
    everywhere.setenv(cpu.THREADS_ENV, "2")
    batch = prog.evaluate(rows, backend="cpu")
    for r in range(6):
        one = prog.evaluate({"x": rows["x"][r], "a": rows["a"][r]}, backend="cpu")
        assert agree({k: v[r] for k, v in batch.items()}, one)


def test_workers_found_asleep_leave_their_slices_here(everywhere):
    """Workers asleep when a loop posts its slices (their slots marked so after the call
    woke them, as if they had slept since): the slices run on the calling thread, the call
    reports them, and they are woken for the next call, which finds them spinning."""
    prog = diffdsl.compile(MIXTURE, cache=False)
    point = point_of(prog, 4)
    everywhere.setenv(cpu.THREADS_ENV, "1")
    alone = prog.grad(point, backend="cpu")
    everywhere.setenv(cpu.THREADS_ENV, "3")
    spin, seen = pool.pool(), []
    spread, done = spin.spread, spin.spread_done

    def asleep(count, size):
        context = spread(count, size)
        spin._slots[:count - 1, 0] = pool.AWAY
        return context

    def reported():
        seen.append(int(spin._context[5]))
        done()

    everywhere.setattr(spin, "spread", asleep)
    everywhere.setattr(spin, "spread_done", reported)
    assert agree(prog.grad(point, backend="cpu"), alone)
    assert seen and seen[-1] == 0b11  # both workers' slices ran here
    everywhere.setattr(spin, "spread", spread)
    for _ in range(3):
        assert agree(prog.grad(point, backend="cpu"), alone)


def test_threads_calling_at_once_agree(everywhere):
    """Python threads calling one program at once: one holds the pool and splits its loops,
    the others run theirs whole meanwhile (each with a scratch of its own), and every
    result is the one thread's."""
    prog = diffdsl.compile(MIXTURE, cache=False)
    point = point_of(prog, 6)
    everywhere.setenv(cpu.THREADS_ENV, "1")
    alone = prog.grad(point, backend="cpu")
    everywhere.setenv(cpu.THREADS_ENV, "2")
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda _: prog.grad(point, backend="cpu"), range(40)))
    assert all(agree(r, alone) for r in results)


def test_the_threshold_keeps_small_loops_on_one_thread():
    """At the default threshold a loop of little work is not split: its kernel keeps the
    builtin that a point call takes."""
    prog = diffdsl.compile(NEIGHBOURS, cache=False)
    prog.grad(point_of(prog, 5), of="s", backend="cpu")
    assert kernels(prog) and not any(k.spread for k in kernels(prog))
    assert all(k.point_builtin() is not None for k in kernels(prog))


@settings(max_examples=examples(30), deadline=None, suppress_health_check=list(HealthCheck))
@given(source=programs(mutate=False))
def test_fuzzed_programs_split_over_threads_agree(source):
    """The fuzzer's programs with every loop a region, split over three threads, against one
    thread and the numpy interpreter."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(llvm_spread, "SPREAD_WORK", 0)
        patch.setattr(llvm_spread, "SUMS_WORK", 0)
        prog = build(source, 1)
        if isinstance(prog, type):
            return
        point = point_of(prog, len(source))
        patch.setenv(cpu.THREADS_ENV, "1")
        alone = prog.evaluate(point, backend="cpu")
        jac = prog.jacobian(point, of="y", backend="cpu")
        assert agree(alone, prog.evaluate(point, backend="numpy")), source
        patch.setenv(cpu.THREADS_ENV, "3")
        assert agree(prog.evaluate(point, backend="cpu"), alone), source
        assert agree(prog.jacobian(point, of="y", backend="cpu"), jac), source
