"""A gradient's adds of two loops' values made a loop again (graph/reroll.py): the gradient
with the pass and without it (autodiff's `rerolled` replaced by the identity) must be the same
to the bit in the reference interpreter, agree with every loop written out, and keep no run
of such adds outside its loops. Programs are written and generated so that the pass has runs
to reroll: an input read by a loop nested in another and by a loop of its own over windows
that do not tile it (`w[c, j + 1]`), whose cotangents are added element by element. (Where
both loops' windows tile the input, `wholes.gradient_port` adds them by a copy loop, and
there are no adds to reroll: GMM's factors, tested last.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from draws import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diffdsl
import diffdsl.graph.autodiff as autodiff
from diffdsl.graph.reroll import RUN, _runs

UNROLLED = 10**9
EXAMPLES = examples(6)
GMM = Path(__file__).resolve().parents[1] / "bench" / "gradbench" / "gmm.dd"


def gmm(n: int, d: int, k: int) -> str:
    text = GMM.read_text()
    for name, value in (("n", n), ("d", d), ("k", k)):
        text = text.replace(f"const {name} = ", f"const {name} = {value} #", 1)
    return text


def weights(n: int, k: int, m: int) -> str:
    """Weights w[k, m] read by a loop over their rows inside the loop over the points, and
    by a prior's loop over windows shifted by one (`w[c, j + 1]`), which do not tile them."""
    return f"""
const n = {n}
const k = {k}
const m = {m}
input x[n]
input w[k, m]
input a
output s = sum(sum(sum(w[c, j] * x[i] for j in range(m)) ** 2 for c in range(k))
               for i in range(n)) + sum(sum(exp(a * w[c, j + 1]) for j in range(m - 1))
                                        for c in range(k))
"""


PROGRAMS = {
    "weights read by the loop over the points and by a prior": weights(30, 70, 17),
    "factors of 66 components read by two loops": weights(20, 66, 21),
}


def compiled(source: str, unrolled: bool = False):
    if unrolled:
        with diffdsl.limits.using(unroll=UNROLLED):
            return diffdsl.compile(source, cache=False)
    return diffdsl.compile(source, cache=False)


def without_reroll(monkeypatch):
    monkeypatch.setattr(autodiff, "rerolled", lambda graph: graph)


def adding(region) -> bool:
    """Whether `region` is a loop that adds two streams: its body one add, or a loop of
    them over its window."""
    ops = [node.op for node in region.body.nodes if node.op != "input"]
    if ops == ["add"]:
        return True
    loops = [node.attr for node in region.body.nodes if node.op == "region"]
    return len(loops) == 1 and set(ops) == {"region", "part"} and adding(loops[0])


def rerolled_loops(prog) -> int:
    """How many loops of adds the gradient's graph holds: regions that add two streams of
    regions' values."""
    graph = autodiff.grad(prog.graph, next(iter(prog.outputs)))
    return sum(1 for node in graph.nodes if node.op == "region" and node.attr.whole
               and not node.attr.captures and len(node.attr.streams) == 2
               and adding(node.attr))


def point(prog, rng):
    return {name: rng.uniform(0.2, 1.2, size=tuple(s)) for name, s in prog.inputs.items()}


def same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for key in a:
        assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), key


def close(a: dict, b: dict, rtol: float = 1e-11) -> None:
    assert set(a) == set(b)
    for key in a:
        x, y = np.asarray(a[key], float), np.asarray(b[key], float)
        scale = max(1.0, float(np.max(np.abs(y), initial=0.0)))
        np.testing.assert_allclose(x, y, rtol=0, atol=rtol * scale, err_msg=key)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_adds_of_two_loops_values_are_a_loop(name, monkeypatch):
    prog = compiled(PROGRAMS[name])
    graph = autodiff.grad(prog.graph, next(iter(prog.outputs)))
    assert _runs(graph) == []
    assert rerolled_loops(prog) >= 1
    without_reroll(monkeypatch)
    kept = autodiff.grad(prog.graph, next(iter(prog.outputs)))
    adds = sum(len(run) for run in _runs(kept))
    assert adds >= RUN
    assert op_count(graph, "add") == op_count(kept, "add") - adds


def op_count(graph, op: str) -> int:
    return sum(node.op == op for node in graph.nodes)


@pytest.mark.parametrize("backend", ["cpu", "numpy"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rerolling_changes_no_derivative(name, backend, monkeypatch):
    source = PROGRAMS[name]
    prog, unrolled = compiled(source), compiled(source, unrolled=True)
    rng = np.random.default_rng(5)
    at = point(prog, rng)
    (of,) = prog.outputs
    with_loops = prog.grad(at, of=of, backend=backend)
    seed = np.full(1, 0.75)
    pulled = prog.vjp(seed, at, of=of, backend=backend)
    close(with_loops, unrolled.grad(at, of=of, backend=backend))
    without_reroll(monkeypatch)
    again = compiled(source)
    if backend == "numpy":  # the same adds of the same values
        same(with_loops, again.grad(at, of=of, backend=backend))
        same(pulled, again.vjp(seed, at, of=of, backend=backend))
    else:  # another kernel: the optimiser may take other paths through the same arithmetic
        close(with_loops, again.grad(at, of=of, backend=backend))


@st.composite
def nests(draw):
    """A program whose input w[k, m] is read by a loop nested in the loop over the points
    (so it is listed) and by one or two loops of its own, each over a slice of its columns
    and through a function of its own."""
    funcs = ["exp({})", "sin({})", "tanh({})", "sqrt(1 + ({}) ** 2)", "({}) ** 2"]
    m = draw(st.integers(RUN, RUN + 6))
    k = draw(st.integers(66, 70))
    lines = [f"const n = {draw(st.integers(3, 12))}", f"const k = {k}", f"const m = {m}",
             "input x[n]", "input w[k, m]", "input a"]
    inner = draw(st.sampled_from(funcs)).format("w[c, j] * x[i]")
    terms = [f"sum(sum(sum({inner} for j in range(m)) ** 2 for c in range(k)) for i in range(n))"]
    for _ in range(draw(st.integers(1, 2))):
        lo = draw(st.integers(0, 2))
        f = draw(st.sampled_from(funcs)).format(f"a * w[c, j + {lo}]")
        terms.append(f"sum(sum({f} for j in range(m - {lo})) for c in range(k))")
    lines.append("output s = " + " + ".join(terms))
    return "\n".join(lines) + "\n"


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(source=nests(), seed=st.integers(0, 2**16))
def test_generated_nests_agree_with_and_without_the_pass(source, seed, monkeypatch):
    prog = compiled(source)
    at = point(prog, np.random.default_rng(seed))
    grads = prog.grad(at, of="s", backend="numpy")
    assert _runs(autodiff.grad(prog.graph, "s")) == []
    close(grads, compiled(source, unrolled=True).grad(at, of="s", backend="numpy"), 1e-10)
    with monkeypatch.context() as patched:
        without_reroll(patched)
        same(grads, compiled(source).grad(at, of="s", backend="numpy"))


def test_generated_nests_give_the_pass_runs_to_reroll():
    """The generator makes what the pass is for: a test over programs it left alone would
    pass without it."""
    fired = 0
    for lo in (1, 2):
        source = f"""
const n = 4
const k = 67
const m = {RUN + 2}
input x[n]
input w[k, m]
input a
output s = sum(sum(sum(exp(w[c, j] * x[i]) for j in range(m)) ** 2 for c in range(k))
               for i in range(n)) + sum(sum(sin(a * w[c, j + {lo}]) for j in range(m - {lo}))
                                    for c in range(k))
"""
        fired += rerolled_loops(compiled(source)) > 0
    assert fired == 2


def test_runs_of_each_component_are_one_loop():
    """66 components give 66 runs of 20 adds (the factors' cotangents, a row a component, in
    both loops): one loop over the components, each adding its run by a loop, not 66 loops
    (each compiled on its own)."""
    prog = compiled(PROGRAMS["factors of 66 components read by two loops"])
    assert rerolled_loops(prog) == 1
    graph = autodiff.grad(prog.graph, "s")
    (outer,) = [node.attr for node in graph.nodes if node.op == "region" and
                node.attr.whole and adding(node.attr)]
    assert outer.n == 66 and outer.maps == 20


def test_a_gmms_factors_read_by_both_loops_leave_no_adds(monkeypatch):
    """GMM's factors, read whole by the loop over the components inside the loop over the
    points and, row by row, by the prior's loop: their two cotangents tile them, and one
    copy loop adds them (`wholes.gradient_port`), with the pass or without: no run of adds,
    no element listed, and the derivative the program's written out."""
    source = gmm(20, 7, 66)
    prog = compiled(source)
    without_reroll(monkeypatch)
    graph = autodiff.grad(prog.graph, "objective")
    assert _runs(graph) == [] and graph.outputs["d:l"].whole is not None
    assert not any(node.op == "input" and node.attr[0] == "l" for node in graph.nodes)
    at = point(prog, np.random.default_rng(3))
    close(prog.grad(at), compiled(source, unrolled=True).grad(at))
