"""Comprehensions kept as loops whose values are not listed (lower/mapped.py): a later loop
that reads `r[i + c]` of a comprehension `r` computes the row there, with the comprehension's
body. Values and every kind of derivative agree with the program written out (`unroll` huge),
on the CPU and the reference interpreter; graphs do not grow with the data; a body past the
fusion limit, a nested reader or a read the loop cannot stream lists the rows as before."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from draws import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_wholes import agrees_written_out, build, close, point

import diffdsl
from diffdsl.errors import DiffDSLError
from diffdsl.graph import autodiff
from diffdsl.language.lower import mapped

N = 100  # rows: past `unroll` (64)
BIG = " + ".join(f"sin(x[i] * {k + 1})" for k in range(90))  # past `mapped.FUSED` nodes

# name -> source, with {n} the number of rows
PROGRAMS = {
    "a comprehension squared and summed": (
        "input x[{n}]\nd = [x[i] * 2 - 1 for i in range({n})]\noutput s = sum(d ** 2)"),
    "differences, then differences of those": (
        "input x[{n}]\nd = [x[i + 1] - x[i] for i in range({n} - 1)]\n"
        "output s = sum(d * d) + sum(sin(d[i + 1] - d[i]) for i in range({n} - 2))"),
    "a chain of three": (
        "input x[{n}]\ninput a\nu = [exp(x[i] * a) for i in range({n})]\n"
        "v = [u[i] * x[i] - 1 for i in range({n})]\nw = [v[i] * v[i] for i in range({n})]\n"
        "output s = mean(w) + max(v)"),
    "rows of vectors": (
        "input X[{n}, 3]\ninput c[3]\nM = [X[i] * c + X[i, 0] for i in range({n})]\n"
        "output s = sum(M @ c) + sum(sum(M, axis=0) ** 2) + sum(M[i, 1] * M[i, 2] "
        "for i in range({n}))"),
    "strided and shifted reads": (
        "input x[{n}]\nr = [cos(x[i]) for i in range({n})]\n"
        "output s = sum(r[2 * i] * r[2 * i + 1] for i in range({n} // 2)) + "
        "sum(r[i + 3] for i in range({n} - 3))"),
    "logsumexp and softmax of one": (
        "input x[{n}]\ninput a\nr = [x[i] * a for i in range({n})]\n"
        "output s = logsumexp(r) + sum(softmax(r) * x)"),
    "beside inputs read in place": (
        "input x[{n}]\ninput y[{n}]\nr = [x[i] * y[i] for i in range({n})]\n"
        "output s = sum((r - y) ** 2) + sum(r[i] * x[i] for i in range({n}))"),
    "made in a def": (
        "input x[{n}]\ninput y[{n}]\ndef f(x, y) = [x[i] * y[i] + 1 for i in range({n})]\n"
        "k = f(x, y)\nz = y + 0.5 * k\noutput s = sum(z * z)"),
    "an output that is one": (
        "input x[{n}]\ninput a\noutput r = [sin(x[i]) * a for i in range({n})]\n"
        "output s = sum([x[i] * x[i] for i in range({n})])"),
    "read at static indices and sliced": (
        "input x[{n}]\nr = [x[i] * x[i] for i in range({n})]\n"
        "output s = r[0] + r[-1] * r[5] + sum(r[10:20])"),
    "read backwards": (
        "input x[{n}]\nr = [exp(x[i]) for i in range({n})]\n"
        "output s = sum(r[{n} - 1 - i] * x[i] for i in range({n}))"),
    "stored, read backwards": (
        "input x[{n}]\nr = [" + BIG + " for i in range({n})]\n"
        "output s = sum(r[{n} - 1 - i] * x[i] for i in range({n}))"),
    "read by a nested loop": (
        "input x[{n}]\ninput W[70, {n}]\nr = [tanh(x[i]) for i in range({n})]\n"
        "output s = sum(sum(W[j, i] * r[i] for i in range({n})) ** 2 for j in range(70))"),
    "read by loops of a short loop written out": (
        "input x[{n}]\ninput W[3, {n}]\nr = [tanh(x[i]) for i in range({n})]\n"
        "output s = sum(sum(W[j, i] * r[i] for i in range({n})) ** 2 for j in range(3))"),
    "assigned again in a loop": (
        "input x[{n}]\nr = [x[i] * 2 for i in range({n})]\nfor k in range(3) {{\n"
        "    r = r * 0.5 + 1\n}}\noutput s = sum(r * r)"),
    "a body past the fusion limit": (
        "input x[{n}]\nr = [" + BIG + " for i in range({n})]\noutput s = sum(r * r) + max(r)"),
    # Bodies past the fusion limit: stored by their loop, read whole by their readers, whose
    # pullbacks leave the cotangents where the loop's own pullback streams them, or, where
    # they do not tile the rows, adds them value by value.
    "stored, read at a static index too": (
        "input x[{n}]\nr = [" + BIG + " for i in range({n})]\n"
        "output s = r[0] * 2 + sum(r * r) + r[{n} - 1]"),
    "stored, under a guard outside": (
        "input x[{n}]\ninput c\nr = [" + BIG + " for i in range({n})]\n"
        "output s = max(sum(r), c) + min(mean(r * r), c)"),
    "stored rows of vectors": (
        "input X[{n}, 2]\ninput w[2]\nM = [X[i] * (" + BIG.replace("x[i]", "X[i, 0]")
        + ") for i in range({n})]\noutput s = sum((M @ w) ** 2) + sum(M[i, 1] for i in "
        "range({n}))"),
    "stored, read shifted": (
        "input x[{n}]\nr = [" + BIG + " for i in range({n})]\n"
        "output s = sum(r[i + 1] * r[i] for i in range({n} - 1))"),
    "stored, read by a scan": (
        "input x[{n}]\nr = [" + BIG + " for i in range({n})]\nacc = 0.0\n"
        "for t in range({n}) {{\n    acc = acc * 0.5 + r[t] * x[t]\n}}\noutput s = acc"),
    "stored, an output too": (
        "input x[{n}]\nr = [" + BIG + " for i in range({n})]\noutput o = r\n"
        "output s = sum(r * x)"),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_fused_rows_agree_with_the_program_written_out(name):
    agrees_written_out(PROGRAMS[name].format(n=N), hvp=True)


GROW = sorted(set(PROGRAMS) - {"read at static indices and sliced", "stored, read backwards",
                               "strided and shifted reads",  # a loop of 50: written out
                               # at 10^5 rows the loop of 3 is kept too, and its body's
                               # loop, nested, lists the rows
                               "read by loops of a short loop written out",
                               "read by a nested loop", "assigned again in a loop",
                               "an output that is one",
                               "stored, read by a scan", "stored, an output too",
                               "stored, read at a static index too",
                               "stored, under a guard outside"})


@pytest.mark.parametrize("name", GROW)
def test_graphs_do_not_grow_with_the_rows(name):
    """The same graph and gradient graph for 100 rows and 10^5."""
    sizes = []
    for n in (N, 100_000):
        prog = build(PROGRAMS[name].format(n=n), backend="numpy")
        sizes.append((len(prog.graph.nodes), len(autodiff.grad(prog.graph).nodes)))
    assert sizes[0] == sizes[1]
    assert sizes[0][0] < 100


def parts(prog) -> int:
    return Counter(node.op for node in prog.graph.nodes)["part"]


def test_what_is_fused_what_is_stored_and_what_is_listed():
    """A body within the limit is built into its readers (no part node per row); one past it
    is computed once, by its own loop, whose readers stream its values as it stored them;
    such rows read backwards, and a nested reader, list the rows as part nodes."""
    fused = build(PROGRAMS["a comprehension squared and summed"].format(n=N))
    assert parts(fused) == 1  # the sum's
    large = build(PROGRAMS["a body past the fusion limit"].format(n=N))
    ops = Counter(node.op for node in large.graph.nodes)
    assert ops["region"] == 3 and parts(large) == 2  # map, sum, max; the sum and the max
    assert ops_in_bodies(large.graph)["sin"] == 90  # once, in the map's body
    assert parts(build(PROGRAMS["read backwards"].format(n=N))) == 1  # fused, backwards
    for name in ("stored, read backwards", "read by a nested loop"):
        assert parts(build(PROGRAMS[name].format(n=N))) >= N, name


def ops_in_bodies(graph) -> Counter:
    found = Counter()
    for node in graph.nodes:
        found[node.op] += 1
        if node.op == "region":
            found += ops_in_bodies(node.attr.body)
    return found


def test_a_small_body_is_built_into_each_loop_that_reads_it():
    """logsumexp's two loops (its max, then its shifted sum) each compute a small item: the
    graph is that of the text, at 10^5 rows as at 200."""
    source = "input x[{n}]\ninput c\noutput y = logsumexp([sin(x[j] * c) for j in range({n})])"
    graphs = [build(source.format(n=n)).graph for n in (200, 100_000)]
    assert len(graphs[0].nodes) == len(graphs[1].nodes)
    assert Counter(node.op for node in graphs[0].nodes)["part"] == 2  # the max, the sum


def test_the_elements_limit_counts_only_what_is_listed():
    """A comprehension of 2 * 10^6 rows reduced by a loop is never listed; its slice lists
    it, refused at the elements limit, located at the comprehension."""
    n = 2_000_000
    prog = build(f"input x[{n}]\nr = [x[i] * x[i] for i in range({n})]\noutput s = sum(r)")
    x = np.linspace(-1, 1, n)
    assert prog(x=x) == pytest.approx(np.sum(x * x), rel=1e-12)
    np.testing.assert_allclose(prog.grad(x=x)["x"], 2 * x, rtol=1e-15)
    with pytest.raises(DiffDSLError) as err:
        build(f"input x[{n}]\nr = [x[i] * x[i] for i in range({n})]\noutput s = r[1:]")
    assert err.value.span.line == 2 and "this comprehension" in str(err.value)


@pytest.mark.parametrize("source", [
    "input x[100]\nr = [x[i] for i in range(100)]\noutput s = sum(r[i + 1] for i in range(100))",
    "input x[100]\nr = [x[i] for i in range(100)]\noutput s = r[100]",
    "input x[100]\nr = [x[i] for i in range(100)]\noutput s = sum(r[i, 0] for i in range(100))",
    "input x[100]\nr = [x[i] for i in range(100)]\ninput y[99]\noutput s = sum(r + y)",
])
def test_errors_are_those_of_the_program_written_out(source):
    errors = []
    for unroll in (64, 10**9):
        with pytest.raises(DiffDSLError) as err:
            build(source, unroll)
        errors.append((type(err.value), str(err.value), err.value.span.line))
    assert errors[0] == errors[1]


# A property: chains of comprehensions, each reading the inputs and the ones before it at
# shifted indices, through random elementwise functions, reduced in random ways, agree with
# the program written out.

FUNCS = ["sin({})", "exp(0.3 * {})", "tanh({})", "{} * {}", "({} - 1) ** 2", "abs({})",
         "max({}, 0.1)"]
REDUCE = ["sum({})", "mean({})", "max({})", "min({})", "logsumexp({})"]


@st.composite
def chains(draw):
    lines = ["input x[80]", "input y[80]", "input a"]
    arrays = ["x", "y"]
    length = {"x": 80, "y": 80}
    for k in range(draw(st.integers(1, 4))):
        n = 76 - 3 * k  # each past `unroll`; a read i + 3 within every array before
        shift = draw(st.integers(0, 3))
        src = draw(st.sampled_from(arrays))
        other = draw(st.sampled_from(arrays + ["a"]))
        term = f"{src}[i + {shift}]" if draw(st.booleans()) else \
            f"{src}[{length[src] - 1 - shift} - i]"  # backwards
        if other != "a":
            term = f"({term} + {other}[i])"
        else:
            term = f"({term} * a)"
        body = draw(st.sampled_from(FUNCS)).format(term, term)
        lines.append(f"r{k} = [{body} for i in range({n})]")
        arrays.append(f"r{k}")
        length[f"r{k}"] = n
    last = arrays[-1]
    total = draw(st.sampled_from(REDUCE)).format(last)
    lines.append(f"output s = {total} + sum({arrays[-1]}[i] * {arrays[2]}[i] "
                 f"for i in range({n}))")
    return "\n".join(lines)


@settings(max_examples=examples(20), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(source=chains(), backend=st.sampled_from(["cpu", "numpy"]),
       stored=st.booleans())
def test_chains_of_comprehensions_agree_with_the_program_written_out(source, backend, stored):
    """Fused (the default for these small bodies), or stored (`FUSED` 0: every body past
    the limit, each comprehension computed by its loop and its rows streamed)."""
    written = build(source, 10**9, backend="numpy")
    limit = mapped.FUSED
    mapped.FUSED = 0 if stored else limit
    try:
        prog = build(source, backend=backend)
    finally:
        mapped.FUSED = limit
    x = point(written)
    close(prog(x), written(x), rtol=1e-10)
    close(prog.grad(x), written.grad(x), rtol=1e-9)
    tangent = {name: np.linspace(-1, 1, int(np.prod(shape))).reshape(shape)
               for name, shape in written.inputs.items()}
    close(prog.hvp(x, tangent), written.hvp(x, tangent), rtol=1e-8)


def test_rows_listed_by_two_loops_pass_back_both_cotangents():
    """r0 is read whole by two loops that read only its first 73 rows, so the reverse sweep
    lists its values for each: the part nodes made for the first loop's pullback, already
    gathered for r0's, get the second's cotangents too (before the fix, the second's were
    dropped: a gradient off by up to 0.4)."""
    source = ("input x[80]\nr0 = [sin(x[i]) for i in range(76)]\n"
              "r1 = [sin(r0[i]) for i in range(73)]\n"
              "output s = sum(r1[i] * r0[i] for i in range(73))")
    written = build(source, 10**9)
    x = point(written)
    limit = mapped.FUSED
    mapped.FUSED = 0
    try:
        stored = build(source)
    finally:
        mapped.FUSED = limit
    close(stored.grad(x), written.grad(x))


def test_the_comprehension_of_the_forum_example_grows_no_graph():
    """`diffdsl.compile` of a program that names a comprehension: at 10^5 rows, a graph of
    a few nodes whose gradient is right."""
    n = 100_000
    prog = diffdsl.compile(f"input x[{n}]\nd = [x[i + 1] - x[i] for i in range({n - 1})]\n"
                           "output tv = sum(d ** 2)", cache=False)
    assert len(prog.graph.nodes) < 10
    x = np.sin(np.arange(n) * 0.01)
    g = prog.grad(x=x)["x"]
    d = np.diff(x)
    want = np.zeros(n)
    want[1:] += 2 * d
    want[:-1] -= 2 * d
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-15)
