"""Reductions of a comprehension kept as one loop (`min([f(j) for j in range(k)])` as the
generator `min(f(j) for j in range(k))`), the guards a pullback computes only where they are
read, and the loop code that copies captures and adds sums in blocks: each, on both
backends, against the program written out (`unroll` past every loop) on the reference
interpreter, and against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from draws import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.backends import llvm, llvm_loops
from diffdsl.graph import sparsity
from diffdsl.graph.loops import has_regions
from diffdsl.language.lower import mapped

WRITTEN_OUT = 10**9


def build(source: str, unroll: int | None = None):
    if unroll is None:
        return diffdsl.compile(source, cache=False)
    with diffdsl.limits.using(unroll=unroll):
        return diffdsl.compile(source, cache=False)


def ops_of(graph, found=None) -> dict:
    """How many nodes of each op a graph holds, its regions' bodies counted too."""
    found = {} if found is None else found
    for node in graph.nodes:
        found[node.op] = found.get(node.op, 0) + 1
        if node.op == "region":
            ops_of(node.attr.body, found)
    return found


def combines(graph) -> set:
    kinds = set()
    for node in graph.nodes:
        if node.op == "region":
            kinds |= set(node.attr.combine) | combines(node.attr.body)
    return kinds


NUMPY = {"sum": np.sum, "mean": np.mean, "min": np.min, "max": np.max}


@pytest.mark.parametrize("fn", sorted(NUMPY))
def test_a_reduction_of_a_comprehension_is_one_loop(fn):
    source = (f"input x[200]\ninput c\n"
              f"output y = {fn}([sin(x[j] * c) + j / 50 for j in range(200)])\n")
    kept, out = build(source), build(source, WRITTEN_OUT)
    ops = ops_of(kept.graph)
    assert has_regions(kept.graph) and ops.get("min", 0) + ops.get("max", 0) == 0, ops
    assert ops.get("part") == 1, ops  # one value out of the loop, not 200
    rng = np.random.default_rng(1)
    point = {"x": rng.normal(size=200), "c": 0.7}
    want = NUMPY[fn](np.sin(point["x"] * 0.7) + np.arange(200) / 50)
    for backend in ("numpy", "cpu"):
        got = kept.evaluate(point, backend=backend)["y"]
        assert got == pytest.approx(want, rel=1e-13, abs=1e-13)
        assert got == pytest.approx(out.evaluate(point, backend="numpy")["y"], rel=1e-14,
                                    abs=1e-14)
        g, h = kept.grad(point, backend=backend), out.grad(point, backend="numpy")
        for name in ("x", "c"):
            np.testing.assert_allclose(g[name], h[name], rtol=1e-12, atol=1e-13)


def test_logsumexp_of_a_large_comprehension_computes_each_item_once():
    """logsumexp's loop form would lower the item twice (its max, then its shifted sum), so
    a comprehension whose body is past the fusion limit (`mapped.FUSED` nodes) stays one map
    loop whose values are folded: the item's `sin` is in one loop body, once. (A smaller
    body is built into both loops: test_mapped.py.)"""
    terms = " + ".join(f"cos(x[j] * {k + 2})" for k in range(mapped.FUSED // 2))
    source = (f"input x[200]\ninput c\n"
              f"output y = logsumexp([sin(x[j] * c) + {terms} for j in range(200)])\n")
    kept = build(source)
    assert ops_of(kept.graph).get("sin") == 1
    point = {"x": np.linspace(-2, 2, 200), "c": 0.7}
    v = np.sin(point["x"] * 0.7) + sum(np.cos(point["x"] * (k + 2))
                                       for k in range(mapped.FUSED // 2))
    assert kept.evaluate(point)["y"] == pytest.approx(
        np.max(v) + np.log(np.sum(np.exp(v - np.max(v)))), rel=1e-13)


def test_a_comprehension_of_arrays_is_still_listed():
    """`sum([row for ...])` of vectors sums every element: not the generator's sum of
    arrays, so the list is made as before."""
    source = ("input x[100]\ninput v[3]\n"
              "output y = sum([x[j] * v for j in range(100)]) + max([v * j for j in range(70)])\n")
    kept, out = build(source), build(source, WRITTEN_OUT)
    point = {"x": np.linspace(-1, 1, 100), "v": np.array([0.5, -2.0, 3.0])}
    want = np.sum(point["x"][:, None] * point["v"]) + np.max(np.outer(np.arange(70), point["v"]))
    assert kept.evaluate(point)["y"] == pytest.approx(want, rel=1e-13)
    for name, g in kept.grad(point).items():
        np.testing.assert_allclose(g, out.grad(point)[name], rtol=1e-12, atol=1e-14)


def kmeans(k: int, n: int = 300, d: int = 3) -> str:
    return (f"input P[{n}, {d}]\ninput C[{k}, {d}]\n"
            "def dist2(p, c) = sum((p - c) ** 2)\n"
            f"output cost = sum(min([dist2(P[i], C[j]) for j in range({k})]) "
            f"for i in range({n}))\n")


def test_kmeans_is_the_same_graph_at_any_k():
    """The loop over centroids is a min-combined loop inside the loop over points: the body
    does not grow with k (before, it held k - 1 min nodes and the pullback's chain of
    selects, k · d nodes)."""
    small, large = build(kmeans(100)), build(kmeans(1000))
    body = {op: c for op, c in ops_of(small.graph).items() if op not in ("input", "part")}
    assert body == {op: c for op, c in ops_of(large.graph).items()
                    if op not in ("input", "part")}
    grad = small.derivative("grad", wrt=["C"])
    assert "max" not in combines(grad)  # no guard indicators: C's elements are inputs


@pytest.mark.parametrize("k", [70, 130])
def test_kmeans_gradient_and_newton_step(k):
    rng = np.random.default_rng(k)
    P, C = rng.random((300, 3)), rng.random((k, 3))
    prog = build(kmeans(k))
    D = ((P[:, None, :] - C[None]) ** 2).sum(-1)
    a = D.argmin(1)
    want = np.zeros_like(C)
    np.add.at(want, a, 2 * (C[a] - P))
    count = np.bincount(a, minlength=k)
    for backend in ("numpy", "cpu"):
        assert prog.evaluate({"P": P, "C": C}, backend=backend)["cost"] == pytest.approx(
            D.min(1).sum(), rel=1e-13)
        got = prog.grad({"P": P, "C": C}, wrt=["C"], backend=backend)["C"]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        diag = prog.hessian({"P": P, "C": C}, wrt=["C"], diagonal=True, backend=backend)["C"]
        np.testing.assert_array_equal(diag, 2.0 * count[:, None] * np.ones((1, 3)))


def test_guards_are_kept_where_a_pullback_reads_them():
    """sqrt(c[j]) has an infinite partial at c[j] = 0; that centroid never wins, so its
    cotangent is exactly 0 and its gradient must be 0, not 0 * inf. The captured values
    are a loop's values, not inputs, so the loop's pullback still carries its guards out."""
    source = ("input x[100]\ninput c[70]\nr = [sqrt(c[j]) for j in range(70)]\n"
              "output y = sum(min([(x[i] - r[j]) ** 2 for j in range(70)]) "
              "for i in range(100))\n")
    kept, out = build(source), build(source, WRITTEN_OUT)
    rng = np.random.default_rng(3)
    point = {"x": rng.uniform(5, 6, 100), "c": rng.uniform(1, 40, 70)}
    point["c"][5] = 0.0
    assert "max" in combines(kept.derivative("grad"))
    for backend in ("numpy", "cpu"):
        g = kept.grad(point, backend=backend)
        assert np.all(np.isfinite(g["c"])) and g["c"][5] == 0.0
        np.testing.assert_allclose(g["c"], out.grad(point, backend="numpy")["c"], rtol=1e-12)


@settings(max_examples=examples(6), deadline=None)
@given(width=st.integers(1, 60), fn=st.sampled_from(["sin", "exp", "tanh"]))
def test_loops_with_many_captures_and_sums_match_the_program_written_out(width, fn):
    """A loop capturing `width` inputs in a row, a scalar and the 70 values of a map, and
    the gradient's loop summing that many cotangents: captures in a row are copied and sums
    added in blocks from 16 on (llvm_loops `_pieces`, `_add_runs`), one by one below. The
    CPU's gradient is the written-out program's, and the interpreter's."""
    source = (f"input w[{width}]\ninput a\ninput u[70]\ninput X[80, {width}]\n"
              "input Y[80, 70]\n"
              f"v = [{fn}(u[j] * a) for j in range(70)]\n"
              "output y = sum(tanh(dot(X[i], w) * a + dot(Y[i], v)) for i in range(80))\n")
    kept, out = build(source), build(source, WRITTEN_OUT)
    rng = np.random.default_rng(width)
    point = {"w": rng.normal(size=width) / width, "a": 0.3, "u": rng.normal(size=70) / 9,
             "X": rng.normal(size=(80, width)), "Y": rng.normal(size=(80, 70)) / 9}
    graph = kept.derivative("grad")
    plan = llvm._Module("float64").function(graph, "")  # the layout, regions placed
    blocks = {m for node in graph.nodes if node.op == "region"
              for _, m, run in llvm_loops._pieces(graph, plan, node.args[:node.attr.captures])
              if run is not None}
    assert 70 in blocks and (width in blocks) == (width >= llvm_loops.COPY_RUN), blocks
    want = out.grad(point, backend="numpy")
    for backend in ("cpu", "numpy"):
        got = kept.grad(point, backend=backend)
        for name in got:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-13, atol=1e-15)


def test_the_hessian_diagonal_carries_no_guards_to_its_outputs():
    """The Hessian's diagonal is the tangent of the gradient's loop, whose values are only
    outputs: no node reads their guards, so the tangent loop computes none (it did: an
    indicator and a max per centroid coordinate, 32 ms a call at k = 100 where it is now
    about as long as the gradient)."""
    hd = build(kmeans(100)).derivative("hessian_diagonal", wrt=["C"])
    assert "max" not in combines(hd), combines(hd)


def test_forward_guards_are_kept_where_a_node_reads_them():
    """max(x[i], 0) over x <= 0 is 0 with a tangent exactly 0 (no branch carries one), and
    cbrt's partial at 0 is infinite: the loop's tangent carries its guard to cbrt, whose
    tangent is then 0, not 0 * inf, in forward mode as in reverse."""
    source = ("input x[70]\ninput a\n"
              "output y = cbrt(sum(max(x[i], 0) for i in range(70))) + a\n")
    kept, out = build(source), build(source, WRITTEN_OUT)
    point = {"x": -np.linspace(0.5, 2.0, 70), "a": 1.0}
    for backend in ("numpy", "cpu"):
        for mode in ("forward", "reverse"):
            jk = kept.jacobian(point, mode=mode, backend=backend)
            jo = out.jacobian(point, mode=mode, backend="numpy")
            for name in jk:
                assert np.all(np.isfinite(jk[name])), (backend, mode, name)
                np.testing.assert_array_equal(jk[name], jo[name])


def test_a_short_min_inside_a_loop_is_a_loop_too():
    """Inside a loop kept as a loop, a min or max of more than an eighth of the `unroll`
    limit (8 items of 64) is kept as a loop: k-means with k = 10 has the same graph shape
    as with k = 1,000, and the gradient and Newton step of the written-out program. At the
    top level, and for sums, short loops are still written out."""
    prog, out = build(kmeans(10)), build(kmeans(10), WRITTEN_OUT)
    assert "min" in combines(prog.graph) and "min" not in ops_of(prog.graph)
    assert "min" in ops_of(out.graph)
    rng = np.random.default_rng(10)
    point = {"P": rng.random((300, 3)), "C": rng.random((10, 3))}
    for backend in ("numpy", "cpu"):
        np.testing.assert_allclose(prog.grad(point, backend=backend)["C"],
                                   out.grad(point, backend="numpy")["C"], rtol=1e-13)
        np.testing.assert_array_equal(
            prog.hessian(point, wrt=["C"], diagonal=True, backend=backend)["C"],
            out.hessian(point, wrt=["C"], diagonal=True, backend="numpy")["C"])
    top = build("input x[10]\noutput y = min([x[j] * 2 for j in range(10)])\n")
    assert not has_regions(top.graph)
    summed = build("input P[100, 3]\ninput c[10]\n"
                   "output y = sum(sum([P[i, 0] * c[j] for j in range(10)]) for i in range(100))\n")
    (outer,) = [node for node in summed.graph.nodes if node.op == "region"]
    assert not has_regions(outer.attr.body)  # the sum of 10 items is written out


def gates_of(graph, found=None) -> list:
    """`llvm_loops.gate` of every region of a graph, its regions' bodies' too."""
    found = [] if found is None else found
    for node in graph.nodes:
        if node.op == "region":
            found.append(llvm_loops.gate(node.attr))
            gates_of(node.attr.body, found)
    return found


def test_a_min_pullback_runs_the_winning_iteration_alone():
    """The pullback of k-means' min over the centroids is 0 in every iteration but the
    winner's: the CPU loop runs that one (`llvm_loops.gate`), in the gradient and in the
    Hessian diagonal's tangent of it; the forward loops are not gated."""
    prog = build(kmeans(100))
    assert set(gates_of(prog.graph)) == {None}
    for kind in ("grad", "hessian_diagonal"):
        graph = prog.derivative(kind, wrt=["C"])
        assert any(g is not None for g in gates_of(graph)), kind


@pytest.mark.parametrize("c", [0.0, 7.0, 99.0, 7.5, -1.0, 100.0, 1e300, np.nan, np.inf,
                               -0.0, 2.0**63])
def test_a_gated_loop_matches_the_interpreter_at_any_index(c):
    """`if i == c` in a loop: its values and gradient are 0 but in iteration c, which the
    CPU loop runs alone where c is a whole number in range, and none where it is not
    (fractional, out of range, infinite, NaN)."""
    source = ("input x[100]\ninput c\n"
              "y = [if i == c then x[i] * 2 else 0 for i in range(100)]\n"
              "output s = sum(if c == i then x[i] ** 2 else 0 for i in range(100))\n"
              "output m = y\noutput t = sum(y * x)\n")
    prog = build(source)
    assert any(g is not None for g in gates_of(prog.graph))
    point = {"x": np.linspace(-1.0, 1.0, 100), "c": c}
    got, want = (prog.evaluate(point, backend=b) for b in ("cpu", "numpy"))
    hit = c == int(c) and 0 <= c < 100 if np.isfinite(c) else False
    expected = np.where(np.arange(100) == c, 2 * point["x"], 0.0)
    np.testing.assert_array_equal(got["m"], expected)
    assert got["s"] == (point["x"][int(c)] ** 2 if hit else 0.0)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    for of in ("s", "t"):
        g_cpu = prog.grad(point, of=of, backend="cpu")
        g_ref = prog.grad(point, of=of, backend="numpy")
        for name in g_ref:
            np.testing.assert_array_equal(g_cpu[name], g_ref[name])


def test_the_hessian_diagonal_reads_the_data_in_place():
    """The Newton step is taken by the centroids: the points stay one array node, read where
    they lie (not 300 · 3 element nodes), and the 1.0 seeds of the colour's columns are
    stored into the loop's captures by a loop, not a store each."""
    prog = build(kmeans(70))
    graph = prog.derivative("hessian_diagonal", wrt=["C"])
    named = [node.attr[0] for node in graph.nodes if node.op in ("input", "array")]
    assert named.count("P") == 1 and "C" in named, named
    plan = llvm._Layout(graph)
    runs = [run for node in graph.nodes if node.op == "region"
            for _, m, run in llvm_loops._pieces(graph, plan, node.args[:node.attr.captures])
            if run is not None and run[0] == "const" and m >= 70 * 3]
    assert runs == [("const", 1.0)], runs
    # and the sparse Hessian's pattern and compressed graph read them in place too
    assert sparsity.hessian_pattern(prog.graph, "cost", ["C"]).shape == (210, 210)
    compressed = sparsity.compressed_hessian(prog.graph, "cost", ["C"], [[0, 1]])
    named = [node.attr[0] for node in compressed.nodes if node.op in ("input", "array")]
    assert named.count("P") == 1, named


@settings(max_examples=examples(12), deadline=None)
@given(shift=st.integers(0, 3), power=st.integers(2, 3), n=st.integers(70, 90))
def test_forward_mode_reads_data_in_place_at_any_window(shift, power, n):
    """Data no derivative is taken by (y, read at i and at i + shift: windows that overlap)
    stays in place through forward mode too: jvp, hvp and the Hessian's diagonal by x match
    the program written out."""
    source = (f"input x[{n}]\ninput y[{n + 3}]\n"
              f"output f = sum(sin(x[i]) ** {power} * y[i] + x[i] * y[i + {shift}] * x[i]"
              f" for i in range({n}))\n")
    kept, out = build(source), build(source, WRITTEN_OUT)
    rng = np.random.default_rng(n + shift)
    point = {"x": rng.normal(size=n), "y": rng.normal(size=n + 3)}
    tangent = {"x": rng.normal(size=n)}
    for backend in ("numpy", "cpu"):
        np.testing.assert_allclose(kept.jvp(tangent, point, backend=backend),
                                   out.jvp(tangent, point, backend="numpy"), rtol=1e-12)
        np.testing.assert_allclose(kept.hvp(tangent, point, wrt=["x"], backend=backend)["x"],
                                   out.hvp(tangent, point, wrt=["x"], backend="numpy")["x"],
                                   rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(
            kept.hessian(point, wrt=["x"], diagonal=True, backend=backend)["x"],
            out.hessian(point, wrt=["x"], diagonal=True, backend="numpy")["x"],
            rtol=1e-12, atol=1e-14)
