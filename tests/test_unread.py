"""Loop outputs nothing reads, dropped (graph/unread.py): in a derivative's graph, no loop
computes a sum or a map output that no node reads, at any depth of nesting; and dropping
them changes no value, to the bit, against the same derivative built without the pass."""

from __future__ import annotations

import numpy as np
import pytest
from draws import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.backends import numpy as reference
from diffdsl.graph import share_sums, unread
from diffdsl.graph.verify import verify
from diffdsl.runtime.inputs import prepare_inputs

LLSQ = """const n = 300
const m = 70
input x[m]
def t(i) = -1 + i * 2 / (n - 1)
output cost = sum((sign(t(i)) - sum(x[j] * t(i) ** j for j in range(m))) ** 2
                  for i in range(n)) / 2
"""
CASES = {
    # the pullback's seed needs the inner sum: its copy of the sum is not read
    "llsq": LLSQ,
    "log of a sum": "input x[200]\ninput w\n"
                    "output y = log(sum(exp(x[i] * w) for i in range(200)))\n",
    "a map read in part": "input x[100]\noutput y = sum([sin(x[i]), cos(x[i])][0] ** 2 "
                          "for i in range(100))\n",
    "kmeans": "input P[100, 3]\ninput C[12, 3]\ndef dist2(p, c) = sum((p - c) ** 2)\n"
              "output cost = sum(min([dist2(P[i], C[j]) for j in range(12)])\n"
              "                  for i in range(100))\n",
}


def unread_outputs(graph) -> list:
    """Each (region, sum or map output) of `graph` and of its regions' bodies that no part
    node and no port reads, in a region no stream reads whole."""
    found = []
    whole = set()  # regions a stream reads whole
    read: dict[int, set] = {}
    for ports in (graph.inputs, graph.outputs):
        for p in ports.values():
            if p.whole is not None:
                read.setdefault(p.whole[0], set()).update(
                    range(p.whole[1], p.whole[1] + p.size))
    for node in graph.nodes:
        if node.op == "part":
            read.setdefault(node.args[0], set()).add(node.attr)
        elif node.op == "region" and node.attr.whole:
            whole |= set(node.args)
    for i, node in enumerate(graph.nodes):
        if node.op != "region":
            continue
        r = node.attr
        found += unread_outputs(r.body)
        if i in whole:
            continue
        values = read.get(i, set())
        found += [(i, "sum", e) for e in range(r.sums) if r.kind(e) == "add" and e not in values]
        columns = {(k - r.sums) % r.maps for k in values if r.sums <= k < r.sums + r.n * r.maps} \
            if r.maps else set()
        found += [(i, "map", e) for e in range(r.maps) if e not in columns]
    return found


def without_the_pass(monkeypatch, source: str, kind: str):
    """The derivative graph `kind` of `source` built with `drop_unread` left out."""
    with monkeypatch.context() as m:
        m.setattr(share_sums, "drop_unread", lambda graph: graph)
        return diffdsl.compile(source, cache=False).derivative(kind)


def evaluated(graph, point) -> dict:
    batch, arrays = prepare_inputs(graph, point)
    return reference.evaluate(graph, arrays, np.float64)


@pytest.mark.parametrize("name", sorted(CASES))
def test_derivatives_compute_nothing_unread(name, monkeypatch):
    prog = diffdsl.compile(CASES[name], cache=False)
    rng = np.random.default_rng(7)
    point = {k: rng.uniform(-1, 1, shape) for k, shape in prog.inputs.items()}
    for kind in ("grad", "hessian"):
        graph = prog.derivative(kind)
        assert unread_outputs(graph) == [], (kind, unread_outputs(graph))
        raw = without_the_pass(monkeypatch, CASES[name], kind)
        got, want = evaluated(graph, point), evaluated(raw, point)
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


def test_the_check_is_not_vacuous(monkeypatch):
    """Without the pass, llsq's and the log-sum's gradients do compute an unread sum."""
    for name in ("llsq", "log of a sum"):
        assert unread_outputs(without_the_pass(monkeypatch, CASES[name], "grad"))


# Nested loops whose outer body uses its inner sums nonlinearly (so a pullback's seed needs
# them, and its copy of them goes unread), or reads one item of a list it builds.
OUTER = ("({a}) ** 2", "log(1 + ({a}) ** 2)", "exp({a}) * ({b})", "sin({a}) + ({b}) ** 3",
         "[{a}, {b}][0] * w", "({a}) * ({b})", "min([{a}, {b}])")
INNER = ("x[j] * {t} ** j", "sin(x[j] * {t})", "x[j] * w + {t}", "cos(x[j]) * (j + {t})",
         "x[j] * x[j] * w")


@st.composite
def nested(draw) -> str:
    n, m = draw(st.integers(2, 6)), draw(st.integers(2, 6))
    t = f"(i / {n} - 0.5)"
    inner = [f"sum({draw(st.sampled_from(INNER)).format(t=t)} for j in range({m}))"
             for _ in range(2)]
    body = draw(st.sampled_from(OUTER)).format(a=inner[0], b=inner[1])
    return f"input x[{m}]\ninput w\noutput y = sum({body} for i in range({n}))\n"


@settings(max_examples=examples(20), deadline=None, suppress_health_check=list(HealthCheck))
@given(source=nested())
def test_generated_nested_loops(source):
    """Generated nests, every loop a region (`unroll=1`): their gradients and Hessians
    compute nothing unread, and give the values of the graphs built without the pass, to
    the bit."""
    rng = np.random.default_rng(len(source))
    with diffdsl.limits.using(unroll=1):
        prog = diffdsl.compile(source, cache=False)
        point = {"x": rng.uniform(-1, 1, prog.inputs["x"]), "w": 0.3}
        for kind in ("grad", "hessian"):
            graph = prog.derivative(kind)
            assert unread_outputs(graph) == [], (source, kind)
            with pytest.MonkeyPatch.context() as m:
                m.setattr(share_sums, "drop_unread", lambda graph: graph)
                raw = diffdsl.compile(source, cache=False).derivative(kind)
            got, want = evaluated(graph, point), evaluated(raw, point)
            for k in want:
                np.testing.assert_array_equal(got[k], want[k])


def test_loops_that_become_one_are_merged(monkeypatch):
    """k-means with its points as a const: in its Hessian, a pullback without its unread
    copy of the sums is the very region beside it. The graph holds it once (a repeated node
    is malformed: `verify` refused it, and the kernel with it), the values are those of the
    graph without the pass, and the Hessian is NumPy's: 2 times each centroid's points."""
    n, k, d = 60, 8, 6
    rng = np.random.default_rng(7)
    X = rng.standard_normal((n, d))
    rows = ", ".join("[" + ", ".join(repr(float(v)) for v in r) + "]" for r in X)
    source = (f"const X = [{rows}]\ninput C[{k}, {d}]\n"
              f"output J = sum(min([sum((X[i, t] - C[j, t]) ** 2 for t in range({d})) "
              f"for j in range({k})]) for i in range({n}))\n")
    merged = []
    real = unread._merged
    monkeypatch.setattr(unread, "_merged", lambda g, c: merged.append(1) or real(g, c))
    prog = diffdsl.compile(source, cache=False)
    graph = prog.derivative("hessian")
    assert merged  # the case this test is about
    verify(graph)
    raw = without_the_pass(monkeypatch, source, "hessian")
    C = rng.standard_normal((k, d))
    got, want = evaluated(graph, {"C": C}), evaluated(raw, {"C": C})
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    near = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
    expect = np.diag(np.repeat(2.0 * np.bincount(near, minlength=k), d))
    for backend in ("numpy", "cpu"):
        hessian = prog.hessian({"C": C}, backend=backend)
        np.testing.assert_allclose(np.asarray(hessian["C"]["C"]).reshape(k * d, k * d), expect)
