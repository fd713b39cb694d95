"""Work a loop does the same in every iteration, done once before it (graph/hoist.py): the
program compiled with hoisting, without it (lowering's `hoisted` replaced by the identity),
and with every loop written out, must agree: on the values to the bit in the reference
interpreter (the CPU's loops may take a vectorised exp, ulps from glibc's), on derivatives to
rounding, on special values too; and no body keeps work that does not vary in it.
"""

from __future__ import annotations

import numpy as np
import pytest
from draws import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diffdsl
import diffdsl.language.lower as lowering
from diffdsl.graph.hoist import invariant_nodes
from diffdsl.graph.loops import LEAVES

UNROLLED = 10**9
EXAMPLES = examples(12)

PROGRAMS = {
    "work on captures in the body": """
const n = 100
input x[n]
input a
input b
output y = sum(exp(a) * x[i] + sin(a * b) * x[i] ** 2 - sqrt(b) for i in range(n))
""",
    "a mixture's components inside the loop over the points": """
const n = 66
const k = 70
const d = 3
input x[n, d]
input al[k]
input mu[k, d]
input q[k, d]
def term(a, m, qc, xi) = a + sum(qc) - 0.5 * sum((exp(qc) * (xi - m)) ** 2)
output obj = sum(logsumexp([term(al[c], mu[c], q[c], x[i]) for c in range(k)])
                 for i in range(n))
""",
    "a carried state": """
const n = 90
input x[n]
input a
input b
y = 0
for t in range(n) {
    y = y * exp(-a * a) + x[t] * sqrt(b) + cos(a)
}
output out = y
""",
    "an inner loop's index with outer-invariant data": """
const n = 70
const k = 68
input x[n]
input w[k]
input a
output s = sum(sum(x[i] * log(1 + w[c] ** 2) * c + exp(a * w[c]) for c in range(k))
               for i in range(n))
""",
    "an outer loop's value in an inner loop": """
const n = 70
const k = 68
input x[n]
input w[k]
output s = sum(sum(exp(x[i]) * w[c] + sin(w[c] * x[i]) for c in range(k)) for i in range(n))
""",
    "a scan around an inner minimum": """
const n = 70
const k = 66
input x[n]
input w[k]
input a
y = 0
for t in range(n) {
    y = 0.5 * y + min(exp(a * w[c]) + (x[t] - w[c]) ** 2 for c in range(k))
}
output out = y
""",
    "strided and reversed inner reads": """
const n = 70
const k = 66
input x[n]
input v[2 * k + 2]
input w[k]
output s = sum(sum(x[i] * exp(v[2 * c + 1]) + sin(w[k - 1 - c]) * x[i] ** 2
                   for c in range(k)) for i in range(n))
""",
}


def compiled(source: str, hoisting: bool = True, unrolled: bool = False):
    if unrolled:
        with diffdsl.limits.using(unroll=UNROLLED):
            return diffdsl.compile(source, cache=False)
    if hoisting:
        return diffdsl.compile(source, cache=False)
    real = lowering.hoisted
    lowering.hoisted = lambda graph: graph
    try:
        return diffdsl.compile(source, cache=False)
    finally:
        lowering.hoisted = real


def point(prog, rng, rows=None):
    shape = () if rows is None else (rows,)
    return {name: rng.uniform(0.2, 1.5, size=shape + tuple(s))
            for name, s in prog.inputs.items()}


def close(a, b, rtol=1e-11):
    assert set(a) == set(b)
    for key in a:
        if isinstance(a[key], dict):
            close(a[key], b[key], rtol)
            continue
        x, y = np.asarray(a[key], float), np.asarray(b[key], float)
        scale = max(1.0, float(np.max(np.abs(y[np.isfinite(y)]), initial=0.0)))
        np.testing.assert_allclose(x, y, rtol=0, atol=rtol * scale, equal_nan=True,
                                   err_msg=key)


def bodies(graph):
    """Every region body of `graph`, nested ones too, with its region."""
    for node in graph.nodes:
        if node.op == "region":
            yield node.attr, node.attr.body
            yield from bodies(node.attr.body)


def moved_ops(graph) -> list[str]:
    """The ops some body computes that are the same in all its iterations."""
    return [body.nodes[i].op for region, body in bodies(graph)
            for i, same in enumerate(invariant_nodes(region))
            if same and body.nodes[i].op not in LEAVES]


def functions_computed(graph) -> int:
    """How many exp, log, sin, cos and sqrt an evaluation computes, each loop's body as
    many times as the loop runs."""
    return sum(node.attr.n * functions_computed(node.attr.body) if node.op == "region" else
               node.op in ("exp", "log", "sin", "cos", "sqrt") for node in graph.nodes)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_no_body_keeps_work_that_does_not_vary(name):
    source = PROGRAMS[name]
    hoisted, kept = compiled(source).graph, compiled(source, hoisting=False).graph
    assert moved_ops(hoisted) == []
    assert functions_computed(hoisted) < functions_computed(kept)


def test_an_inner_loops_outer_invariant_work_is_a_loop_before_the_outer_one():
    """The mixture's exp(q[c]) and sum(q[c]): computed by a map over the components before
    the loop over the points, which streams their rows; its body computes no exp but the
    logsumexp's."""
    graph = compiled(PROGRAMS["a mixture's components inside the loop over the points"]).graph
    tops = [node.attr for node in graph.nodes if node.op == "region"]
    points = next(r for r in tops if r.n == 66)
    components = [r for r, _ in bodies(points.body) if r.n == 70]
    assert components and all(
        sum(node.op == "exp" for node in r.body.nodes) <= 1 for r in components)
    assert any(r.n == 70 and r.maps and not r.sums for r in tops)  # the rows, before


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_hoisting_changes_no_value_and_no_derivative(name):
    """With hoisting and without, on the CPU and on the reference interpreter, against the
    program written out on the reference interpreter (compiled, it took minutes; computed
    once for both backends)."""
    source = PROGRAMS[name]
    hoisted, kept, unrolled = (compiled(source), compiled(source, hoisting=False),
                               compiled(source, unrolled=True))
    rng = np.random.default_rng(3)
    batch = point(hoisted, rng, rows=2)
    (of,) = hoisted.outputs
    want_values = unrolled.evaluate(batch, backend="numpy")
    want_grads = unrolled.grad(batch, of=of, backend="numpy")
    one = {k: v[0] for k, v in batch.items()}
    direction = {k: rng.normal(size=np.shape(v)) for k, v in one.items()}
    # The whole Hessian of a small program; up to 150 inputs, its block by the smallest input
    # (the whole one of 137 inputs, a scan around an inner minimum, took 6 minutes of the
    # suite on the numpy interpreter); the hvp takes every input in one direction.
    sizes = {k: int(np.prod(s, dtype=int)) for k, s in hoisted.inputs.items()}
    for backend in ("cpu", "numpy"):
        values = [p.evaluate(batch, backend=backend) for p in (hoisted, kept)]
        if backend == "numpy":  # the same ops on the same values (the CPU's loops may take a
            for key in values[0]:  # vectorised exp where a body had glibc's: ulps apart)
                assert np.array_equal(values[0][key], values[1][key])
        close(values[0], values[1])
        close(values[0], want_values)
        grads = [p.grad(batch, of=of, backend=backend) for p in (hoisted, kept)]
        close(grads[0], grads[1])
        close(grads[0], want_grads)
        if sum(sizes.values()) <= 150:
            wrt = None if sum(sizes.values()) <= 100 else [min(sizes, key=sizes.get)]
            close(hoisted.hessian(one, wrt=wrt, backend=backend),
                  kept.hessian(one, wrt=wrt, backend=backend))
        close(hoisted.hvp(one, direction, backend=backend),
              kept.hvp(one, direction, backend=backend))


@pytest.mark.parametrize("backend", ["cpu", "numpy"])
def test_special_values_keep_their_nans_and_infinities(backend):
    """log(a) at a = 0 (-inf), at a < 0 (NaN), exp(1 / a) past overflow: moved out of the
    loop, the value is the same, and at these points the gradient has no NaN the loop did
    not make (one can: graph/hoist.py's docstring). It has an infinity where the loop made a
    NaN: at a = 1e-300, d/da of exp(1 / a) * x[i]**2
    is -inf * x[i]**2, NaN in the iteration where x[i] = 0, while the hoisted exp(1 / a)'s
    cotangent is the sum of the x[i]**2 first, then taken through exp once: -inf (as JAX
    gives it, computing exp(1 / a) once too)."""
    source = """
const n = 80
input x[n]
input a
output y = sum(x[i] * log(a) + exp(1 / a) * x[i] ** 2 for i in range(n))
"""
    progs = [compiled(source), compiled(source, hoisting=False)]
    x = np.linspace(-1.0, 1.0, 80)
    x[3] = 0.0
    for a in (0.0, -0.0, -1.0, 1e-300, np.inf, np.nan, 2.0):
        with np.errstate(all="ignore"):
            got = [p.evaluate({"x": x, "a": a}, backend=backend)["y"] for p in progs]
            grads = [p.grad({"x": x, "a": a}, backend=backend) for p in progs]
        if backend == "numpy":
            assert np.array_equal(got[0], got[1], equal_nan=True), a
        close({"y": got[0]}, {"y": got[1]})
        for key in grads[0]:
            g, h = np.asarray(grads[0][key]), np.asarray(grads[1][key])
            assert not (np.isnan(g) & ~np.isnan(h)).any(), (a, key)
            both = ~np.isnan(h)
            assert np.array_equal(np.isinf(g[both]), np.isinf(h[both])), (a, key)
            assert np.array_equal(g[np.isinf(h)], h[np.isinf(h)]), (a, key)
            close({key: np.where(np.isfinite(h), g, 0)}, {key: np.where(np.isfinite(h), h, 0)})


# generated programs ---------------------------------------------------------------------

INVARIANT = ["a", "b", "w[c]", "c"]  # the same in every iteration over i
VARIANT = ["x[i]", "i"]


def _expr(leaves: list[str]):
    leaf = st.sampled_from(leaves + ["0.5", "2"])
    return st.recursive(leaf, lambda e: st.one_of(
        st.tuples(st.sampled_from(["exp(0.1 * ({}))", "sin({})", "log(1 + ({}) ** 2)",
                                   "sqrt(1 + ({}) ** 2)", "-({})"]), e).map(
            lambda p: p[0].format(p[1])),
        st.tuples(e, st.sampled_from(["+", "-", "*"]), e).map(
            lambda p: f"({p[0]} {p[1]} {p[2]})")), max_leaves=7)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(inner=_expr(INVARIANT + VARIANT), outer=_expr(["a", "b", "x[i]", "i"]),
       nested=st.booleans())
def test_generated_loops_agree_with_and_without_hoisting(inner, outer, nested):
    body = f"sum({inner} for c in range(k))" if nested else "w[0]"
    source = f"""
const n = 70
const k = 66
input x[n]
input w[k]
input a
input b
output s = sum(({body}) * 0.01 + {outer} for i in range(n))
"""
    progs = [compiled(source), compiled(source, hoisting=False)]
    assert moved_ops(progs[0].graph) == []
    rng = np.random.default_rng(0)
    one = point(progs[0], rng)
    with np.errstate(all="ignore"):
        values = [p.evaluate(one, backend="numpy")["s"] for p in progs]
        assert np.array_equal(values[0], values[1], equal_nan=True)
        close(*[p.evaluate(one, backend="cpu") for p in progs])
        close(progs[0].grad(one, backend="cpu"), progs[1].grad(one, backend="cpu"))
        close(progs[0].grad(one, backend="numpy"), progs[1].grad(one, backend="numpy"))



def test_three_loops_deep_agree_with_and_without_hoisting():
    """exp(w[c]) in the innermost of three loops: moved out level by level, it is computed
    k times, not n * m * k."""
    source = """
const n = 66
const m = 65
const k = 67
input x[n]
input y[m]
input w[k]
output s = sum(sum(sum(x[i] * y[j] * exp(w[c]) for c in range(k)) for j in range(m))
               for i in range(n))
"""
    progs = [compiled(source), compiled(source, hoisting=False)]
    assert functions_computed(progs[0].graph) == 67 < functions_computed(progs[1].graph)
    one = point(progs[0], np.random.default_rng(5))
    for backend in ("numpy", "cpu"):
        close(*[p.evaluate(one, backend=backend) for p in progs])
        close(*[p.grad(one, backend=backend) for p in progs])


def test_hoisting_past_the_node_limit_keeps_the_loops_as_lowered(monkeypatch):
    """Hoisting lists an inner loop's moved rows as captures, so its graph may be larger than
    the one lowered: where its builder passes the node limit, the program compiles as
    lowered instead of failing."""
    source = PROGRAMS["a mixture's components inside the loop over the points"]
    kept = compiled(source, hoisting=False).graph
    real = lowering.hoisted
    monkeypatch.setattr(lowering, "hoisted", lambda graph: _limited(real, graph))
    assert diffdsl.compile(source, cache=False).graph == kept


def _limited(hoist, graph):
    """`hoist(graph)` with the node limit at the graph's own size: the rows it adds pass it."""
    with diffdsl.limits.using(nodes=len(graph.nodes)):
        return hoist(graph)
