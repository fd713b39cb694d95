"""Gradients of inputs read at overlapping windows (graph/stencils.py): a loop that reads
`x[i]` and `x[i + 1]` (or rows `X[i]` and `X[i + 1]`, or `x[2 * i + 3]`) keeps its input's
gradient whole, gathered by a loop over the input's elements from a copy of the pullback's
cotangents padded with zeros. Values and gradients agree with the program written out, on
the CPU and the reference interpreter, at every edge (windows past either end of the loop,
part of the input read, guards from outside, elements read alone), and the gradient's graph
does not grow with the data."""

from __future__ import annotations

import numpy as np
import pytest
from draws import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_wholes import build, close, point

import diffdsl
from diffdsl.cli import main
from diffdsl.graph import autodiff

PROGRAMS = {
    "a total variation": "input x[{n}]\noutput s = sum((x[i + 1] - x[i]) ** 2 "
                         "for i in range({n} - 1))",
    "a five-point stencil": "input x[{n}]\noutput s = sum((x[i] - 4 * x[i + 2] + x[i + 4]) ** 2 "
                            "* sin(x[i + 1] * x[i + 3]) for i in range({n} - 4))",
    "rows of a matrix": "input X[{n}, 3]\ninput w[3]\noutput s = sum(((X[i + 1, 0] - X[i, 0]) "
                        "* w[0] + X[i, 2] * X[i + 1, 1] * w[2]) ** 2 for i in range({n} - 1))",
    "strided, overlapping": "const m = 2 * {n}\ninput x[m]\noutput s = sum(x[2 * i] * "
                            "x[2 * i + 1] * x[2 * i + 2] for i in range({n} - 1))",
    "part of the input, two loops": "input x[{n}]\noutput s = sum(x[i + 3] * x[i + 5] for i in "
                                    "range(10, {n} - 5)) + sum(cos(x[i]) for i in range({n}))",
    "under a guard, and read alone": "input x[{n}]\ninput c\n"
                                     "u = sum(sqrt((x[i + 1] - x[i]) ** 2 + 1) for i in "
                                     "range({n} - 1))\noutput s = max(u, c) + x[0] * x[-1]",
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_stencil_gradients_agree_with_the_program_written_out(name):
    source = PROGRAMS[name].format(n=100)
    written = build(source, 10**9)
    x = point(written)
    for backend in ("cpu", "numpy"):
        prog = build(source, backend=backend)
        close(prog.grad(x), written.grad(x))
        close(prog.vjp(np.array(0.7), x), written.vjp(np.array(0.7), x))
    grad = autodiff.grad(prog.graph)
    wholes = {n[2:] for n, p in grad.outputs.items() if p.whole is not None}
    assert wholes == {n for n, p in prog.graph.inputs.items() if p.whole is not None}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_second_order_through_a_gathered_gradient(name):
    """Hessian-vector products and jvps (forward over the gathered reverse) agree with the
    program written out; the whole Hessian for one program."""
    source = PROGRAMS[name].format(n=100)
    written = build(source, 10**9, backend="numpy")
    x = point(written)
    tangent = {n: np.linspace(-1, 1, int(np.prod(s))).reshape(s)
               for n, s in written.inputs.items()}
    prog = build(source)
    close(prog.hvp(x, tangent), written.hvp(x, tangent))
    close(prog.jvp(x, tangent), written.jvp(x, tangent))
    if name == "a five-point stencil":
        close(prog.hessian(x), written.hessian(x))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_stencil_gradients_do_not_grow_with_the_data(name):
    sizes = []
    for n in (100, 100_000):
        prog = build(PROGRAMS[name].format(n=n), backend="numpy")
        sizes.append(len(autodiff.grad(prog.graph).nodes))
    assert sizes[0] == sizes[1]


def test_a_total_variation_of_a_million_points():
    """A first gradient of 10^6 points (the node limit before: the gradient was listed)."""
    n = 1_000_000
    prog = diffdsl.compile(f"input x[{n}]\nd = [x[i + 1] - x[i] for i in range({n - 1})]\n"
                           "output tv = sum(d ** 2)", cache=False)
    x = np.sin(np.arange(n) * 0.01)
    d = np.diff(x)
    want = np.zeros(n)
    want[1:] += 2 * d
    want[:-1] -= 2 * d
    np.testing.assert_allclose(prog.grad(x=x)["x"], want, rtol=1e-13, atol=1e-17)


@st.composite
def stencils(draw):
    """A loop (kept: past 64 iterations) reading a vector at shifts of its index, scaled by
    a stride, through random functions; sometimes a second loop, a guard, an element alone."""
    stride = draw(st.integers(1, 3))
    shifts = sorted(draw(st.sets(st.integers(0, 6), min_size=1, max_size=4)))
    start = draw(st.integers(0, 3))
    count = draw(st.integers(65, 80))
    size = stride * (start + count - 1) + shifts[-1] + 1 + draw(st.integers(0, 4))
    index = (f"{stride} * i" if stride > 1 else "i")
    reads = [f"x[{index} + {c}]" for c in shifts]
    func = draw(st.sampled_from(["sin({a}) * {b}", "({a} - {b}) ** 2", "exp(0.2 * {a}) * {b}",
                                 "{a} * {b} * {a}"]))
    terms = [func.format(a=reads[k], b=reads[(k + 1) % len(reads)]) for k in range(len(reads))]
    body = " + ".join(terms)
    lines = [f"input x[{size}]", "input c",
             f"u = sum({body} for i in range({start}, {start + count}))"]
    total = "u"
    if draw(st.booleans()):
        total = "max(u, c)"
    if draw(st.booleans()):
        total += f" + sum(x[i] * x[i] for i in range({size}))"
    if draw(st.booleans()):
        total += f" + x[{draw(st.integers(0, size - 1))}] * c"
    lines.append(f"output s = {total}")
    return "\n".join(lines)


@settings(max_examples=examples(30), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(source=stencils(), backend=st.sampled_from(["cpu", "numpy"]))
def test_generated_stencils_agree_with_the_program_written_out(source, backend):
    written = build(source, 10**9, backend="numpy")
    prog = build(source, backend=backend)
    x = point(written)
    close(prog(x), written(x))
    close(prog.grad(x), written.grad(x))


def test_diff_prints_a_guarded_stencil_gradient(tmp_path, capsys):
    """The gradient's loop captures the sum `u` over i, and its own index is i too: SymPy
    must not substitute an iteration into the sum's bound variable (an internal error
    before: "Invalid limits given: ((0, 0, 98),)")."""
    path = tmp_path / "tv.dd"
    path.write_text(PROGRAMS["under a guard, and read alone"].format(n=100) + "\n")
    assert main(["diff", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("d s / d x[j] = ") for line in lines)
    assert any("Sum(sqrt((x[i + 1] - x[i])**2 + 1), (i, 0, 98))" in line for line in lines)
