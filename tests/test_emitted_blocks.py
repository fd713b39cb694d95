"""What a loop's derivative reads and writes in blocks, not element by element
(backends/llvm_loops.py): a stream of constants (the seeds of one colour of a Hessian's
diagonal, 1.0 and 0.0 by turns) is a table the loop reads in place, and an output whose
elements are one loop's values at a step (the diagonal's even elements from one colour's
sweep, its odd ones from the other's) is copied by a loop. Before, 20,000 columns were
140,000 lines of IR and 23 s of LLVM. The values must not change: each program's diagonal
and sparse Hessian against the numpy interpreter and the dense Hessian, at sizes that
take the blocks and below them."""

from __future__ import annotations

import re
from itertools import pairwise
from types import SimpleNamespace

import numpy as np
import pytest
from draws import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.backends import cpu, llvm, llvm_gather, native
from diffdsl.backends.llvm_blocks import blocks_of, nests, strided_copies
from diffdsl.graph.ir import Builder, Port

PROGRAMS = {  # the Hessian's pattern takes two colours, for the diagonal
    "pairs": "input x[{n}]\noutput f = sum(exp(x[2 * i] / x[2 * i + 1]) for i in range({n} // 2))",
    "triples": "input x[{n}]\noutput f = sum(x[3 * i] * x[3 * i + 1] ** 2 - cos(x[3 * i + 2]) "
               "* x[3 * i] for i in range({n} // 3))",
}


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("n", [6, 30, 3000])
def test_the_diagonal_and_sparse_hessian_keep_their_values(name, n):
    n -= n % 6
    prog = diffdsl.compile(PROGRAMS[name].format(n=n), cache=False)
    x = np.random.default_rng(n).uniform(0.5, 1.5, n)
    want = prog.hessian(x=x, diagonal=True, backend="numpy")["x"]
    got = prog.hessian(x=x, diagonal=True, backend="cpu")["x"]
    np.testing.assert_allclose(got, want, rtol=1e-13)
    sparse = prog.hessian(x=x, sparse=True, backend="cpu")
    np.testing.assert_allclose(sparse.diagonal(), want, rtol=1e-13)
    if n <= 30:
        np.testing.assert_allclose(prog.hessian(x=x, backend="cpu")["x"]["x"],
                                   sparse.toarray(), rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_diagonals_kernel_does_not_grow_with_the_columns(name):
    lines = []
    for n in (3000, 30000):
        prog = diffdsl.compile(PROGRAMS[name].format(n=n), cache=False)
        graph = prog.derivative("hessian_diagonal", wrt=["x"], value=False)
        text, _ = cpu.emit(graph, "float64")
        body = [line for line in text.split("\n") if not line.startswith("@")]  # not tables
        lines.append(sum("store " in line for line in body))
    assert lines[1] <= lines[0] + 100, lines  # not a store per column


def _copied(copies) -> list:
    """Every (port, element, region, value) the copies write, in the order they write them."""
    return [(k, e + q * de + m * step + c, r, v + q * dv + m * by + c)
            for k, e, r, v, count, (step, by, width), (runs, de, dv) in copies
            for q in range(runs) for m in range(count) for c in range(width)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40), st.integers(0, 1),
                          st.integers(0, 40), st.integers(1, 3), st.integers(-3, 3),
                          st.integers(-3, 3), st.integers(1, 2)), max_size=12))
def test_strided_copies_alike_but_where_they_start_are_one_nest(copies):
    """`nests` joins a run of strided copies that differ only in their first element and
    value, each the last's plus the same amounts (a matrix's rows, each a column of a loop's
    values): the same writes in the same order, and no two neighbours it leaves apart could
    have been joined."""
    strided = list(copies)
    joined = nests(strided)
    assert _copied(joined) == _copied([(k, e, r, v, n, (st_, by, w), (1, 0, 0))
                                       for k, e, r, v, n, st_, by, w in strided])
    assert sum(runs for *_, (runs, _, _) in joined) == len(strided)
    for (k, e, r, v, n, steps, (runs, de, dv)), nxt in pairwise(joined):
        last = (e + (runs - 1) * de, v + (runs - 1) * dv)
        alike = (k, r, n, steps) == (nxt[0], nxt[2], nxt[4], nxt[5])
        assert not (alike and (runs == 1 or (nxt[1] - last[0], nxt[3] - last[1]) == (de, dv)))


def test_a_gradient_by_a_matrix_read_by_columns_is_copied_by_one_nest(monkeypatch):
    """The gradient of a loop nest whose inner loop reads a column of B[140, 66] is 140
    strided copies of 66 values, one for each row of B. As 140 loops, LLVM's unroller wrote
    them out into one block of 37,000 instructions, and the kernel was optimised twice (9 s,
    against 1 s now); as one nest it is optimised once, and its values are the interpreter's."""
    source = ("const n = 66\nconst m = 140\ninput B[m, n]\ninput v[m]\n"
              "output y = sum(tanh(sum(B[j, i] * v[j] for j in range(m))) ** 2 "
              "for i in range(n))\n")
    prog = diffdsl.compile(source, cache=False)
    asked, optimize = [], native._optimize_loops
    monkeypatch.setattr(native, "_optimize_loops", lambda module, tm, unroll=True:
                        asked.append(unroll) or optimize(module, tm, unroll))
    rng = np.random.default_rng(5)
    point = {"B": rng.normal(size=(140, 66)), "v": rng.normal(size=140)}
    got, want = prog.grad(point, backend="cpu"), prog.grad(point, backend="numpy")
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-14)
    assert asked and all(asked)  # never again without unrolling


SCAN = ("input a\ninput x[{n}]\ns = 0.0 * a\nfor i in range({n}) {{\n"
        "    s = s + exp(-s * a + x[i]) * 1e-3\n}}\noutput s")


def test_a_reverse_scans_cotangents_are_copied_in_reverse_blocks():
    """A scan's gradient by the input it reads a step at a time: step i's cotangent is the
    reverse loop's value at iteration n - 1 - i, so the output's elements are that loop's
    values at a step of -1. They are copied by one loop (it used to be a store per element,
    after a search for runs that took time quadratic in them: 100,000 steps never finished),
    and they are the numpy interpreter's."""
    stores = []
    for n in (2000, 8000):
        prog = diffdsl.compile(SCAN.format(n=n), cache=False)
        x = np.random.default_rng(n).normal(size=n)
        got = prog.grad(a=0.3, x=x, backend="cpu")
        want = prog.grad(a=0.3, x=x, backend="numpy")
        for name in ("a", "x"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-300)
        text, _ = cpu.emit(prog.derivative("grad", of="s", wrt=["a", "x"]), "float64")
        stores.append(text.count("store "))
    assert stores[1] <= stores[0] + 100, stores  # not a store per step


def _runs_by_search(graph, ids, covered, least):
    """strided_copies' rule by its first, quadratic search (over the same blocks): from each
    block not yet in a run,
    the longest run of blocks at one step and stride, taken if it is long enough and its
    blocks do not overlap."""
    by_region = {}
    for e, i in enumerate(ids):
        if graph.nodes[i].op == "part" and not covered[e]:
            by_region.setdefault(graph.nodes[i].args[0], []).append((e, graph.nodes[i].attr))
    found = []
    for r, pairs in by_region.items():
        blocks = blocks_of(pairs)
        k = 0
        while k + 1 < len(blocks):
            (e, v, w), m = blocks[k], 2
            step, by = blocks[k + 1][0] - e, blocks[k + 1][1] - v
            while k + m < len(blocks) and blocks[k + m][2] == w and \
                    blocks[k + m][0] - blocks[k + m - 1][0] == step and \
                    blocks[k + m][1] - blocks[k + m - 1][1] == by:
                m += 1
            if blocks[k + 1][2] == w and m * w >= least and abs(by) >= w:
                found.append((e, r, v, m, step, by, w))
                covered[[e + q * step + c for q in range(m) for c in range(w)]] = True
                k += m
            else:
                k += 1
    return found


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(-4, 4),
                          st.integers(1, 6), st.booleans()), min_size=1, max_size=12),
       st.integers(1, 8))
def test_runs_of_blocks_are_the_quadratic_searchs(pieces, least):
    """Outputs made of pieces (a region, a block width, a stride, a count, a gap before):
    the linear search finds the runs the quadratic one did, and they hold the values."""
    nodes, ids, seen = [SimpleNamespace(op="x", args=(), attr=0)], [], {}
    for r, w, by, count, gap in pieces:
        if gap:
            ids.append(0)
        start = seen.get(r, 0) + (max(0, -by) * count + w if by < 0 else 0)
        for q in range(count):
            for c in range(w):
                nodes.append(SimpleNamespace(op="part", args=(r,), attr=start + q * by + c))
                ids.append(len(nodes) - 1)
        seen[r] = start + abs(by) * count + 2 * w
    graph = SimpleNamespace(nodes=nodes)
    mine, theirs = np.zeros(len(ids), bool), np.zeros(len(ids), bool)
    found = strided_copies(graph, ids, mine, least)
    assert found == _runs_by_search(graph, ids, theirs, least)
    assert np.array_equal(mine, theirs)
    for e, r, v, m, step, by, w in found:
        for q in range(m):
            for c in range(w):
                node = nodes[ids[e + q * step + c]]
                assert (node.args[0], node.attr) == (r, v + q * by + c)


@settings(max_examples=examples(20), deadline=None)
@given(places=st.lists(st.integers(0, 700), min_size=1, max_size=40), data=st.data())
def test_segments_count_the_stores_a_node_makes(places, data):
    """A segment holds about SEGMENT instructions: a node counts one, and one more for each
    output element stored from it there. The segments tile the nodes in order, each within
    SEGMENT but for its last node's stores; the values are the reference interpreter's."""
    b = Builder()
    x = [b.input("x", k) for k in range(3)]
    nodes, ids = [], []
    for k, count in enumerate(places):
        node = b.op("mul", x[k % 3], b.op("add", x[(k + 1) % 3], b.const(float(k))))
        nodes.append(node)
        ids += [node] * count
    ids = data.draw(st.permutations(ids)) if ids else [nodes[0]]
    graph = b.graph({"x": Port((3,), tuple(x))}, {"y": Port((len(ids),), tuple(ids))})
    plan = llvm._Layout(graph)
    assert plan.segments[0][0] == 0 and plan.segments[-1][1] == len(graph.nodes)
    assert all(a < b_ and b_ == c for (a, b_), (c, _) in pairwise(plan.segments))
    for start, stop in plan.segments:  # what comes before its last node is under SEGMENT
        assert sum(1 + len(plan.stores.get(i, ())) for i in range(start, stop - 1)) < llvm.SEGMENT
    prog = diffdsl.Program(graph, cache=False)
    point = np.array([0.5, -1.5, 2.0])
    np.testing.assert_array_equal(prog(x=point, backend="cpu"), prog(x=point, backend="numpy"))


KINDS = ["0.0", "1.5", "x[{j}]", "sin(x[{j}]) * a", "x[{j}] * x[{k}]"]


@settings(max_examples=8, deadline=None)
@given(st.integers(65, 600), st.lists(st.integers(0, 4), min_size=len(KINDS),
                                      max_size=len(KINDS)), st.integers(0, 2**16))
@example(m=500, weights=[0, 0, 0, 4, 1], seed=4)  # values held in the scratch: a loop
@example(m=300, weights=[4, 0, 1, 1, 0], seed=1)  # mostly zeros: a table
def test_scattered_streams_are_gathered_by_tables_and_loops(m, weights, seed):
    """A loop reading a vector written out element by element, whose elements are constants,
    input elements and values computed before it, in any mix: its stream is gathered with
    a table of the constants and a loop over where the values lie (llvm_gather), not an
    instruction pair per element, and the values and gradient are the interpreter's."""
    rng = np.random.default_rng(seed)
    odds = np.array(weights, dtype=float) + 1e-3
    kinds = rng.choice(KINDS, size=m, p=odds / odds.sum())
    items = [k.format(j=rng.integers(0, 500), k=rng.integers(0, 500)) for k in kinds]
    source = (f"input x[500]\ninput a\ninput w[{m}]\nv = [{', '.join(items)}]\n"
              f"output s = sum(v[i] * w[i] + v[i] ** 2 for i in range({m}))\n")
    prog = diffdsl.compile(source, cache=False)
    assert any(node.op == "region" for node in prog.graph.nodes)
    point = {"x": rng.uniform(0.5, 1.5, 500), "a": 0.7, "w": rng.normal(size=m)}
    for name, want in prog.evaluate(point, backend="numpy").items():
        np.testing.assert_allclose(prog.evaluate(point, backend="cpu")[name], want, rtol=1e-13)
    want = prog.grad(point, backend="numpy")
    for name, got in prog.grad(point, backend="cpu").items():
        np.testing.assert_allclose(got, want[name], rtol=1e-12, atol=1e-14)
    text, _ = cpu.emit(prog.graph, "float64")
    graph = prog.graph
    (i,) = [i for i, node in enumerate(graph.nodes) if node.op == "region"]
    region = graph.nodes[i].attr  # streams: v's elements, then w read in place
    args = graph.nodes[i].args[region.captures:region.captures + region.taken(0)]
    constants = sum(graph.nodes[a].op == "const" for a in args)
    if constants == len(args):  # a table the loop reads in place
        assert f"@r{i}s0 = private" in text and f"%r{i}s0." not in text
        return
    held = sum(graph.nodes[a].op != "const" and llvm_gather.place(graph, llvm._Layout(graph), a)
               is not None for a in args)
    assert (f"@r{i}s0.k = private" in text) == (constants >= llvm_gather.TABLE_FROM)
    assert (f"@r{i}s0.at = private" in text) == (held >= llvm_gather.LOOP_FROM)
    stored = len(re.findall(rf"store double \S+, ptr %r{i}s0\.\d+\n", text))  # one by one
    assert stored == len(args) - constants * (constants >= llvm_gather.TABLE_FROM) \
        - held * (held >= llvm_gather.LOOP_FROM)
