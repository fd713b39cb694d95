"""Derivations run with Python's cyclic garbage collector paused (`ir.collector_paused`): off
while any runs, in any thread, and back as it was once the last one ends, however it ends."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import diffdsl
from diffdsl.graph import autodiff
from diffdsl.graph.ir import collector_paused

SOURCE = """
input x[40]
output f = sum(sin(x) * x ** 2) + prod(x[0:3])
"""


@pytest.fixture(autouse=True)
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_a_derivation_runs_with_the_collector_off_and_restores_it(monkeypatch):
    seen = []
    real = autodiff.reverse

    def watched(*args, **kwargs):  # runs inside autodiff.grad
        seen.append(gc.isenabled())
        return real(*args, **kwargs)
    monkeypatch.setattr(autodiff, "reverse", watched)
    prog = diffdsl.compile(SOURCE, backend="numpy", cache=False)
    x = np.linspace(0.1, 2.0, 40)
    g = prog.grad(x=x)["x"]
    assert seen and not any(seen)
    assert gc.isenabled()
    expected = np.cos(x) * x ** 2 + 2 * x * np.sin(x)
    expected[:3] += [x[1] * x[2], x[0] * x[2], x[0] * x[1]]
    np.testing.assert_allclose(g, expected, rtol=1e-12)


def test_nested_failing_and_disabled_calls_restore_the_collector():
    @collector_paused
    def inner():
        assert not gc.isenabled()
        raise ValueError("inside")

    @collector_paused
    def outer():
        with pytest.raises(ValueError):
            inner()
        assert not gc.isenabled()  # the outer call still runs
        return "done"
    assert outer() == "done" and gc.isenabled()
    gc.disable()  # a user who turned it off keeps it off
    assert outer() == "done" and not gc.isenabled()


def test_overlapping_derivations_in_threads_keep_it_off_until_the_last_ends():
    first_in, second_in, first_go = threading.Event(), threading.Event(), threading.Event()
    states = {}

    @collector_paused
    def first():
        first_in.set()
        second_in.wait(10)
        first_go.wait(10)

    @collector_paused
    def second():
        second_in.set()

    a = threading.Thread(target=first)
    a.start()
    first_in.wait(10)
    b = threading.Thread(target=second)
    b.start()
    b.join(10)
    states["after the second"] = gc.isenabled()  # the first still runs
    first_go.set()
    a.join(10)
    assert states["after the second"] is False
    assert gc.isenabled()
