"""Forward sweeps visit what their seeds reach (graph/reach.py): a Jacobian by forward mode, a
Hessian, a Hessian's diagonal by colours, compressed sparse derivatives and derivatives taken
inside a program must be the same graphs as when every sweep visits every active node, for
generated programs with their loops kept (`unroll=1`) and written out."""

from __future__ import annotations

import numpy as np
import pytest
from fuzzing import programs
from hypothesis import HealthCheck, assume, given, settings

import diffdsl
from diffdsl.errors import DiffDSLError
from diffdsl.graph import autodiff, sparsity
from diffdsl.graph.reach import Reach


def everything(self, seeds):
    """The sweep as it was: every node of the range, in order (inactive ones it skips)."""
    return list(range(self.start, self.stop))


def derivatives(source: str, unroll: int) -> list[str] | None:
    with diffdsl.limits.using(unroll=unroll):
        try:
            prog = diffdsl.compile(source, cache=False)
        except DiffDSLError:
            return None
    graph = prog.graph
    texts = [graph.text()]  # derivatives inside the program: lower/derivatives.py
    for build in (lambda: autodiff.jacobian(graph, "y", mode="forward"),
                  lambda: autodiff.hessian(graph, "y"),
                  lambda: sparsity.hessian_diagonal(graph, "y", with_grad=True)):
        try:
            texts.append(build().text())
        except DiffDSLError as exc:  # a limit: the same with either sweep
            texts.append(type(exc).__name__)
    wrt = list(graph.inputs)
    n = len(sparsity.columns(sparsity.expand(graph), wrt))
    seeds = [list(range(0, n, 2)), list(range(1, n, 2))]
    texts.append(sparsity.compressed_jacobian(graph, "y", wrt, seeds, "forward").text())
    texts.append(sparsity.compressed_hessian(graph, "y", wrt, seeds).text())
    return texts


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=programs(mutate=False))
def test_sweeps_over_what_seeds_reach_build_the_same_graphs(source):
    for unroll in (1, 10**9):
        reached = derivatives(source, unroll)
        assume(reached is not None)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Reach, "order", everything)
            whole = derivatives(source, unroll)
        assert reached == whole, (source, unroll)


def test_a_column_visits_what_its_seed_reaches():
    """An element of `x` in `x * 2` written out reaches its own product alone: the sweep of a
    column is one node, not the graph."""
    source = "input x[300]\noutput y = [x[i] * 2 for i in range(300)]\n"
    with diffdsl.limits.using(unroll=10**9):
        graph = diffdsl.compile(source, cache=False).graph
    b, stop, active = autodiff._sweep_start(graph, ["x"])
    reach = Reach(b, stop, active)
    first = graph.inputs["x"].ids[0]
    order = reach.order({first: 1})
    assert order[0] == first and len(order) == 2
    assert b.nodes[order[1]].op == "mul"
    jac = diffdsl.compile(source, backend="numpy", cache=False).jacobian(
        {"x": np.arange(300.0)}, mode="forward")
    assert np.array_equal(jac["x"], 2 * np.eye(300))
