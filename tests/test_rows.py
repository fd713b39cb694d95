"""Array expressions over inputs read in place, kept by rows (lower/rows.py): elementwise
operations, matrix products, slices of columns and reductions of arrays whose first axis is an
input's are lowered once, as a loop's body, not element by element. Values and gradients agree
with the program written out (`unroll` huge: every input element by element, every loop
unrolled), the graph does not grow with the data, and whatever needs the elements one by one
lists them, with the errors the elementwise lowering gives."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from draws import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_wholes import agrees_written_out, build, close, point

import diffdsl
from diffdsl.errors import DiffDSLError, LimitError, ShapeError

N = 100  # rows: past `unroll` (64)

# name -> source, with {n} the number of rows
PROGRAMS = {
    "a sum of squares": "input x[{n}]\noutput s = sum(x * x)",
    "logsumexp": "input x[{n}]\noutput s = logsumexp(x)",
    "mean, min and max": "input x[{n}]\ninput a\n"
                         "output s = mean(sin(x) * a) + min(x) * max(x - a)",
    "least squares": "input X[{n}, 3]\ninput w[3]\ninput y[{n}]\nr = X @ w - y\n"
                     "output s = mean(r ** 2)",
    "a two-layer network": "input X[{n}, 4]\ninput W[4, 5]\ninput b[5]\ninput v[5]\n"
                           "input y[{n}]\nh = tanh(X @ W + b)\n"
                           "output s = mean((h @ v - y) ** 2)",
    "reductions by axis": "input A[{n}, 3]\noutput s = sum(logsumexp(A, axis=1)) + "
                          "sum(max(A, axis=0)) + mean(A) + sum(mean(A, axis=-2) ** 2)",
    "logsumexp of a matrix and by its first axis":
        "input A[{n}, 2]\noutput s = logsumexp(A) * sum(logsumexp(A, axis=0))",
    "columns": "input X[{n}, 2]\noutput s = sum(X[:, 0] * exp(X[:, 1]))",
    "relu, clip and sigmoid": "input x[{n}]\ninput w\n"
                              "output s = sum(max(x * w, 0) ** 2 + clip(x, -0.5, 0.5) * "
                              "sigmoid(x))",
    "a dot product": "input x[{n}]\ninput y[{n}]\noutput s = x @ y + (-x) @ (y * 2)",
    "a vector times a matrix": "input x[{n}]\ninput Y[{n}, 3]\ninput c[3]\n"
                               "output s = (x @ Y) @ c",
    "broadcast rows and columns": "input A[{n}, 3]\ninput c[3]\ninput d[{n}, 1]\n"
                                  "output s = sum((A - c) * d / (1 + d * d))",
    "read by a loop at its index": "input x[{n}]\nr = exp(x) * 2\n"
                                   "output s = sum(r[i] * r[i] for i in range({n})) + r[3] "
                                   "+ r[-1]",
    "an array of the program's own": "input x[{n}]\nz = [i * 0.5 for i in range({n})]\n"
                                     "output s = sum(x * z)",
    "assigned again in a loop": "input x[{n}]\nr = x * 2\nfor k in range(3) {{\n"
                                "    r = r * 0.5 + 1\n}}\noutput s = sum(r)",
    "assigned again in a branch": "input x[{n}]\ninput c\nr = x * 2\nif c > 0 {{\n"
                                  "    r = r + c\n}}\noutput s = sum(r * r)",
    "assigned again in a while loop": "input x[{n}]\nr = x * 0.1\nwhile sum(r) < 5 max 4 {{\n"
                                      "    r = r + 1\n}}\noutput s = sum(r * r)",
    "an element and a slice": "input x[{n}]\nr = cos(x)\noutput s = r[7] * sum(r[1:5])",
    "passed to a def": "input x[{n}]\ndef f(v) = sum(v * v)\noutput s = f(x - 1)",
    "an output kept by rows": "input x[{n}]\ninput A[{n}, 2]\noutput s = x * 2 + 1\n"
                              "output t = exp(A) - x[0]",
    "a list read where arrays are needed": (
        "input x[{n}]\nS = [x, x * 2]\nfor r in [x, sin(x)] {{\n    S = S + r\n}}\n"
        "output s = sum(transpose([x, x * 2]) @ [1, 2]) + sum(S[0] * S[1]) + norm(S[1])"),
    "softmax": "input x[{n}]\ninput A[{n}, 2]\noutput s = sum(softmax(x) * x) + "
               "sum(softmax(A)[:, 1]) + softmax(x)[3]",
    "a list of columns reduced along it": (
        "input X[{n}, 3]\ninput alpha[4]\ninput mu[4, 3]\ninput q[4, 3]\n"
        "def component(X, a, m, s) = a + sum(s) - 0.5 * sum((exp(s) * (X - m)) ** 2, axis=1)\n"
        "output s = sum(logsumexp([component(X, alpha[c], mu[c], q[c]) for c in range(4)], "
        "axis=0))"),
    # A program with a derivative inside has tags, stripped from its outputs at the end:
    # an output kept whole kept its loop there (it was a GraphError, 0 node ids).
    "outputs kept by rows beside a derivative inside": (
        "input x[{n}]\ninput a\ninput A[{n}, 2]\ng = grad(sum(x ** 2) * a ** 3, a)\n"
        "output s = sum(x * g)\noutput t = x * grad(a ** 3, a) + g\n"
        "v = [a, a * 2]\noutput u = A @ grad(v[0] * v[1], v)"),
    "a stack, elementwise and indexed": (
        "input x[{n}]\ninput y[{n}]\nS = [x, x * 2, sin(y)]\nT = exp(S - y) * [[1], [2], [3]]\n"
        "output s = sum(max(T, axis=0)) + sum(S[1] * T[2]) + mean(T) + sum(sum(T, axis=1))"),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_kept_by_rows_agrees_with_the_program_written_out(name):
    agrees_written_out(PROGRAMS[name].format(n=N))


GROW = sorted(set(PROGRAMS) - {"an element and a slice", "a list read where arrays are needed",
                               "an array of the program's own", "assigned again in a loop",
                               "assigned again in a branch", "assigned again in a while loop"})


@pytest.mark.parametrize("name", GROW)
def test_graphs_do_not_grow_with_the_rows(name):
    """The same graph, and the same gradient graph, for 100 rows and 10^5 (a vjp lists a kept
    output: only its graph is compared)."""
    sizes = []
    for n in (N, 100_000):
        prog = build(PROGRAMS[name].format(n=n), backend="numpy")
        scalar = list(prog.outputs.values()) == [()]  # else outputs kept: their graph alone
        grad = diffdsl.graph.autodiff.grad(prog.graph) if scalar else prog.graph
        sizes.append((len(prog.graph.nodes), len(grad.nodes)))
    assert sizes[0] == sizes[1]
    assert sizes[0][0] < 200


def test_a_reduction_past_the_elements_limit():
    """sum(x * x) over 2 * 10^6 elements (past the elements limit: none is listed)."""
    n = 2_000_000
    prog = build(f"input x[{n}]\ninput a\noutput s = sum((x - a) ** 2)")
    x = np.linspace(-1, 1, n)
    g = prog.grad({"x": x, "a": 0.25})
    np.testing.assert_allclose(g["x"], 2 * (x - 0.25), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(g["a"], -2 * np.sum(x - 0.25), rtol=1e-9)


def test_elements_listed_past_the_limit_are_refused_where_made():
    source = "input x[2000000]\ny = x * 2\noutput s = y[1:]"
    with pytest.raises(LimitError) as err:
        build(source)
    assert err.value.span.line == 2
    assert "this array expression" in str(err.value)


def test_an_output_kept_by_rows_past_the_elements_limit(tmp_path):
    """An output of 2 * 10^6 elements over an input read in place is one loop storing them
    (not listed), from Python and from the command line (.npy in and out), batches too."""
    n = 2_000_000
    source = f"input x[{n}]\ninput a\noutput y = sin(x) * a + 1"
    prog = build(source)
    assert len(prog.graph.nodes) < 10
    x = np.linspace(-3, 3, n)
    # Absolute too: the loop's sin is glibc's vector sin (within 4 ulp), and y crosses 0.
    np.testing.assert_allclose(prog(x=x, a=2.0), np.sin(x) * 2 + 1, rtol=1e-15, atol=2e-15)
    small = build(source.replace(str(n), "100"))
    batch = np.random.default_rng(0).normal(size=(3, 100))
    np.testing.assert_allclose(small(x=batch, a=0.5), np.sin(batch) * 0.5 + 1, rtol=1e-15)
    (tmp_path / "p.dd").write_text(source + "\n")
    np.save(tmp_path / "x.npy", x)
    run = subprocess.run([sys.executable, "-m", "diffdsl", "eval", "p.dd", "--inputs",
                          "x=x.npy", "a=2", "--output", "y.npy"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.sin(x) * 2 + 1, rtol=1e-15,
                               atol=2e-15)


@pytest.mark.parametrize("source", [
    "input x[100]\ninput y[99]\noutput s = sum(x + y)",
    "input X[100, 3]\ninput w[4]\noutput s = sum(X @ w)",
    "input x[100]\nr = x * 2\noutput s = r[100]",
    "input x[100]\nr = x * 2\noutput s = r[0, 1]",
    "input x[100]\noutput s = sum(x > 0)",
    "input x[100]\noutput s = logsumexp(x, axis=1)",
])
def test_errors_are_those_of_the_program_written_out(source):
    errors = []
    for unroll in (64, 10**9):
        with pytest.raises(DiffDSLError) as err:
            build(source, unroll)
        errors.append((type(err.value), str(err.value)))
    assert errors[0] == errors[1]


def test_an_index_out_of_range_is_refused_as_such_without_listing():
    """r[n] of a kept array past the elements limit: the index's error, not the limit's."""
    with pytest.raises(DiffDSLError) as err:
        build("input x[2000000]\nr = x * 2\noutput s = r[2000000] + r[5, 1]")
    assert "out of range" in str(err.value) and err.value.span.line == 3
    with pytest.raises(DiffDSLError, match="too many indices"):
        build("input x[2000000]\nr = x * 2\noutput s = r[5, 1]")


def test_shape_errors_stay_located():
    with pytest.raises(ShapeError) as err:
        build("input x[100]\ninput y[99]\nz = x * 2\noutput s = sum(z + y)")
    assert err.value.span.line == 4


# A property: random elementwise expressions over two vectors, a matrix and a scalar, reduced
# in random ways, agree with the program written out.

LEAVES = ["x", "y", "a", "X[:, 0]", "X[:, 1]", "(X @ c)", "0.5"]
UNARY = ["sin", "exp", "tanh", "sigmoid", "softplus", "-", "abs"]
BINARY = ["+", "-", "*", "max", "min", "hypot"]
REDUCE = ["sum", "mean", "min", "max", "logsumexp"]


def expressions(depth: int):
    leaf = st.sampled_from(LEAVES)
    if depth == 0:
        return leaf
    sub = expressions(depth - 1)
    unary = st.tuples(st.sampled_from(UNARY), sub).map(
        lambda t: f"(-{t[1]})" if t[0] == "-" else f"{t[0]}({t[1]})")
    binary = st.tuples(st.sampled_from(BINARY), sub, sub).map(
        lambda t: f"{t[0]}({t[1]}, {t[2]})" if t[0].isalpha() else f"({t[1]} {t[0]} {t[2]})")
    return st.one_of(leaf, unary, binary)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=list(HealthCheck))
@given(body=expressions(3), reduce=st.sampled_from(REDUCE), assigned=st.booleans())
def test_random_expressions_agree_with_the_program_written_out(body, reduce, assigned):
    head = f"input x[{N}]\ninput y[{N}]\ninput X[{N}, 2]\ninput c[2]\ninput a\n"
    source = head + (f"r = {body}\noutput s = {reduce}(r + x)" if assigned
                     else f"output s = {reduce}({body} + x)")
    written = build(source, 10**9)
    x = point(written, len(source))
    prog = build(source)
    close(prog(x), written(x), 1e-9)
    close(prog.grad(x), written.grad(x), 1e-9)


@pytest.mark.parametrize("form", ["logsumexp(x)", "logsumexp(x[i] for i in range({n}))",
                                  "logsumexp(logsumexp([x, x], axis=0)) - log(2)"])
def test_logsumexp_gradient_keeps_its_digits_at_the_largest_element(form):
    """The gradient of logsumexp is the softmax weights, to a few ulps at every element: the
    shift (the max rounded down) carries no derivative. Differentiated through the max, the
    largest element's partial was its weight plus 1 minus the sum of all the weights, whose
    cancellation cost it digits as n grew (4e-13 relative at 10^5, 1e-9 at 10^6)."""
    n = 100_000
    prog = build(f"input x[{n}]\noutput s = " + form.format(n=n))
    x = np.random.default_rng(1).normal(size=n) * 3
    e = np.exp(x - x.max())
    weights = e / e.sum()
    got = prog.grad(x=x)["x"]
    assert np.max(np.abs(got - weights) / weights) < 2e-14


@pytest.mark.parametrize("loss", ["mean((x * w - y) ** 2)",
                                  "mean((x[i] * w - y[i]) ** 2 for i in range(70))"])
@pytest.mark.parametrize("first, second", [("grad", "hessian"), ("hessian", "hessian"),
                                           ("hessian", "grad"), ("grad", "grad")])
def test_derivatives_in_the_program_one_after_another(loss, first, second):
    """Two derivatives inside the program over an input read in place (a Newton step): the
    second's sweeps read the input's elements, which are copied back to the program's graph
    (once a TypeError: an input node copied as an op)."""
    source = (f"input x[70]\ninput y[70]\ninput w\nL = {loss}\n"
              f"w2 = w - {first}(L, w) / (1 + {second}(L * 2, w) ** 2)\n"
              "output s = mean((x * w2 - y) ** 2)")
    prog, written = build(source), build(source, 10**9)
    x = point(written, 3)
    close(prog(x), written(x))
    close(prog.grad(x), written.grad(x))


@settings(max_examples=examples(10), deadline=None, suppress_health_check=list(HealthCheck))
@given(body=expressions(2), reduce=st.sampled_from(REDUCE), k=st.integers(2, 6),
       listed=st.booleans())
def test_short_loops_over_arrays_of_rows_are_written_out_before_their_rows_are_listed(
        body, reduce, k, listed):
    """A short loop at the top of a program (k <= `unroll` iterations) whose body works on
    whole arrays of rows is written out, where those arrays stay loops: its body is not built
    first, element by element, only to be written out at its end. At 10^5 rows it lowers within
    5,000 nodes and steps (the body built first made 300,000 nodes: 27 s of lowering for a
    graph of 55), and at 100 it agrees with the program written out."""
    loop = (f"{reduce}([{body} * w[j] for j in range({k})], axis=0)" if listed
            else f"[{reduce}({body} * w[j]) for j in range({k})]")

    def source(n):
        return (f"input x[{n}]\ninput y[{n}]\ninput X[{n}, 2]\ninput c[2]\ninput a\n"
                f"input w[{k}]\noutput s = sum({loop})")
    with diffdsl.limits.using(nodes=5_000, steps=5_000):
        big = build(source(100_000), backend="numpy")
    assert len(big.graph.nodes) < 1_000
    written = build(source(N), 10**9, backend="numpy")
    x = point(written, len(loop))
    prog = build(source(N), backend="numpy")
    close(prog(x), written(x), 1e-9)
    close(prog.grad(x), written.grad(x), 1e-9)
