"""A batch computes once what its rows share (graph/shared_part.py): the nodes that depend on
inputs given at their declared shape alone run in a prefix kernel, the rest over the rows. The
results must be the same bits as the batch run whole, for values and derivatives of generated
programs, and agree with the reference interpreter row by row; the split must happen where it
pays and be refused where it cannot be made (inputs read in place by a loop)."""

from __future__ import annotations

import numpy as np
import pytest
from draws import examples
from fuzzing import programs
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.errors import DiffDSLError
from diffdsl.graph import shared_part
from diffdsl.runtime import engine

ROWS = engine.HOIST_ROWS + 6


def whole_and_split(monkeypatch, run):
    """`run()` with the batch run whole, then split wherever anything is shared."""
    monkeypatch.setattr(engine, "HOIST_ROWS", 10**12)
    whole = run()
    monkeypatch.setattr(engine, "HOIST_ROWS", 2)
    monkeypatch.setattr(engine, "HOIST_NODES", 1)
    return whole, run()


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=list(HealthCheck))
@given(source=programs(mutate=False), seed=st.integers(0, 2**16), data=st.data())
def test_generated_programs_give_the_same_bits_split(monkeypatch, source, seed, data):
    try:
        prog = diffdsl.compile(source, backend="cpu", cache=False)
    except DiffDSLError:
        assume(False)
    names = list(prog.inputs)
    shared = data.draw(st.sets(st.sampled_from(names), max_size=len(names)))
    rng = np.random.default_rng(seed)
    point = {n: rng.normal(size=((() if n in shared else (ROWS,)) + tuple(s)))
             for n, s in prog.inputs.items()}
    if len(shared) == len(names):
        point[names[0]] = rng.normal(size=(ROWS,) + tuple(prog.inputs[names[0]]))

    def run():
        out = dict(prog.evaluate(point))
        for mode in ("forward", "reverse"):
            jac = prog.jacobian(point, of="y", mode=mode)
            out.update({f"{mode}:{k}": v for k, v in jac.items()})
        return out

    whole, split = whole_and_split(monkeypatch, run)
    assert same(whole, split), source
    reference = prog.evaluate(point, backend="numpy")
    for name, value in reference.items():
        np.testing.assert_allclose(split[name], value, rtol=1e-7, atol=1e-9, equal_nan=True)


POSE = """
input theta[6]           # shared: a pose, with a chain of rotations
input u[2]               # one row each
def rot(a) = [[cos(a), -sin(a)], [sin(a), cos(a)]]
R = rot(theta[0]) @ rot(theta[1]) @ rot(theta[2]) @ rot(theta[3] * theta[4])
output err = R @ u + [theta[5], exp(theta[0])] - u * u
"""


def test_a_pose_shared_by_its_rows_runs_once(monkeypatch):
    prog = diffdsl.compile(POSE, backend="cpu", cache=False)
    rng = np.random.default_rng(3)
    point = {"theta": rng.normal(size=6), "u": rng.normal(size=(ROWS, 2))}
    graph = prog.derivative("jacobian", of="err", wrt=["theta", "u"], mode="forward")
    prefix, rest = shared_part.split(graph, {"theta"}, 1)
    assert not any(n.op in ("sin", "cos", "exp") for n in rest.nodes)  # all in the prefix
    assert sum(n.op in ("sin", "cos") for n in prefix.nodes) >= 8
    before = prog.stats.kernels_built

    def run():
        return prog.jacobian(point, of="err", wrt=["theta", "u"], mode="forward")

    monkeypatch.setattr(engine, "HOIST_NODES", 1)
    whole, split = whole_and_split(monkeypatch, run)
    assert same(whole, split)
    assert prog.stats.kernels_built - before == 3  # whole, then the prefix and the rest
    for r in (0, ROWS - 1):
        one = prog.jacobian({"theta": point["theta"], "u": point["u"][r]}, of="err",
                            wrt=["theta", "u"], backend="numpy")
        for k in one:
            np.testing.assert_allclose(split[k][r], one[k], rtol=1e-13, atol=1e-15)


def test_split_refuses_what_it_cannot_or_need_not_split():
    graph = diffdsl.compile(POSE, cache=False).graph
    assert shared_part.split(graph, set(), 1) is None  # nothing shared
    assert shared_part.split(graph, {"theta"}, 10**6) is None  # too little to run once
    assert shared_part.split(graph, {"theta"}, 1) is not None
    looped = diffdsl.compile("input x[1000]\ninput a\noutput y = sum(sin(a) * x[i] for i in "
                             "range(1000))", cache=False).graph
    assert any(p.whole for p in looped.inputs.values())
    assert shared_part.split(looped, {"a"}, 1) is None  # x is read in place by the loop


@pytest.mark.parametrize("shared", [["a"], ["a", "w"]])
def test_outputs_that_every_row_shares_are_copied_to_each_row(monkeypatch, shared):
    prog = diffdsl.compile("input a\ninput w[3]\noutput s = exp(a) * sum(w)\n"
                           "output t = sin(a) + w", backend="cpu", cache=False)
    rng = np.random.default_rng(0)
    point = {"a": 0.3 if "a" in shared else rng.normal(size=ROWS),
             "w": rng.normal(size=3 if "w" in shared else (ROWS, 3))}
    if len(shared) == 2:
        point["a"] = rng.normal(size=ROWS)
        shared = ["w"]
    whole, split = whole_and_split(monkeypatch, lambda: dict(prog.evaluate(point)))
    assert same(whole, split) and split["t"].shape == (ROWS, 3)
