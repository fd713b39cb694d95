"""Vectors whose tail is one value (lower/padded.py): `zeros(n)` filled in from the front.

Values and every kind of derivative agree with the program written out (`unroll` huge), on the
CPU and the reference interpreter, for fixed programs and generated ones; the graph of an
integrator started from rest does not grow with the length of its state."""

from __future__ import annotations

import math

import numpy as np
import pytest
from draws import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_wholes import agrees_written_out, build, close, point

from diffdsl.language.lower import padded

N = 80  # elements: past `unroll` (64)

ODE = """
const n = {n}
const s = {s}
const h = 2.0 / s
input x[n]
def f(x, y) = [if i == 0 then x[0] else x[i] * y[i - 1] for i in range(n)]
y = zeros(n)
for step in range(s) {{
    k1 = f(x, y)
    k2 = f(x, y + h / 2 * k1)
    k3 = f(x, y + h / 2 * k2)
    k4 = f(x, y + h * k3)
    y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
}}
output yf = y
output last = y[n - 1] + y[4 * s]
"""

# name -> source, with {n} the length of the vectors
PROGRAMS = {
    "an integrator started from rest": ODE.replace("{s}", "3"),
    "a boundary condition and a shift forwards": (
        "input x[{n}]\ninput a\ny = zeros({n})\n"
        "for t in range(3) {{\n"
        "    y = [if i < 2 then a * x[i] else y[i - 2] * 2 + y[i - 1] for i in range({n})]\n"
        "    y = y + [if i < {n} - 1 then y[i + 1] * a else 0 for i in range({n})]\n}}\n"
        "output s = sum(y * x) + y[-1] + y[5]"),
    "a fill that is a node": (
        "input x[{n}]\ninput a\nz = zeros({n}) + a\n"
        "w = [if i == 3 then x[i] else z[i] * 2 for i in range({n})]\n"
        "v = sin(w) - z\noutput s = sum(v * x) + v[-1] * len(v)\noutput v = v"),
    "ones scaled, divided and read at a stride": (
        "input x[{n}]\ninput a\ny = ones({n}) * a\n"
        "y = [if i < 4 then x[i] else (if i < 40 then y[i] / (1 + y[2 * i - 8]) else y[i]) "
        "for i in range({n})]\n"
        "output s = sum(y) + mean(y ** 2) + logsumexp(y) + y @ x"),
    "negative zero": (
        "input x[{n}]\ny = zeros({n}) * -1\n"
        "y = [if i == 0 then x[0] else y[i] for i in range({n})]\n"
        "output s = sum(atan2(y, -1.0 + 0 * x)) + 1 / (1 + exp(y[-1]))"),
    "assigned in branches, an element set": (
        "input x[{n}]\ninput a\ny = zeros({n})\nif a > 0 {{\n    y = y + a\n}} else {{\n"
        "    y = [if i == 1 then a else y[i] for i in range({n})]\n}}\n"
        "z = zeros({n})\nz[2] = a * x[0]\nz = z * 3\noutput s = sum(y * x) + sum(z * x)"),
    "elements set and added to, the whole added to": (
        "input x[{n}]\ninput a\ny = zeros({n})\ny[0] = a\ny[3] = x[5] * a\ny[-1] = 2.0\n"
        "y += a * y\ny[3] += 1\nz = ones({n})\nz[1] -= a\nz -= y\n"
        "z = [if i == 0 then z[0] else z[i - 1] * x[i] for i in range({n})]\n"
        "output s = sum(z * x) + z[-1] + z[50]"),
    "a def called twice on one": (
        "input x[{n}]\n"
        "def g(x, y) = [if i == 0 then x[0] else y[i - 1] ** 2 for i in range({n})]\n"
        "y = ones({n})\nu = g(x, y)\nv = g(x, y)\nw = g(x, u)\noutput s = sum((u + v + w) * x)"),
    "a long loop carrying one": (
        "input x[{n}]\ny = zeros({n})\nfor t in range(70) {{\n"
        "    y = [if i == 0 then x[0] else 0.5 * y[i - 1] + 0.01 * y[i] for i in range({n})]\n"
        "}}\noutput s = sum(y * x)"),
}


# Derivatives in the program by a name that holds one: listed where bound, each element a
# variable (found by review: the Padded reached the binding's tags, a TypeError)
BY_ONE = [
    "input x[{n}]\ny = zeros({n})\noutput g = grad(sum(y * x), y)",
    "input x[{n}]\ninput a\ny = zeros({n})\ny[0] = a\noutput g = grad(sum(y * y), y[0])",
    "input x[{n}]\ninput a\ny = zeros({n})\ny[0] = a\noutput g = grad(sum(y * y * x), y[0:3])",
    "input x[{n}]\ny = zeros({n})\ny += x[1]\noutput g = grad(sum(y * x), y)",
    "input x[{n}]\ninput a\ndef f(c) {{\n    y = zeros({n})\n    y[0] = c\n"
    "    return grad(sum(y * y * c), y)\n}}\noutput g = f(a)",
]


@pytest.mark.parametrize("source", BY_ONE)
def test_a_derivative_by_a_name_holding_one(source):
    agrees_written_out(source.format(n=N))


def test_an_index_compared_with_a_huge_integer_keeps_the_loop():
    """`i == 10 ** 400` is false in every iteration (it was an OverflowError)."""
    agrees_written_out("input x[80]\noutput s = sum(if i == 10 ** 400 then 0 else x[i] "
                       "for i in range(80))")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_padded_programs_agree_with_the_program_written_out(name):
    agrees_written_out(PROGRAMS[name].format(n=N), hvp=True)


def test_an_integrator_from_rest_has_one_graph_whatever_its_length():
    sizes = [len(build(ODE.format(n=n, s=3)).graph.nodes) for n in (100, 10_000, 1_000_000)]
    assert sizes[0] == sizes[1] == sizes[2]


def test_the_ode_beyond_its_front_is_exactly_zero_with_a_zero_gradient():
    prog = build(ODE.format(n=200, s=3))
    x = point(prog)
    y = prog(x)["yf"]
    assert np.all(y[12:] == 0) and np.all(y[:12] != 0)  # four stages a step, three steps
    written = build(ODE.format(n=200, s=3), 10**9)
    assert np.array_equal(written(x)["yf"], y)
    close(prog.grad(x, of="last"), written.grad(x, of="last"))


def test_padded_values_are_kept_where_the_program_fills_them_in():
    """The lowering keeps the tail (the test runs the path it names): elementwise operations
    and a comprehension reading the head give a Padded whose head is what changed."""
    seen = []
    real = padded.make

    def spy(head, fill, n, span):
        out = real(head, fill, n, span)
        seen.append((len(head), type(out).__name__))
        return out
    padded.make = spy
    try:
        build(ODE.format(n=100, s=1))
    finally:
        padded.make = real
    assert ("Padded" in {kind for _, kind in seen}) and max(m for m, _ in seen) <= 5


CONDITIONS = ["i == {c}", "i < {c}", "i <= {c}", "i != {c}", "{c} > i", "i >= {c}"]


@st.composite
def programs(draw):
    """A vector filled in from zeros or ones by elementwise steps and comprehensions whose
    bodies read it at shifts and strides, under conditions on the index."""
    lines = ["input x[{n}]", "input a", f"y = {draw(st.sampled_from(['zeros', 'ones']))}({{n}})"]
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["elementwise", "comprehension", "comprehension", "set"]))
        if kind == "set":
            at = draw(st.integers(-3, 8))
            op = draw(st.sampled_from(["=", "+=", "*="]))
            lines.append(f"y[{at}] {op} {draw(st.sampled_from(['a', 'x[3] * a', '2']))}")
            continue
        if kind == "elementwise":
            op = draw(st.sampled_from(["+", "-", "*"]))
            other = draw(st.sampled_from(["a", "0.5", "x[0]", "y", "-1"]))
            fn = draw(st.sampled_from(["", "", "sin", "exp", "tanh"]))
            lines.append(f"y = {fn}(y {op} {other})" if fn else
                         draw(st.sampled_from([f"y = y {op} {other}", f"y {op}= {other}"])))
            continue
        d = draw(st.integers(1, 3))
        test = draw(st.sampled_from(CONDITIONS)).format(c=draw(st.integers(0, 6)))
        then = draw(st.sampled_from(["x[i]", "a * x[0]", "0", "y[i] * a"]))
        body, guard = draw(st.sampled_from([
            (f"y[i - {d}]", f"i >= {d}"), (f"y[{d} * i]", f"i < {{n}} // {d}"),
            (f"y[i + {d}]", f"i < {{n}} - {d}"), ("x[i]", "0 == 0"), ("a", "0 == 0")]))
        more = draw(st.sampled_from(["", " * y[i]", " + 0.5 * y[i]", " * a"]))
        lines.append(f"y = [if {test} then {then} else (if {guard} then {body}{more} else a)"
                     f" for i in range({{n}})]")
    lines.append(f"output s = sum(y * x) + y[{draw(st.integers(0, 10))}] + y[-1]")
    return "\n".join(lines)


@settings(max_examples=examples(15), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(source=programs())
def test_generated_padded_programs_agree_with_the_program_written_out(source):
    source = source.format(n=N)
    written = build(source, 10**9)
    x = point(written)
    for backend in ("cpu", "numpy"):
        prog = build(source, backend=backend)
        close(prog(x), written(x))
        close(prog.grad(x), written.grad(x))


class _Body:  # what loop_index.compare reads of the loop a body builds: its trip count
    def __init__(self, n: int):
        self.n = n


@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 40), a=st.sampled_from([-3, -2, -1, 1, 2, 3]), b=st.integers(-20, 20),
       other=st.integers(-30, 30) | st.sampled_from([0.5, -2.5, math.inf, -math.inf, math.nan,
                                                     10 ** 400, -10 ** 400, True]),
       op=st.sampled_from(["eq", "ne", "lt", "le", "gt", "ge"]),
       index_left=st.booleans())
def test_a_changing_comparison_says_from_which_iteration_its_answer_stays(n, a, b, other, op,
                                                                        index_left):
    """`Changes.last`, against every iteration's answer: the last that differs from the final
    one. Where no error is raised, the answer is the same in every iteration."""
    import operator

    from diffdsl.language.loop_index import Changes, Index, compare
    body = _Body(n)
    test = getattr(operator, op)
    index = Index(((body, a),), b)
    answers = [bool(test(b + a * i, other) if index_left else test(other, b + a * i))
               for i in range(n)]
    try:
        got = compare(test, index, other) if index_left else compare(test, other, index)
    except Changes as change:
        assert change.body is body
        differ = [i for i in range(n) if answers[i] != answers[-1]]
        assert differ and change.last == differ[-1]
        return
    assert all(x == answers[0] for x in answers) and got == answers[0]
