"""Loops that stay loops (DESIGN.md, decision 9): regions against the unrolled reference.

Unrolling every loop (`limits.using(unroll=huge)`) is the reference semantics: each program
here is compiled both ways, and values, gradients, Jacobians, Hessians and jvps must agree on
every backend that runs regions, and with the regions unrolled after the fact (`expand`).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.backends import numpy as reference
from diffdsl.graph import autodiff
from diffdsl.graph.ir import GraphError, Node, verify
from diffdsl.graph.loops import expand, has_regions
from diffdsl.graph.region import Region

UNROLLED = 10**9

PROGRAMS = {
    "overlapping reads": """
const n = 120
input x[n]
input w
output y = sum(sin(w * x[i]) * x[i + 1] for i in range(n - 1))
""",
    "rows of a matrix, a shared vector": """
const n = 90
const d = 3
input X[n, d]
input b[d]
output loss = mean((sum(X[i, j] * b[j] for j in range(d)) - 1) ** 2 for i in range(n))
""",
    "k-means": """
const n = 80
const d = 3
const k = 4
input P[n, d]
input C[k, d]
output cost = sum(min(sum((P[i, j] - C[c, j]) ** 2 for j in range(d)) for c in range(k))
                  for i in range(n))
""",
    "a map, then a sum over it": """
const n = 100
input x[n]
input a
z = [exp(a * x[i]) - x[i] for i in range(n)]
output s = sum(z[i] * z[n - 1 - i] for i in range(n))
output zs = z
""",
    "the index as a real, a stride of two, a def": """
const n = 70
input x[2 * n]
input h
def f(u, v, h) = u * cos(v) + h * u * v
output y = sum(f(x[2 * i], x[2 * i + 1], h) * (i * h) for i in range(n))
""",
    "a dynamic branch in the body": """
const n = 100
input x[n]
output y = sum(if x[i] > 0 then sqrt(x[i]) else x[i] ** 2 for i in range(n))
""",
    "an input read backwards": """
const n = 90
input x[n]
input X[n, 2]
output y = sum(x[n - 1 - i] * x[i] * i + sin(X[n - 1 - i, 1]) * X[i, 0] for i in range(n))
output r = [x[n - 1 - i] ** 2 for i in range(n)]
""",
    "nested regions": """
const n = 66
const m = 65
input A[n, m]
input v[m]
output y = sum(tanh(sum(A[i, j] * v[j] for j in range(m))) for i in range(n))
""",
}


def both(source: str):
    regions = diffdsl.compile(source, cache=False)
    with diffdsl.limits.using(unroll=UNROLLED):
        unrolled = diffdsl.compile(source, cache=False)
    return regions, unrolled


def point(prog, rng, rows=None):
    shape = () if rows is None else (rows,)
    return {name: rng.uniform(0.2, 1.5, size=shape + tuple(s)) for name, s in prog.inputs.items()}


def close(a, b, rtol=1e-11):
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            close(a[k], b[k], rtol)
        return
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    scale = max(1.0, float(np.max(np.abs(b))) if b.size else 1.0)
    np.testing.assert_allclose(a, b, rtol=0, atol=rtol * scale)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_loop_stays_a_loop(name):
    regions, unrolled = both(PROGRAMS[name])
    assert has_regions(regions.graph)
    if name == "nested regions":  # the inner loop reads A's row i: a region in the body
        (outer,) = [n.attr for n in regions.graph.nodes if n.op == "region"]
        assert has_regions(outer.body)
    assert not has_regions(unrolled.graph)
    assert len(regions.graph.nodes) < len(unrolled.graph.nodes)


@pytest.mark.parametrize("backend", ["cpu", "numpy"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_regions_agree_with_unrolling(name, backend):
    regions, unrolled = both(PROGRAMS[name])
    rng = np.random.default_rng(7)
    batch = point(regions, rng, rows=3)
    close(regions(batch, backend=backend), unrolled(batch, backend="numpy"))
    small = sum(np.prod(s, dtype=int) for s in regions.inputs.values()) <= 150
    for of in regions.outputs:
        one = {k: v[1] for k, v in batch.items()}
        if regions.outputs[of] == ():
            close(regions.grad(batch, of=of, backend=backend),
                  unrolled.grad(batch, of=of, backend="numpy"))
        if not small:  # a Hessian or a forward sweep per input of thousands: too slow here
            continue
        if regions.outputs[of] == ():
            close(regions.hessian(one, of=of, backend=backend),
                  unrolled.hessian(one, of=of, backend="numpy"))
        close(regions.jacobian(one, of=of, backend=backend),
              unrolled.jacobian(one, of=of, backend="numpy"))
        close(regions.jacobian(one, of=of, mode="forward", backend=backend),
              unrolled.jacobian(one, of=of, backend="numpy"))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_expanding_the_regions_is_unrolling(name):
    """`expand` writes each region out, the sums added in iteration order: the unrolled
    program's values exactly, and its gradient up to the order of a reverse sweep's sums."""
    regions, unrolled = both(PROGRAMS[name])
    rng = np.random.default_rng(3)
    values = {k: np.reshape(v, -1) for k, v in point(regions, rng).items()}
    flat = expand(regions.graph)
    assert not has_regions(flat)
    close(reference.evaluate(flat, values), reference.evaluate(unrolled.graph, values), 0)
    of = next(iter(regions.outputs))
    grad = expand(autodiff.jacobian(regions.graph, of=of))
    close(reference.evaluate(grad, values),
          reference.evaluate(autodiff.jacobian(unrolled.graph, of=of), values))


def test_gradient_against_finite_differences():
    """An oracle that knows nothing of regions: central differences of the compiled value."""
    regions, _ = both(PROGRAMS["nested regions"])
    rng = np.random.default_rng(1)
    values = point(regions, rng)
    grads = regions.grad(values)
    for name, g in grads.items():
        direction = rng.normal(size=np.shape(values[name]))
        h = 1e-6
        up = dict(values, **{name: values[name] + h * direction})
        down = dict(values, **{name: values[name] - h * direction})
        slope = (regions(up) - regions(down)) / (2 * h)
        assert np.isclose(np.sum(g * direction), slope, rtol=1e-6, atol=1e-8)


def test_body_size_does_not_follow_the_trip_count():
    """The same program at n = 200 and n = 20,000: one body, the same size."""
    sizes = []
    for n in (200, 20_000):
        prog = diffdsl.compile(f"const n = {n}\ninput x[n]\ninput w\n"
                               "output y = sum(exp(w * x[i]) * x[i] for i in range(n))",
                               cache=False)
        (region,) = [node.attr for node in prog.graph.nodes if node.op == "region"]
        sizes.append(len(region.body.nodes))
        grad = autodiff.grad(prog.graph)
        sizes.append(max(len(node.attr.body.nodes) for node in grad.nodes
                         if node.op == "region"))
    assert sizes[0] == sizes[2] and sizes[1] == sizes[3]


IRREGULAR = {
    # A static condition on the index: unrolled semantics lower one branch only, and the
    # other reads x[-1] at i = 0 (NumPy's last element).
    "a branch on the index": ("const n = 80\ninput x[n]\n"
                              "output y = sum(if i == 0 then x[0] else x[i] * x[i - 1] "
                              "for i in range(n))"),
    "a negative index wraps": ("const n = 80\ninput x[n]\n"
                               "output y = sum(x[i - 1] for i in range(n))"),
    "a loop bound from the index": ("const n = 70\ninput x[n]\n"
                                    "output y = sum(sum(x[j] for j in range(i)) "
                                    "for i in range(n))"),
    # found by the region fuzz: 0 / 0 folds to NaN written out; kept as a loop, the select
    # on the index would be dynamic and the builder's 0 / x = 0 would answer 0
    "a static branch on the index, then 0 / 0": (
        "input A[2, 2]\nz = [(if 0 <= k then 0 else A[0, 0]) for k in range(70)]\n"
        "output y = 0 / z[0] + A[0, 1]\n"),
    "a loop index times a static zero": (
        "const n = 80\ninput x[n]\noutput y = sum(x[i] / (i * 0) for i in range(n))"),
}


@pytest.mark.parametrize("name", sorted(IRREGULAR))
def test_irregular_loops_unroll_and_agree(name):
    regions, unrolled = both(IRREGULAR[name])
    rng = np.random.default_rng(5)
    values = point(regions, rng)
    close(regions(values), unrolled(values))
    close(regions.grad(values), unrolled.grad(values))


def test_a_region_reading_past_its_stream_is_refused():
    prog, _ = both(PROGRAMS["overlapping reads"])
    graph = prog.graph
    at = next(i for i, node in enumerate(graph.nodes) if node.op == "region")
    region = graph.nodes[at].attr
    length, stride, offset = region.streams[0]
    bad = Region(region.n, region.body, region.captures, ((length, stride, offset + 1),))
    nodes = list(graph.nodes)
    nodes[at] = Node("region", nodes[at].args, bad)
    broken = type(graph)(tuple(nodes), graph.inputs, graph.outputs)
    with pytest.raises(GraphError, match="read up to element"):
        verify(broken)


@settings(max_examples=40, deadline=None)
@given(stride=st.sampled_from([-3, -2, -1, 1, 2, 3]), offset=st.integers(0, 3),
       width=st.integers(1, 3), n=st.integers(65, 90), power=st.sampled_from(["2", "3", "0.5"]))
def test_generated_reads_agree_with_unrolling(stride, offset, width, n, power):
    """Sums over windows of an input at generated strides and offsets (overlapping when the
    stride is below the width; read backwards where it is negative): values and gradients as
    unrolled."""
    offset += max(0, -stride * (n - 1))  # read backwards: the last iteration reads `offset`
    terms = " + ".join(f"x[{stride} * i + {offset + t}] ** {power}" for t in range(width))
    size = max(offset, offset + stride * (n - 1)) + width
    source = (f"const n = {n}\ninput x[{size}]\ninput c\n"
              f"output y = sum(c * ({terms}) * sin(x[{stride} * i + {offset}]) for i in range(n))")
    regions, unrolled = both(source)
    assert has_regions(regions.graph)
    rng = np.random.default_rng(n)
    values = point(regions, rng)
    close(regions(values), unrolled(values))
    close(regions.grad(values), unrolled.grad(values))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_plan_keeps_its_regions(name):
    """A warm start reads the program's graph from its plan: regions, bodies and all."""
    from diffdsl.runtime.plans import decode, encode
    regions, _ = both(PROGRAMS[name])
    for graph in (regions.graph, autodiff.jacobian(regions.graph, of=next(iter(regions.outputs)))):
        back = decode(json.loads(json.dumps(encode(graph))), PROGRAMS[name])
        assert back.text() == graph.text()
        assert [n.attr.body.text() for n in back.nodes if n.op == "region"] == \
            [n.attr.body.text() for n in graph.nodes if n.op == "region"]


def test_every_command_runs_a_program_with_regions(tmp_path):
    """Formulas, checks, drawings and sparse derivatives take the loops written out."""
    path = tmp_path / "loop.dd"
    path.write_text(PROGRAMS["overlapping reads"])
    x = ",".join(str(0.01 * k) for k in range(120))
    for args in (["diff", str(path), "--wrt", "w"], ["check", str(path)],
                 ["graph", str(path)],
                 ["hessian", str(path), "--sparse", "--inputs", f"x=[{x}]", "w=0.5"]):
        done = subprocess.run([sys.executable, "-m", "diffdsl", *args], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, (args, done.stderr)
    prog = diffdsl.load(str(path))
    assert prog.check(points=1)["ok"]
    values = {"x": np.linspace(0.1, 1.2, 120), "w": 0.5}
    dense = prog.hessian(values)  # blocks by input pair; the sparse one is one matrix
    blocks = [[np.reshape(dense[a][b], (np.size(values[a]), np.size(values[b])))
               for b in ("x", "w")] for a in ("x", "w")]
    np.testing.assert_allclose(prog.hessian(values, sparse=True).toarray(), np.block(blocks),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("source,value", [
    ("const c = prod([2 for i in range(65)])\ninput x\noutput y = c * x", 2.0 ** 65),
    ("const c = sum(sin(i) for i in range(100))\ninput x\noutput y = c * x",
     float(np.sum(np.sin(np.arange(100))))),
    ("const W = [0.5 * k for k in range(80)]\nconst c = sum(W[i] ** 2 for i in range(80))\n"
     "input x\noutput y = c * x", float(np.sum((0.5 * np.arange(80)) ** 2))),
])
def test_a_loop_of_static_values_stays_static(source, value):
    """A loop whose body reads nothing that varies is written out, so that it folds: a
    `const` may hold it."""
    prog = diffdsl.compile(source, cache=False)
    assert not has_regions(prog.graph)
    np.testing.assert_allclose(prog(x=1.0), value, rtol=1e-12)


NESTED = {
    "a row of a matrix": "sum(A[i, j] * v[j] for j in range(m))",
    "a column of a matrix": "sum(B[j, i] * v[j] for j in range(m))",
    "neighbours in a row": "sum(A[i, j] * A[i, j + 1] for j in range(m - 1))",
    "a sliding window": "sum(x[i + j] * v[j] for j in range(m))",
    "two strides": "sum(x[2 * j + i] for j in range(m // 2))",
    "a convolution": "sum(x[i + m - 1 - j] * v[j] for j in range(m))",
    "a row backwards": "sum(A[n - 1 - i, m - 1 - j] * v[j] for j in range(m))",
}


@pytest.mark.parametrize("name", sorted(NESTED))
def test_inner_loops_read_the_outer_loops_window(name):
    """A loop inside a loop, the inner one reading at indices of both: a region in a region's
    body, against both written out."""
    source = (f"const n = 66\nconst m = 140\ninput A[n, m]\ninput B[m, n]\ninput v[m]\n"
              f"input x[n + m]\n"
              f"output y = sum(tanh({NESTED[name]}) ** 2 for i in range(n))\n"
              f"output z = [{NESTED[name]} for i in range(n)]\n")
    regions, unrolled = both(source)
    (outer, _) = [n.attr for n in regions.graph.nodes if n.op == "region"]
    assert has_regions(outer.body)
    rng = np.random.default_rng(11)
    values = point(regions, rng)
    for backend in ("cpu", "numpy"):
        close(regions(values, backend=backend), unrolled(values, backend="numpy"))
        close(regions.grad(values, of="y", backend=backend),
              unrolled.grad(values, of="y", backend="numpy"))
    one = {k: v for k, v in values.items()}
    close(regions.jacobian(one, of="z", wrt="v"), unrolled.jacobian(one, of="z", wrt="v"))


@pytest.mark.parametrize("name", ["overlapping reads", "nested regions",
                                  "an input read backwards"])
def test_cuda_runs_regions_written_out(name):
    """The CUDA backend (Numba's simulator where there is no GPU) takes the loops written
    out: the same values and gradients as the CPU's loops."""
    from diffdsl.backends import cuda
    if not cuda.available():
        pytest.skip("no CUDA device and no simulator")
    regions, _ = both(PROGRAMS[name])
    values = point(regions, np.random.default_rng(2), rows=2)
    close(regions(values, backend="cuda"), regions(values, backend="cpu"))
    of = next(o for o, shape in regions.outputs.items() if shape == ())
    close(regions.grad(values, of=of, backend="cuda"),
          regions.grad(values, of=of, backend="cpu"))



@pytest.mark.parametrize("fn", ["min", "max", "logsumexp"])
@pytest.mark.parametrize("data", ["distinct", "ties", "nan"])
def test_min_max_and_logsumexp_of_a_long_generator(fn, data):
    """A min or max over a loop kept as a loop folds left as the written-out one does (the
    earlier value on a tie, NaN as the op's comparison has it) and sends its derivative to
    the iteration it came from; logsumexp shifts by that max. Against both written out."""
    source = ("const n = 70\ninput x[n]\ninput w\n"
              f"output y = {fn}(sin(w * x[i]) * x[i] for i in range(n)) * w\n")
    regions, unrolled = both(source)
    assert has_regions(regions.graph)
    x = np.random.default_rng(4).normal(size=70)
    if data == "ties":
        x = np.round(x)  # many equal values, several of them the largest
    if data == "nan":
        x[[10, 50]] = np.nan
    values = {"x": x, "w": 0.7}
    for backend in ("cpu", "numpy"):
        close(regions(values, backend=backend), unrolled(values, backend="numpy"))
        close(regions.grad(values, backend=backend), unrolled.grad(values, backend="numpy"))
        if data == "ties" and backend == "cpu":  # second order: slow written out
            close(regions.hessian(values, backend=backend),
                  unrolled.hessian(values, backend="numpy"))
            close(regions.jacobian(values, mode="forward", backend=backend),
                  unrolled.jacobian(values, backend="numpy"))


GUARDED = {
    # after one found by the region fuzz: a select made a map's value exactly 0, and 1 / 0
    # outside (the fuzz's own program branched on the index, which is now written out)
    "a dynamic branch, then a division": (
        "input A[2, 2]\nt0 = [0, 0]\nt0[0] = 1\n"
        "t0 /= [(if A[1, 1] > -10 then 0 else A[0, 0]) for k in range(2)]\n"
        "output y = t0[0]\n"),
    "sqrt outside, max over a loop": (
        "const n = 80\ninput x[n]\ny = sqrt(x)\noutput m = max(y[i] for i in range(n))\n"),
    "a branch in the body, sqrt of the map": (
        "const n = 80\ninput x[n]\nz = [if x[i] > 0.5 then x[i] else 0 for i in range(n)]\n"
        "output s = sum(sqrt(z))\n"),
    "cbrt outside, a branch inside a sum": (
        "const n = 80\ninput x[n]\ny = cbrt(x)\n"
        "output s = sum(if x[i] > 0.5 then y[i] else 1 for i in range(n))\n"),
}


@pytest.mark.parametrize("name", sorted(GUARDED))
def test_a_derivative_a_branch_made_zero_stays_zero_across_a_region(name):
    """Where a select inside a body makes a derivative exactly 0, an infinite partial
    derivative outside the region (sqrt'(0), 1/0) meets the select's guard, carried out of
    the region, not 0 * inf = NaN: as written out, in both modes."""
    source = GUARDED[name]
    with diffdsl.limits.using(unroll=1):
        regions = diffdsl.compile(source, cache=False)
    with diffdsl.limits.using(unroll=UNROLLED):
        unrolled = diffdsl.compile(source, cache=False)
    assert has_regions(regions.graph)
    values = {}
    for input_name, shape in regions.inputs.items():
        values[input_name] = np.linspace(0.0, 1.0, int(np.prod(shape))).reshape(shape)
    for backend in ("cpu", "numpy"):
        for mode in ("reverse", "forward"):
            got = regions.jacobian(values, mode=mode, backend=backend)
            want = unrolled.jacobian(values, mode=mode, backend="numpy")
            for k in want:
                assert not np.isnan(got[k]).any() or np.isnan(want[k]).any(), (mode, backend)
            close(got, want)


# A short loop (k = 3, under `limits.unroll`) whose items are each a large body: GMM's
# components, d^2 / 2 work each (a triangular factor times the point's offset).
SHORT = """
const n = 5
const d = 32
const k = 3
input X[n, d]
input M[k, d]
input L[k, d * d]
def term(l, m, x) = -0.5 * sum(sum(l[j * d + t] * (x[t] - m[t]) for t in range(j + 1)) ** 2
                              for j in range(d))
output y = sum(logsumexp([term(L[c], M[c], X[i]) for c in range(k)]) for i in range(n))
"""


def kept_trips(graph) -> list[int]:
    return [node.attr.n for node in graph.nodes if node.op == "region"]


def test_a_short_loop_of_a_large_body_stays_a_loop():
    """Written out, the loop over the k components would be k copies of d^2 / 2 terms in
    every point's sum: kept, and so the loop over the n points around it (its body that
    loop, large too), and the graph does not grow with k. Values and gradients are the
    program's written out."""
    regions, unrolled = both(SHORT)
    (outer,) = [node.attr for node in regions.graph.nodes if node.op == "region"]
    assert outer.n == 5 and kept_trips(outer.body) == [3] and not has_regions(unrolled.graph)
    more = diffdsl.compile(SHORT.replace("const k = 3", "const k = 9"), cache=False)
    # M and L, read by the loop over the components inside the loop over the points, are
    # read whole there (not listed): the graph is the same size at k = 9
    assert len(more.graph.nodes) == len(regions.graph.nodes)
    rng = np.random.default_rng(2)
    values = point(regions, rng)
    values["L"] /= 10
    for backend in ("cpu", "numpy"):
        close(regions(values, backend=backend), unrolled(values, backend="numpy"))
        close(regions.grad(values, backend=backend), unrolled.grad(values, backend="numpy"))


@pytest.mark.parametrize("source", [
    # a small body: written out (k copies of a few nodes)
    "input X[5, 3]\ninput M[3, 3]\n"
    "output y = sum(logsumexp([sum((X[i] - M[c]) ** 2) for c in range(3)]) for i in range(5))",
    # items of many values: each would be a part node of the loop, read one by one after
    "input x[200]\ninput w[4]\n"
    "output y = sum(logsumexp([x * w[c] + sin(x * w[c]) * cos(x) for c in range(4)], axis=0))",
])
def test_a_short_loop_of_a_small_body_or_large_items_is_written_out(source):
    regions, unrolled = both(source)
    assert 4 not in kept_trips(regions.graph) and 3 not in kept_trips(regions.graph)
    rng = np.random.default_rng(4)
    values = point(regions, rng)
    close(regions(values), unrolled(values))


@pytest.mark.parametrize("backend", ["cpu", "numpy", "cuda"])
@pytest.mark.parametrize("source", [
    "input x[65]\ninput a\noutput s = 1 / sum(x[i] * 0 + a * 0 for i in range(65))",
    "input x[65]\ninput a\nz = zeros(65)\noutput s = 1 / sum(z * x) + a",
    "input x[65]\ninput a\noutput s = 1 / max(x[i] * 0 for i in range(65)) + a",
])
def test_a_loop_of_positive_zeros_sums_to_positive_zero(source, backend):
    """Each iteration adds +0.0: the sum is +0.0 (1 / it is inf), as written out; a body that
    adds its sums in place adds no instruction for a constant +0.0, so its accumulator must
    not keep the -0.0 it starts at (found by review: `sum(zeros(n) * x)` gave -0.0)."""
    if backend == "cuda":
        from diffdsl.backends import cuda
        if not cuda.available():
            pytest.skip("no CUDA device and no simulator")
    regions, unrolled = both(source)
    assert has_regions(regions.graph)
    values = {"x": np.linspace(0.5, 1.5, 65), "a": 0.5}
    assert unrolled(values, backend="numpy") == np.inf
    assert regions(values, backend=backend) == np.inf
    batch = {"x": np.ones((2, 65)), "a": np.ones(2)}
    assert np.all(regions(batch, backend=backend) == np.inf)
