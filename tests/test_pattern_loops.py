"""Hessian patterns and diagonals of programs whose loops stay loops (graph/pattern_walk.py,
sparsity.hessian_diagonal): the pattern read through a loop's body, walked once, is the
pattern of the loop written out on known shapes and holds every nonzero of the dense Hessian
on the fuzzer's programs; the sparse Hessian and the diagonal from a colouring of it equal
the dense Hessian's, loops kept (`unroll=1`) and written out."""

from __future__ import annotations

import numpy as np
import pytest
from fuzzing import programs
from hypothesis import HealthCheck, given, settings
from test_regions_fuzz import build
from test_sparse import assert_same, dense_hessian, point

from diffdsl.graph import colouring, sparsity
from diffdsl.graph.loops import has_regions

KMEANS = """const n = {n}
const k = 3
const d = 2
input P[n, d]
input C[k, d]
def dist2(p, c) = sum((p - c) ** 2)
output f = sum(min([dist2(P[i], C[j]) for j in range(k)]) for i in range(n))
"""

SHAPES = {
    "chain": "input x[{n}]\noutput f = sum((x[i] * x[i + 1] - 1) ** 2 for i in range({n} - 1))",
    "scaled": "input x[{n}]\ninput a\noutput f = sum(exp(a * x[i]) for i in range({n}))",
    "separable": "input x[{n}]\noutput f = sum(x[i] ** 4 - cos(x[i]) for i in range({n}))",
    "pairs": "input x[{n}]\noutput f = sum(x[2 * i] / x[2 * i + 1] for i in range({n} // 2))",
    "kmeans": KMEANS,
    "nested": "input X[{n}, 3]\ninput w[3]\n"
              "output f = sum(sum(X[i, j] * w[j] for j in range(3)) ** 2 for i in range({n}))",
}


@pytest.mark.parametrize("name", SHAPES)
def test_the_pattern_through_a_loop_is_the_pattern_written_out(name):
    source = SHAPES[name].format(n=80)
    kept, written = build(source, 1), build(source, 10**9)
    assert has_regions(kept.graph) and not has_regions(written.graph)
    got = sparsity.hessian_pattern(kept.graph, "f")
    want = sparsity.hessian_pattern(written.graph, "f")
    assert got.shape == want.shape
    assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)


@pytest.mark.parametrize("name", SHAPES)
def test_diagonals_and_sparse_hessians_through_loops(name):
    source = SHAPES[name].format(n=80)
    rng = np.random.default_rng(5)
    for unroll in (1, 10**9):
        prog = build(source, unroll)
        values = point(prog, rng, -1.5, 1.5)
        dense = dense_hessian(prog, values, "f", list(prog.inputs))
        assert_same(prog.hessian(values, of="f", sparse=True), dense,
                    prog.sparsity(of="f", hessian=True))
        diag = prog.hessian(values, of="f", diagonal=True)
        flat = np.concatenate([np.ravel(diag[k]) for k in prog.inputs])
        np.testing.assert_allclose(flat, np.diag(dense), rtol=1e-12, atol=1e-12)


def test_the_kmeans_diagonal_is_one_sweep_with_its_loop_kept():
    """A separable objective's diagonal is one forward sweep over the points, whatever the
    number of centroids' coordinates: 2 times the points nearest each centroid."""
    prog = build(KMEANS.format(n=300), 1)
    pattern = sparsity.hessian_pattern(prog.graph, "f", ["C"])
    assert pattern.nnz == 6 and np.array_equal(pattern.indices, np.arange(6))
    assert colouring.diagonal_colouring(pattern).tolist() == [0] * 6
    graph = prog.derivative("hessian_diagonal", of="f", wrt=["C"])
    assert has_regions(graph)
    rng = np.random.default_rng(2)
    P, C = rng.random((300, 2)), rng.random((3, 2))
    nearest = ((P[:, None, :] - C[None]) ** 2).sum(-1).argmin(1)
    want = 2.0 * np.repeat(np.bincount(nearest, minlength=3)[:, None], 2, axis=1)
    np.testing.assert_array_equal(prog.hessian(P=P, C=C, wrt=["C"], diagonal=True)["C"], want)


def test_a_colouring_for_the_diagonal_keeps_neighbours_apart():
    """Column k shares its colour with no column in its own row; other rows may repeat
    colours (a tridiagonal pattern takes 2 colours, where columns sharing any row take 3)."""
    n = 9
    rows = [k for k in range(n) for _ in (k - 1, k, k + 1) if 0 <= _ < n]
    cols = [j for k in range(n) for j in (k - 1, k, k + 1) if 0 <= j < n]
    tri = colouring.Pattern.from_entries((n, n), rows, cols)
    colours = colouring.diagonal_colouring(tri)
    for k in range(n):
        row = tri.indices[tri.indptr[k]:tri.indptr[k + 1]]
        assert all(colours[j] != colours[k] for j in row if j != k)
    assert colours.max() + 1 == 2
    assert colouring.column_colouring(tri).max() + 1 == 3
    empty = colouring.Pattern.from_entries((3, 3), [0], [0])
    assert colouring.diagonal_colouring(empty).tolist() == [0, -1, -1]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=programs(mutate=False))
def test_fuzzed_programs_with_loops_kept(source):
    """The fuzzer's programs with every loop kept: the sparse Hessian is the dense one within
    the pattern read through the loops, and the diagonal is the dense one's."""
    prog = build(source, 1)
    if isinstance(prog, type) or int(np.prod(prog.outputs["y"])) != 1:
        return
    rng = np.random.default_rng(len(source))
    values = {n: rng.normal(size=s) for n, s in prog.inputs.items()}
    wrt = list(prog.inputs)
    dense = dense_hessian(prog, values, "y", wrt)
    assert_same(prog.hessian(values, of="y", sparse=True), dense,
                prog.sparsity(of="y", hessian=True))
    diag = prog.hessian(values, of="y", diagonal=True)
    flat = np.concatenate([np.ravel(diag[k]) for k in wrt])
    np.testing.assert_allclose(flat, np.diag(dense), rtol=1e-9, atol=1e-9, equal_nan=True)


def test_a_scan_kept_as_a_loop_gets_a_sweep_per_column():
    """A state carried over 2,000 iterations is not walked once (its pattern would write the
    loop out): the diagonal takes one sweep per column over the loop kept, as the dense
    Hessian's."""
    source = ("input x[3]\ns = x[1]\nfor i in range(2000) {\n    s = s * 0.5 + sin(x[0] * s + 1)\n"
              "}\noutput f = s * x[0] + x[2] ** 3")
    prog = build(source, 64)
    assert has_regions(prog.graph) and len(prog.graph.nodes) < 100
    x = np.array([0.3, 0.2, 0.1])
    dense = prog.hessian(x=x)["x"]["x"]
    diag = prog.hessian(x=x, diagonal=True)["x"]
    np.testing.assert_allclose(diag, np.diag(dense), rtol=1e-12)
