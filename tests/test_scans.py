"""`for` loops kept as loops (scans): a long `for i in range(n)` carries the names it assigns
from one iteration to the next as a region's state, and the program means what it means with
the loop written out. Each program here is built both ways (`unroll` 64, the default, and
unrolling forced) and must agree on values, gradients (reverse), Jacobian-vector products
(forward) and Hessians, on the numpy interpreter and the CPU; the ODE's gradient is also held
against central differences, an oracle that shares no code with either."""

from __future__ import annotations

import numpy as np
import pytest

import diffdsl
from diffdsl.graph.loops import has_regions

ODE = """
input y0[3]
input k
h = y0
for t in range(100) {
    h = h + 0.01 * [-k * h[0], k * h[0] - h[1] * h[2], sin(h[1])]
}
output loss = sum(h * h)
"""

RNN = """
input x[80, 2]
input W[3, 3]
input U[3, 2]
h = [0.1, 0.2, 0.3] * W[0, 0]
m = -inf
for t in range(80) {
    h = tanh(W @ h + U @ x[t])
    if h[0] > m {
        m = h[0]
    }
    s = sum(h)
}
output loss = sum(h * h) + m + s
"""

LSTM = """
input xs[70, 2]
input Wf[2, 4]
input Wc[2, 4]
h = [0.0, 0.0] + Wf[0, 0] * 0.0 + 0.01
c = h * 0.5
loss = 0.0 * Wf[0, 0]
for t in range(70) {
    z = [h[0], h[1], xs[t, 0], xs[t, 1]]
    f = sigmoid(Wf @ z)
    c = f * c + (1 - f) * tanh(Wc @ z)
    h = tanh(c)
    loss = loss + logsumexp(h) - h[0]
}
output loss
"""

# A branch that takes sqrt of a negative number when not taken, and a state that a branch
# resets: the carried guards keep NaN out of the derivatives.
GUARDED = """
input x
input v[70]
h = x * x
for i in range(70) {
    if h > 1 {
        h = sqrt(h - 1)
    } else {
        h = h + v[i] * v[i]
    }
}
output y = h
"""

# Inner loops (unrolled in the body), their variables and a temporary assigned first.
NESTED = """
input a[100]
input c
s = c
for i in range(100) {
    acc = 0
    for j in range(3) {
        acc = acc + s * j
    }
    s = s * 0.9 + sin(a[i]) * acc * 0.01 + i * 0.001
}
output y = s + j
"""

# A state array updated element by element, a comprehension and a def in the body, a long
# loop inside the long loop, and a `while` with a label.
MIXED = """
input x[2]
input v[90]
def step(p, q) = p * 0.99 + 0.01 * tanh(q)
h = x * 1.0
count = x[0] * 0
for i in range(90) {
    h[0] = step(h[0], v[i] + h[1])
    h[1] = step(h[1], sum([h[0] * v[i] for k in range(2)]))
    inner = h[1]
    for j in range(70) {
        inner = inner * 0.999 + 0.001 * h[0]
    }
    r = inner
    while r > 0.5 max 3 as w {
        r = r * 0.5
    }
    count = count + w.steps
}
output y = h[0] + h[1] * r + count * 0.01
"""

PROGRAMS = {"ode": ODE, "rnn": RNN, "lstm": LSTM, "guarded": GUARDED, "nested": NESTED,
            "mixed": MIXED}


def build(source: str, unroll: int):
    with diffdsl.limits.using(unroll=unroll):
        return diffdsl.compile(source, cache=False)


def scans(graph) -> list:
    return [node.attr for node in graph.nodes if node.op == "region" and node.attr.carry]


def point(prog, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=s) * 0.5 for n, s in prog.inputs.items()}


def close(a, b):
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            close(a[k], b[k])
        return
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert np.all(np.isfinite(b))
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_scan_agrees_with_the_loop_written_out(name):
    loop, written = build(PROGRAMS[name], 64), build(PROGRAMS[name], 10**9)
    assert scans(loop.graph) and not has_regions(written.graph)
    assert len(loop.graph.nodes) < len(written.graph.nodes) / 3
    x = point(written)
    rng = np.random.default_rng(1)
    tangents = {n: rng.normal(size=s) for n, s in written.inputs.items()}
    of = next(iter(written.outputs))
    small = sum(np.prod(s) for s in written.inputs.values()) <= 8
    for backend in ("numpy", "cpu"):
        close(loop.evaluate(x, backend=backend), written.evaluate(x, backend="numpy"))
        close(loop.grad(x, of=of, backend=backend), written.grad(x, of=of, backend="numpy"))
        close(loop.jvp(tangents, x, of=of, backend=backend),
              written.jvp(tangents, x, of=of, backend="numpy"))
        if small:
            close(loop.jacobian(x, of=of, mode="forward", backend=backend),
                  written.jacobian(x, of=of, mode="forward", backend="numpy"))
            close(loop.hessian(x, of=of, backend=backend),
                  written.hessian(x, of=of, backend="numpy"))


def test_ode_gradient_against_central_differences():
    prog = build(ODE, 64)
    x = point(prog, seed=3)
    grad = prog.grad(x)
    for name, shape in prog.inputs.items():
        for k in np.ndindex(shape):
            step = 1e-6
            up = {n: np.array(v, dtype=float) for n, v in x.items()}
            down = {n: np.array(v, dtype=float) for n, v in x.items()}
            up[name][k] += step
            down[name][k] -= step
            fd = (prog.evaluate(up)["loss"] - prog.evaluate(down)["loss"]) / (2 * step)
            assert abs(np.asarray(grad[name])[k] - fd) <= 1e-6 * max(1.0, abs(fd))


def test_guarded_scan_derivative_is_finite_where_a_branch_is_not():
    """The untaken branch's sqrt of a negative number would make 0 * NaN without guards."""
    prog = build(GUARDED, 64)
    x = {"x": 0.3, "v": np.full(70, 0.05)}
    grad = prog.grad(x)
    assert np.all(np.isfinite(grad["x"])) and np.all(np.isfinite(grad["v"]))


def test_scan_graph_does_not_grow_with_the_trip_count():
    sizes = []
    for n in (100, 100_000):
        prog = build(ODE.replace("range(100)", f"range({n})"), 64)
        sizes.append(len(prog.graph.nodes))
        assert len(prog.derivative("grad").nodes) < 2000
    assert sizes[0] == sizes[1]


@pytest.mark.parametrize("body, why", [
    ("k = k + 1\n    h = h * 0.9 + x * k", "a static counter"),
    ("h = h * 0.9 + x * (if i > 3 then 1 else 2)", "the index against a static number"),
    ("h = h * t\n    t = 0.5", "a static name read before the body assigns it"),
])
def test_loops_a_scan_cannot_express_are_written_out(body, why):
    source = f"input x\nk = 0\nt = 1.0\nh = [x, x * 2]\nfor i in range(80) {{\n    {body}\n}}\n" \
             "output y = sum(h)\n"
    loop, written = build(source, 64), build(source, 10**9)
    assert not scans(loop.graph), why
    x = {"x": 0.7}
    close(loop.evaluate(x), written.evaluate(x))


def test_scans_survive_the_plan_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFDSL_CACHE_DIR", str(tmp_path))
    x = {"y0": np.array([0.1, 0.2, 0.3]), "k": 0.4}
    first = diffdsl.compile(ODE).grad(x)
    again = diffdsl.compile(ODE)
    assert scans(again.graph)
    close(again.grad(x), first)


def test_ranges_with_a_start_stay_loops():
    """`range(start, stop)` in a `for` and in a comprehension: the index starts there."""
    source = """
input x[200]
s = x[0]
for i in range(3, 150) {
    s = s * 0.99 + x[i] * i
}
output y = s + sum(x[i] * x[i - 1] for i in range(1, 200)) + i
"""
    loop, written = build(source, 64), build(source, 10**9)
    assert scans(loop.graph) and len(loop.graph.nodes) < 600
    x = point(written)
    close(loop.evaluate(x), written.evaluate(x))
    close(loop.grad(x), written.grad(x))


@pytest.mark.parametrize("fn", ["sqrt(d[i])", "cbrt(d[i])", "d[i] ** 0.5", "1 / d[i]"])
@pytest.mark.parametrize("kind", ["map", "scan"])
def test_a_derivative_absent_in_some_iterations_is_zero_not_nan(fn, kind):
    """Where only some iterations' outputs are used (a map's element, a state the loop
    writes and never reads) or only some stream elements have a tangent (a Jacobian's
    column), the others' derivatives are exactly 0: at a point where the partial derivative
    there is infinite (an exact 0 in the data), not 0 * inf = NaN."""
    if kind == "map":
        source = f"input d[70]\nm = [{fn} for i in range(70)]\noutput y = m[0] + m[5]\n"
    else:
        source = f"input d[70]\ns = d[0]\nfor i in range(70) {{\n    t = {fn}\n" \
                 f"    s = s * 0.5 + (if i == 3 then t else 0)\n}}\noutput y = s + t\n"
        source = source.replace("(if i == 3 then t else 0)", "t * d[i] * d[i]")
    loop, written = build(source, 64), build(source, 10**9)
    assert has_regions(loop.graph)
    rng = np.random.default_rng(2)
    for zero in (1, 2, 30):
        d = rng.uniform(0.5, 2.0, 70)
        d[zero] = 0.0
        x = {"d": d}
        for mode in ("reverse", "forward"):
            a = loop.jacobian(x, mode=mode)["d"]
            b = written.jacobian(x, mode=mode)["d"]
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
            finite = np.isfinite(b)
            np.testing.assert_allclose(a[finite], b[finite], rtol=1e-12)


@pytest.mark.parametrize("source", [
    # a loop variable the program differentiates by is a variable: not an index
    "input d[80]\ns = d[0]\nfor i in range(80) {\n    s = s + d[i]\n}\noutput y = s + grad(0, i)\n",
    "input d[80]\noutput y = sum(d[i] for i in range(80)) + grad(0, i)\n",
    # a carried name differentiated by inside the loop
    "input d[80]\ns = d[0]\nfor i in range(80) {\n    s = s * 0.5 + d[i]\n"
    "    t = grad(s * s, s)\n}\noutput y = s + t\n",
])
def test_names_differentiated_by_mean_what_they_mean_written_out(source):
    """Both builds fail alike (an index that varies) or agree."""
    try:
        written = build(source, 10**9)
    except diffdsl.errors.DiffDSLError as exc:
        with pytest.raises(type(exc)):
            build(source, 64)
        return
    loop = build(source, 64)
    x = point(written)
    close(loop.evaluate(x), written.evaluate(x))
    close(loop.grad(x), written.grad(x))


GUARDED_OUTSIDE = {
    "captured by a sum": "output y = sum(sqrt(u - c) * d[i] for i in range(70))",
    "streamed from a map": "w = [max(d[k], c) for k in range(70)]\n"
                           "output y = sum(sqrt(w[i] - c) for i in range(70))",
    "captured by a scan": "s = x * 1.0\nfor i in range(70) {\n"
                          "    s = s * 0.5 + sqrt(u - c) * d[i]\n}\noutput y = s",
    "a scan's start": "s = u - c\nfor i in range(70) {\n    s = sqrt(s) * d[i]\n}\noutput y = s",
}


@pytest.mark.parametrize("name", sorted(GUARDED_OUTSIDE))
def test_guards_from_outside_hold_inside_a_body(name):
    """A derivative that a select outside makes exactly 0 (the branch of max(x, c) not
    taken) goes into a loop's body with its guard, so a partial derivative that is infinite
    there (sqrt at 0) meets a select, not 0 * inf = NaN: as with the loop written out."""
    source = "input x\ninput c\ninput d[70]\nu = max(x, c)\n" + GUARDED_OUTSIDE[name] + "\n"
    loop, written = build(source, 64), build(source, 10**9)
    assert has_regions(loop.graph)
    rng = np.random.default_rng(4)
    x = {"x": 0.3, "c": 0.7, "d": np.abs(rng.normal(size=70)) + 0.5}
    if name == "streamed from a map":
        x["d"][::3] = 0.2  # below c: max picks c, and w[i] - c is 0
    for mode in ("reverse", "forward"):
        for backend in ("numpy", "cpu"):
            a = loop.jacobian(x, mode=mode, backend=backend)
            b = written.jacobian(x, mode=mode, backend="numpy")
            for k in b:
                np.testing.assert_array_equal(np.isnan(a[k]), np.isnan(b[k]), err_msg=k)
                finite = np.isfinite(b[k])
                np.testing.assert_allclose(np.asarray(a[k])[finite], np.asarray(b[k])[finite],
                                           rtol=1e-12, err_msg=k)
