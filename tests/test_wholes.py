"""Inputs read in place (an input past `unroll` elements is one `array` node, streamed whole by
the loops that read it at an affine index, and its gradient is whole on the pullback's
values): values and every kind of derivative agree with the program written out (`unroll`
huge: every input element by element, every loop unrolled), on the CPU and the reference
interpreter, and the graphs do not grow with the data."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import diffdsl
from diffdsl.backends import numpy as reference
from diffdsl.errors import LimitError
from diffdsl.graph import autodiff
from diffdsl.graph.ir import Builder, GraphError, Port, verify

# name -> (source, the inputs read whole, the gradients whole)
PROGRAMS = {
    "one stream tiles it": (
        "input x[200]\noutput s = sum(sin(x[i]) * x[i] for i in range(200))", "x", "x"),
    "two inputs in one row": (
        "input x[200]\ninput y[200]\noutput s = sum((x[i] - y[i]) ** 2 for i in range(200))",
        "xy", "xy"),
    "rows of a matrix": (
        "input X[150, 3]\ninput w[3]\n"
        "output s = mean((X[i, 0] * w[0] + X[i, 1] * w[1] - X[i, 2]) ** 2 "
        "for i in range(150))", "X", "X"),
    "strided, tiling": (
        "input x[300]\noutput s = sum(x[2 * i] * x[2 * i + 1] for i in range(150))", "x", "x"),
    "read backwards and forwards": (
        "input x[200]\ninput w[200]\n"
        "output s = sum(w[i] * x[199 - i] + x[i] ** 2 for i in range(200))", "xw", "xw"),
    "rows read backwards": (
        "input X[150, 2]\noutput s = sum(X[149 - i, 0] * sin(X[149 - i, 1]) for i in range(150))",
        "X", "X"),
    "read backwards at a stride, not tiling": (
        "input x[300]\noutput s = sum(x[299 - 2 * i] * x[i] for i in range(150))", "x", ""),
    "overlapping windows": (
        "input x[200]\noutput s = sum(x[i] * x[i + 1] for i in range(199))", "x", "x"),
    "part of the input": (
        "input x[200]\noutput s = sum(sin(x[i]) for i in range(100, 200))", "x", "x"),
    "elements read alone too": (
        "input x[200]\noutput s = x[0] * x[-1] + sum(x[i] ** 2 for i in range(200))", "x", "x"),
    "two loops": (
        "input x[200]\noutput s = sum(x[i] ** 2 for i in range(200)) * "
        "max(exp(x[i]) for i in range(200))", "x", "x"),
    "a guard from outside": (
        "input x[200]\ninput c\nu = sum(sqrt(x[i] * x[i] + 1) for i in range(200))\n"
        "output s = max(u, c)", "x", "x"),
    "min and logsumexp": (
        "input x[200]\noutput s = min(x[i] * 3 for i in range(200)) + "
        "logsumexp(x[i] for i in range(200))", "x", "x"),
    "a map read by a sum": (
        "input x[200]\nm = [x[i] * x[i] for i in range(200)]\n"
        "output s = sum(m[i] * sin(m[i]) for i in range(200))", "x", "x"),
    "listed by a slice": (
        "input x[200]\nz = x[1:] * 2\noutput s = sum(z[i] * x[i] for i in range(199))", "x",
        ""),
    "kept by rows, read by a loop": (
        "input x[200]\nz = x * 2\noutput s = sum(z[i] * x[i] for i in range(200))", "x", "x"),
    "a loop inside a loop that does not move it": (
        "input x[100]\ninput w[100]\n"
        "output s = sum(w[j] * sum(x[i] * x[i] for i in range(100)) for j in range(100))",
        "xw", "xw"),
    "a scan": (
        "input a\ninput v[100]\nh = a\nfor i in range(100) {\n    h = h * 0.9 + sin(v[i])\n}\n"
        "output s = h", "v", ""),
    "a wide window read at two rows": (
        "input X[100, 100]\ninput a\noutput s = sum(a * X[0, j] * X[99, j] for j in range(100))",
        "X", ""),
    "nested, the outer moving": (
        "input P[100, 4]\ninput C[3, 4]\n"
        "output s = sum(min(sum((P[i, t] - C[j, t]) ** 2 for t in range(4)) for j in range(3))"
        " for i in range(100))", "P", "P"),
}


def build(source: str, unroll: int = 64, backend: str = "cpu"):
    with diffdsl.limits.using(unroll=unroll):
        return diffdsl.compile(source, backend=backend, cache=False)


def point(prog, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=s) for n, s in prog.inputs.items()}


def close(a, b, rtol=1e-11):
    if isinstance(b, dict):
        assert set(a) == set(b)
        for k in b:
            close(a[k], b[k], rtol)
        return
    b = np.asarray(b, dtype=float)
    finite = np.isfinite(b)  # an infinity matches by position, not by scaling the tolerance
    scale = 1 + (np.max(np.abs(b[finite])) if finite.any() else 0.0)
    np.testing.assert_allclose(np.asarray(a, dtype=float), b, rtol=rtol, atol=rtol * scale)


def agrees_written_out(source: str, hvp: bool = False) -> None:
    """Values, gradients (Hessian-vector products too where `hvp`), vjps and Jacobians of the
    program as compiled, on the CPU and the reference interpreter, agree with those of the
    program written out (`unroll` huge) on the reference interpreter: the CPU against
    another backend, and written-out graphs of 10^5 nodes interpreted, not compiled."""
    written = build(source, 10**9, backend="numpy")
    x = point(written)
    ones = {n: np.ones(s) for n, s in written.inputs.items()}
    for backend in ("cpu", "numpy"):
        prog = build(source, backend=backend)
        close(prog(x), written(x))
        for of, shape in written.outputs.items():
            if shape == ():
                close(prog.grad(x, of=of), written.grad(x, of=of))
                if hvp:
                    close(prog.hvp(x, ones, of=of), written.hvp(x, ones, of=of))
            else:
                seed = np.linspace(-1, 1, int(np.prod(shape))).reshape(shape)
                close(prog.vjp(seed, x, of=of), written.vjp(seed, x, of=of))
                for mode in ("forward", "reverse"):  # its loop written out for Jacobians
                    close(prog.jacobian(x, of=of, mode=mode),
                          written.jacobian(x, of=of, mode=mode))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_inputs_read_whole_agree_with_the_program_written_out(name):
    source, whole, whole_grads = PROGRAMS[name]
    written = build(source, 10**9)
    x = point(written)
    for backend in ("cpu", "numpy"):
        prog = build(source, backend=backend)
        read_whole = {n for n, p in prog.graph.inputs.items() if p.whole is not None}
        assert read_whole == set(whole)  # the test runs the path it names
        assert not any(p.whole for p in written.graph.inputs.values())
        close(prog(x), written(x))
        close(prog.grad(x), written.grad(x))
        seed = np.array(0.7)
        close(prog.vjp(seed, x), written.vjp(seed, x))
    grad = autodiff.grad(prog.graph)
    assert {n[2:] for n, p in grad.outputs.items() if p.whole is not None} == set(whole_grads)


@pytest.mark.parametrize("name", ["one stream tiles it", "elements read alone too", "a scan"])
def test_forward_mode_and_second_order_list_the_elements(name):
    """jvp, Jacobians and Hessians take inputs one element at a time (`loops.explicit`)."""
    source = PROGRAMS[name][0]
    prog, written = build(source), build(source, 10**9)
    x = point(prog, 1)
    tangents = {n: np.ones(s) for n, s in prog.inputs.items()}
    close(prog.jvp(tangents, x), written.jvp(tangents, x))
    close(prog.jacobian(x), written.jacobian(x))
    close(prog.hessian(x), written.hessian(x), 1e-9)


def test_gradient_is_finite_where_a_guard_from_outside_holds():
    """max(u, c) with c above u: the gradient is 0 through the select's guard, even where a
    partial inside the loop is infinite (sqrt at 0)."""
    source = "input x[100]\ninput c\nu = sum(sqrt(x[i]) for i in range(100))\n" \
             "output s = max(u, c)"
    prog, written = build(source), build(source, 10**9)
    x = {"x": np.zeros(100), "c": 5.0}
    close(prog.grad(x), written.grad(x))
    assert np.all(prog.grad(x)["x"] == 0)


def test_graphs_do_not_grow_with_the_data():
    sizes = []
    for n in (100, 2_000_000):
        source = f"input x[{n}]\ninput y[{n}]\n" \
                 f"output s = sum((x[i] - y[i]) ** 2 + sin(x[i]) for i in range({n}))"
        prog = build(source)
        grad = autodiff.grad(prog.graph)
        sizes.append((len(prog.graph.nodes), len(grad.nodes)))
    assert sizes[0] == sizes[1]
    # past the elements limit (10^6), since no element is made one by one
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=n), rng.normal(size=n)
    g = prog.grad({"x": x, "y": y})
    np.testing.assert_allclose(g["x"], 2 * (x - y) + np.cos(x), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(g["y"], -2 * (x - y), rtol=1e-13, atol=1e-13)


def test_an_input_read_element_by_element_meets_the_elements_limit():
    source = "input x[2000000]\noutput s = sum(x[1:] * 2)"
    with pytest.raises(LimitError) as err:
        build(source)
    assert "input 'x' read element by element" in str(err.value)
    assert err.value.span.line == 1


def test_cli_reads_a_large_input_whole(tmp_path):
    """From the command line: a gradient with respect to 10^6 data points, from a .npy."""
    n = 1_000_000
    (tmp_path / "lsq.dd").write_text(
        f"input x[{n}]\ninput a\noutput s = mean((a * x[i] - 1) ** 2 for i in range({n}))\n")
    x = np.linspace(0, 1, n)
    np.save(tmp_path / "x.npy", x)
    run = subprocess.run([sys.executable, "-m", "diffdsl", "grad", "lsq.dd", "--json",
                          "--inputs", "x=x.npy", "a=2", "--wrt", "a"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert abs(out["grad"]["a"] - np.mean(2 * (2 * x - 1) * x)) < 1e-12
    assert abs(out["value"] - np.mean((2 * x - 1) ** 2)) < 1e-12


def test_plans_keep_whole_ports(tmp_path, monkeypatch):
    """A plan read back from the cache is the graph lowering made (ports whole included)."""
    monkeypatch.setenv("DIFFDSL_CACHE_DIR", str(tmp_path))
    source = PROGRAMS["elements read alone too"][0]
    first = diffdsl.compile(source)
    x = point(first)
    g1 = first.grad(x)
    again = diffdsl.compile(source)
    assert again.graph.key() == first.graph.key()
    assert again.graph.inputs["x"].whole is not None
    close(again.grad(x), g1, 0)


def test_verify_checks_whole_ports():
    b = Builder()
    a = b.array("x", 10)
    good = b.graph({"x": Port((10,), (), None, (a, 0))}, {"y": Port((), (b.const(1.0),))})
    verify(good)
    for port in (Port((11,), (), None, (a, 0)), Port((10,), (), None, (a, 1))):
        bad = type(good)(good.nodes, {"x": port}, good.outputs)
        with pytest.raises(GraphError):
            verify(bad)


def test_reference_interpreter_reads_whole_ports_batched():
    source = PROGRAMS["one stream tiles it"][0]
    prog = build(source)
    grad = autodiff.grad(prog.graph)
    rows = np.random.default_rng(3).normal(size=(4, 200))
    out = reference.evaluate(grad, {"x": rows})
    np.testing.assert_allclose(out["d:x"], np.sin(rows) + rows * np.cos(rows), rtol=1e-13)


def test_shapes_of_an_input_read_in_place_do_not_list_it():
    """len, rows, cols and size read the shape alone: the input stays whole, past the elements
    limit too."""
    source = "input x[2000000]\ninput W[3000, 400]\nn = len(x)\n" \
             "output s = sum(x[i] ** 2 for i in range(n)) + rows(W) * cols(W) + size(x) + " \
             "sum(W[i, 1] for i in range(rows(W)))"
    prog = build(source)
    assert all(p.whole is not None for p in prog.graph.inputs.values())
    x, W = np.full(2_000_000, 0.5), np.arange(1_200_000.0).reshape(3000, 400)
    expected = 0.25 * 2_000_000 + 1_200_000 + 2_000_000 + W[:, 1].sum()
    assert prog(x=x, W=W) == pytest.approx(expected, rel=1e-14)


def test_batches_read_whole_inputs_row_by_row_on_the_cpu():
    source = PROGRAMS["elements read alone too"][0]
    prog = build(source)
    rows = np.random.default_rng(4).normal(size=(3, 200))
    batched = prog.grad({"x": rows})["x"]
    for r in range(3):
        np.testing.assert_allclose(batched[r], prog.grad({"x": rows[r]})["x"], rtol=1e-15)
    x0 = rows[0]
    expected = 2 * x0
    expected[0] += x0[-1]
    expected[-1] += x0[0]
    np.testing.assert_allclose(batched[0], expected, rtol=1e-13)


def test_a_window_read_sparsely_gives_its_elements_read_their_parts_alone():
    """X[0, j] and X[99, j] in one loop read a window of 9,901 elements, 2 of them an
    iteration: the window is listed and the gradient has parts for those (as the loop written
    out has, about a node an element), not for the whole window in every iteration (10^6
    nodes here; n^3 as the side grows)."""
    source = PROGRAMS["a wide window read at two rows"][0]
    grad = autodiff.grad(build(source).graph)
    assert len(grad.nodes) < 20_000


def test_formulas_of_an_input_read_in_place_keep_its_loop(capsys, tmp_path):
    """diff and to_sympy read an input read in place as its IndexedBase: a Sum over 10^6
    points prints as one line: a scalar output's Jacobian by inputs not read in place is its
    gradient, the data staying whole."""
    import sympy as sp

    from diffdsl.cli.main import main
    n = 1_000_000
    source = f"input x[{n}]\ninput a\noutput s = sum((a * x[i] - 1) ** 2 for i in range({n}))\n"
    path = tmp_path / "fit.dd"
    path.write_text(source)
    assert main(["diff", str(path), "--wrt", "a"]) == 0
    printed = capsys.readouterr().out.strip()
    label, formula = printed.split(" = ", 1)
    assert label == "d s / d a"
    x, i = sp.IndexedBase("x", shape=(n,), real=True), sp.Symbol("i", integer=True)
    a = sp.Symbol("a", real=True)
    got = sp.sympify(formula, locals={"x": x, "i": i, "a": a, "Sum": sp.Sum})
    want = sp.Sum(2 * (a * x[i] - 1) * x[i], (i, 0, n - 1))
    assert isinstance(got, sp.Sum) and got.limits == want.limits
    assert sp.expand(got.function - want.function) == 0
    jac = autodiff.jacobian(build(source).graph, wrt=["a"])
    assert jac.inputs["x"].whole is not None and len(jac.nodes) < 50
