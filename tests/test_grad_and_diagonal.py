"""`grad_and_hessian_diagonal`: the gradient and the Hessian's diagonal from one evaluation,
the gradient's loop over the data and its tangent's fused into one (graph/fuse.py). Each
half must equal `grad` and `hessian(diagonal=True)` called alone (themselves checked
against finite differences, SymPy and the program written out elsewhere), on both backends,
loops kept and written out, on the shapes of test_pattern_loops and the fuzzer's programs,
and the fused graph must be one loop where the two were one each."""

from __future__ import annotations

import numpy as np
import pytest
from fuzzing import programs
from hypothesis import HealthCheck, given, settings
from test_pattern_loops import KMEANS, SHAPES
from test_regions_fuzz import agree, build

from diffdsl.graph import fuse, sparsity

MAPS = {  # a gradient by an input each iteration reads: the loops' stacked rows
    "rows": "input X[{n}, 2]\ninput w[2]\n"
            "output f = sum(exp(X[i, 0] * w[0]) + (X[i, 1] - w[1]) ** 4 for i in range({n}))",
    "lse": "input x[{n}]\noutput f = log(sum(exp(x[i]) for i in range({n}))) + sum(x[i] ** 3 "
           "for i in range({n}))",
}


def _regions(graph) -> int:
    return sum(node.op == "region" for node in graph.nodes)


def _both_ways(prog, values, wrt=None):
    for backend in ("numpy", "cpu"):
        grads, diag = prog.grad_and_hessian_diagonal(values, wrt=wrt, backend=backend)
        assert agree(grads, prog.grad(values, wrt=wrt, backend=backend)), backend
        assert agree(diag, prog.hessian(values, wrt=wrt, diagonal=True, backend=backend))
        for name in grads:
            assert grads[name].shape == diag[name].shape == prog.inputs[name]


@pytest.mark.parametrize("name", sorted({**SHAPES, **MAPS}))
@pytest.mark.parametrize("unroll", [1, 10**9])
def test_each_half_is_what_the_call_alone_gives(name, unroll):
    source = {**SHAPES, **MAPS}[name].format(n=40)
    prog = build(source, unroll)
    rng = np.random.default_rng(7)
    values = {n: rng.normal(size=s) for n, s in prog.inputs.items()}
    _both_ways(prog, values)
    _both_ways(prog, values, wrt=[next(iter(prog.inputs))])


def test_the_kmeans_newton_step_is_one_loop_over_the_points(monkeypatch):
    prog = build(KMEANS.format(n=500), 1)
    apart = [_regions(prog.derivative(kind, of="f", wrt=["C"], value=False))
             for kind in ("grad", "hessian_diagonal")]
    paired = prog.derivative("grad_and_hessian_diagonal", of="f", wrt=["C"], value=False)
    assert apart == [1, 1] and _regions(paired) == 1
    assert fuse.fuse_siblings(paired) is paired  # nothing left to fuse
    monkeypatch.setattr(sparsity, "fuse_siblings", lambda graph: graph)
    two = sparsity.hessian_diagonal(prog.graph, "f", ["C"], with_grad=True)
    bodies = [len(node.attr.body.nodes) for node in two.nodes if node.op == "region"]
    (one,) = [len(node.attr.body.nodes) for node in paired.nodes if node.op == "region"]
    # The tangent's body holds the gradient's: fused, they share those nodes (the same
    # captured centroids, the same streamed points), so the loop computes them once.
    assert len(bodies) == 2 and one <= sum(bodies) - min(bodies) // 2
    rng = np.random.default_rng(3)
    values = {"P": rng.normal(size=(500, 2)), "C": rng.normal(size=(3, 2))}
    grads, diag = prog.grad_and_hessian_diagonal(values, wrt=["C"], backend="cpu")
    assert agree(grads, prog.grad(values, wrt=["C"])) and np.all(diag["C"] == 2.0 * np.bincount(
        np.argmin(((values["P"][:, None] - values["C"][None]) ** 2).sum(-1), axis=1),
        minlength=3)[:, None])


def test_a_batch_and_the_fast_path_give_the_same_pair():
    prog = build(MAPS["rows"].format(n=30), 1)
    rng = np.random.default_rng(5)
    rows = {"X": rng.normal(size=(4, 30, 2)), "w": rng.normal(size=(4, 2))}
    grads, diag = prog.grad_and_hessian_diagonal(rows, backend="cpu")
    for r in range(4):
        point = {k: v[r] for k, v in rows.items()}
        for _ in range(2):  # the second call takes the single-point path
            g, d = prog.grad_and_hessian_diagonal(point)
            assert agree(g, {k: v[r] for k, v in grads.items()})
            assert agree(d, {k: v[r] for k, v in diag.items()})


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=programs(mutate=False))
def test_fuzzed_programs_with_loops_kept(source):
    prog = build(source, 1)
    if isinstance(prog, type) or int(np.prod(prog.outputs["y"])) != 1:
        return
    rng = np.random.default_rng(len(source))
    values = {n: rng.normal(size=s) for n, s in prog.inputs.items()}
    for backend in ("numpy", "cpu"):
        grads, diag = prog.grad_and_hessian_diagonal(values, of="y", backend=backend)
        assert agree(grads, prog.grad(values, of="y", backend=backend)), source
        assert agree(diag, prog.hessian(values, of="y", diagonal=True, backend=backend)), source


def test_a_graph_of_many_loops_is_left_as_it_is(monkeypatch):
    """Past `fuse.MOST_REGIONS` loops no pair is tried (each walks the graph); the pair's
    values are the same, from two loops."""
    prog = build(KMEANS.format(n=50), 1)
    rng = np.random.default_rng(9)
    values = {"P": rng.normal(size=(50, 2)), "C": rng.normal(size=(3, 2))}
    want = prog.grad_and_hessian_diagonal(values, wrt=["C"], backend="cpu")
    monkeypatch.setattr(fuse, "MOST_REGIONS", 1)
    graph = sparsity.hessian_diagonal(prog.graph, "f", ["C"], with_grad=True)
    assert _regions(graph) == 2 and fuse.fuse_siblings(graph) is graph
    again = build(KMEANS.format(n=50), 1)  # a program of its own: its graphs not kept
    got = again.grad_and_hessian_diagonal(values, wrt=["C"], backend="cpu")
    assert agree(got[0], want[0]) and agree(got[1], want[1])
