"""`grad(e, x)` inside a program follows the names (issue 23, item 1): every value computed
from x's binding varies with x, through locals, defs, loops, `while` and branches; a value
computed without it does not, even where hash-consing merged it with an equal one.

The oracles are independent of the code under test: closed forms (the Black-Scholes Greeks,
derivatives worked out by hand) and, in the Hypothesis test, the program's own derivatives
(autodiff over the whole graph) of a program in which the binding differentiated by is an
input.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import norm

import diffdsl

BACKENDS = ["numpy", "cpu"]


def compile_(source: str, backend: str = "numpy"):
    return diffdsl.compile(source, filename="t.dd", backend=backend, cache=False)


# --- the issue's case: Black-Scholes Greeks written the natural way ----------------------------

BLACK_SCHOLES = """\
input S
input K
input r
input sigma
input T
def Phi(d) = 0.5 * (1 + erf(d / sqrt(2)))
d1 = (log(S / K) + (r + sigma ** 2 / 2) * T) / (sigma * sqrt(T))
d2 = d1 - sigma * sqrt(T)
C = S * Phi(d1) - K * exp(-r * T) * Phi(d2)
output C
output delta = grad(C, S)
output vega = grad(C, sigma)
output gamma = hessian(C, S)
output rho = grad(C, r)
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("S, K, r, sigma, T", [(100, 95, 0.05, 0.3, 0.75), (100, 100, 0.05, 0.2, 1),
                                               (42, 60, 0.01, 0.45, 2.5)])
def test_black_scholes_greeks_match_their_closed_forms(S, K, r, sigma, T, backend):
    prog = compile_(BLACK_SCHOLES, backend)
    out = prog(S=S, K=K, r=r, sigma=sigma, T=T)
    d1 = (math.log(S / K) + (r + sigma ** 2 / 2) * T) / (sigma * math.sqrt(T))
    d2 = d1 - sigma * math.sqrt(T)
    assert out["C"] == pytest.approx(S * norm.cdf(d1) - K * math.exp(-r * T) * norm.cdf(d2),
                                     rel=1e-13)
    assert out["delta"] == pytest.approx(norm.cdf(d1), rel=1e-13)
    assert out["vega"] == pytest.approx(S * norm.pdf(d1) * math.sqrt(T), rel=1e-12)
    assert out["gamma"] == pytest.approx(norm.pdf(d1) / (S * sigma * math.sqrt(T)), rel=1e-12)
    assert out["rho"] == pytest.approx(K * T * math.exp(-r * T) * norm.cdf(d2), rel=1e-12)


# --- through every construct ---------------------------------------------------------------------

# (body defining y from the input x, d y / d x by hand)
THROUGH = [
    ("y = x * x * x", lambda x: 3 * x ** 2),
    ("w = x\ny = x * w", lambda x: 2 * x),
    ("def cube(a) = a * a * a\ny = cube(x) + cube(2)", lambda x: 3 * x ** 2),
    ("y = 0\nfor k in range(4) {\n    y = y + x ** k\n}", lambda x: 1 + 2 * x + 3 * x ** 2),
    ("v = [x * k for k in range(4)]\ny = sum(v) * x", lambda x: 12 * x),
    ("if x > 1 {\n    y = x ** 3\n} else {\n    y = 2 * x\n}",
     lambda x: 3 * x ** 2 if x > 1 else 2.0),
    ("y = x\nwhile y > 1 max 10 {\n    y = y / 2\n}",
     lambda x: 0.5 ** max(0, min(10, math.ceil(math.log2(x))))),
    ("def f(a) {\n    b = a\n    for k in range(2) {\n        b = sin(b)\n    }\n    return b\n}"
     "\ny = f(x)", lambda x: math.cos(math.sin(x)) * math.cos(x)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("body, slope", THROUGH, ids=["local", "alias", "def", "for",
                                                       "comprehension", "if", "while",
                                                       "def with a loop"])
def test_a_value_computed_from_x_varies_with_x(body, slope, backend):
    prog = compile_(f"input x\n{body}\noutput g = grad(y, x)\n", backend)
    for x in (0.3, 1.7, 5.0):
        assert prog(x=x) == pytest.approx(slope(x), rel=1e-13)


def test_a_value_computed_before_the_binding_is_a_constant():
    """`u` is bound again after `y` was computed from its first value: y does not vary with
    the new binding, and `u * y` varies as `y`."""
    prog = compile_("input x\nu = x\ny = u * u\nu = 3 * x\n"
                    "output zero = grad(y, u)\noutput slope = grad(u * y, u)\n")
    assert prog(x=2.0) == {"zero": 0.0, "slope": 4.0}


def test_equal_values_of_other_names_stay_constants():
    """The issue's `a = sin(z); b = sin(z); grad(a * b, a)` is sin(z), and a value computed
    from b is no more a function of a than b is."""
    prog = compile_("input z\na = sin(z)\nb = sin(z)\nc = b * b\n"
                    "output y = grad(a * b + c, a)\n")
    assert prog(z=0.4) == pytest.approx(math.sin(0.4), rel=1e-15)


def test_a_dynamic_if_that_assigns_x_binds_it_where_it_ends():
    """On both paths: `y` was computed before the `if` bound u, so it is a constant there."""
    prog = compile_("input x\nu = x\ny = u * u\nif x > 0 {\n    u = u + 1\n}\n"
                    "output a = grad(y, u)\noutput b = grad(u * u, u)\n")
    for x in (-2.0, 2.0):
        u = x + 1 if x > 0 else x
        assert prog(x=x) == {"a": 0.0, "b": 2 * u}


def test_a_derivative_varies_with_the_names_it_was_computed_from():
    """d(y^2)/dx = 2 y (2 x) is computed from y's binding; its derivative by y is 4 x
    (PyTorch's torch.autograd.grad with create_graph gives the same)."""
    prog = compile_("input x\ny = x * x\noutput a = grad(grad(y * y, x), y)\n"
                    "output b = grad(y * y, x)\n")
    assert prog(x=1.5) == {"a": 4 * 1.5, "b": 4 * 1.5 ** 3}


def test_a_static_binding_is_a_variable():
    prog = compile_("input x\nk = 2.5\nm = k * k\noutput y = grad(m * x, k)\n")
    assert prog(x=2.0) == 2 * 2.5 * 2.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_elements_and_slices_of_a_named_array(backend):
    prog = compile_("input S[3]\nC = S[0] * S[1] ** 2 + sin(S[2]) * S[0]\n"
                    "output a = grad(C, S[1])\noutput b = grad(C, S[1:])\n"
                    "output h = hessian(C, S[0:2])\noutput j = jacobian([C, C * C], S[2])\n",
                    backend)
    s0, s1, s2 = S = np.array([1.5, -2.0, 0.7])
    out = prog(S=S)
    c = s0 * s1 ** 2 + np.sin(s2) * s0
    assert out["a"] == pytest.approx(2 * s0 * s1, rel=1e-14)
    np.testing.assert_allclose(out["b"], [2 * s0 * s1, np.cos(s2) * s0], rtol=1e-14)
    np.testing.assert_allclose(out["h"], [[0, 2 * s1], [2 * s1, 2 * s0]], rtol=1e-14)
    np.testing.assert_allclose(out["j"], [np.cos(s2) * s0, 2 * c * np.cos(s2) * s0], rtol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_derivatives_by_an_input_again_and_again_in_a_long_loop(backend):
    """Each `grad` needs a few nodes out of all lowered since x was bound: the sweeps then run
    on a copy of what e needs (derivatives.py); the results are those of the closed form,
    dynamic selects (whose rules look at the nodes below) included."""
    prog = compile_("input x\ns = 0\nh = 0\nfor k in range(60) {\n"
                    "    s = s + grad(sin(k * x) * x, x)\n"
                    "    h = h + hessian(if x > k / 60 then sqrt(x - k / 60) ** 3 else 0, x)\n"
                    "}\noutput s\noutput h\n", backend)
    k = np.arange(60)
    for x in (0.37, 0.9):
        out = prog(x=x)
        assert out["s"] == pytest.approx(np.sum(np.sin(k * x) + k * x * np.cos(k * x)), rel=1e-12)
        u = x - k / 60
        want = np.sum(np.where(u > 0, 0.75 / np.sqrt(np.where(u > 0, u, 1)), 0))
        assert out["h"] == pytest.approx(want, rel=1e-12)


def test_no_tag_reaches_the_graph():
    prog = compile_("input x\ninput v[2]\nk = 2.0\np = v * x\nfor i in range(3) {\n"
                    "    p = p - 0.1 * grad(sum(p * p) * k, p)\n}\noutput p\n"
                    "output g = grad(grad(x * sum(v) ** 2, v)[0] * x, x)\n")
    names = {n.attr[0] for n in prog.graph.nodes if n.op == "input"}
    assert names == {"x", "v"}


ERRORS = [
    ("input x\nconst c = 3\noutput y = grad(c * x, c)\n", diffdsl.TypeMismatchError, (3, 24),
     "'c' is a const"),
    ("input x\noutput y = grad(pi * x, pi)\n", diffdsl.TypeMismatchError, (2, 25),
     "'pi' is a constant"),
    ("input x\noutput y = grad(x * x, x + 1)\n", diffdsl.TypeMismatchError, (2, 24),
     "must be a name"),
    ("input x\nn = 3\nv = [x for k in range(n)]\noutput g = grad(sum(v) * n, n)\n",
     diffdsl.StaticValueError, (3, 23), "'n' is differentiated by grad()"),
]


@pytest.mark.parametrize("source, error, where, words", ERRORS, ids=[e[3] for e in ERRORS])
def test_errors_are_located(source, error, where, words):
    with pytest.raises(error) as caught:
        compile_(source)
    span = caught.value.span
    assert (span.line, span.column) == where
    assert words in str(caught.value)


# --- Hypothesis: through locals, as the program's own gradient ---------------------------------

HEAD = "def h(p, q) = p * sin(q) + q\ninput x\ninput y\n"


@st.composite
def blocks(draw):
    """Statements that define t0, t1, ... from x, y and the names before: expressions, calls
    of a def, dynamic ifs, for and while loops. Returns the blocks, one per name."""
    names, out = ["x", "y"], []
    for k in range(draw(st.integers(1, 5))):
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names + ["0.5", "2"]))
        op = draw(st.sampled_from(["+", "-", "*"]))
        new = f"t{k}"
        kind = draw(st.sampled_from(["expr", "call", "if", "for", "while"]))
        if kind == "expr":
            text = f"{new} = {draw(st.sampled_from(['sin', 'tanh', '']))}({a} {op} {b})"
        elif kind == "call":
            text = f"{new} = h({a}, {b})"
        elif kind == "if":
            text = (f"if {a} > 0.25 {{\n    {new} = {a} {op} {b}\n}} else {{\n"
                    f"    {new} = {b} * {b}\n}}")
        elif kind == "for":
            text = f"{new} = {a}\nfor i in range(3) {{\n    {new} = {new} {op} {b} * 0.5\n}}"
        else:
            text = (f"{new} = {a}\nwhile abs({new}) > 0.5 max 3 {{\n"
                    f"    {new} = {new} * 0.5 + 0.1 * {b}\n}}")
        names.append(new)
        out.append(text)
    return out


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(body=blocks(), pick=st.integers(0, 10), x=st.floats(-1.5, 1.5), y=st.floats(-1.5, 1.5))
def test_grad_through_locals_is_the_programs_own_gradient(body, pick, x, y):
    last, mid = f"t{len(body) - 1}", pick % len(body)
    inner = compile_(HEAD + "\n".join(body) + f"\noutput gx = grad({last}, x)\n"
                     f"output hx = hessian({last}, x)\noutput gm = grad({last}, t{mid})\n"
                     f"output m = t{mid}\n")
    got = inner(x=x, y=y)
    outer = compile_(HEAD + "\n".join(body) + f"\noutput f = {last}\n")
    np.testing.assert_allclose(got["gx"], outer.grad(x=x, y=y)["x"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["hx"], outer.hessian(x=x, y=y)["x"]["x"], rtol=1e-11,
                               atol=1e-11)
    # The binding of t{mid} made an input: the program's own gradient by it.
    cut = list(body)
    cut[mid] = f"t{mid} = tin"
    by_input = compile_(HEAD + "input tin\n" + "\n".join(cut) + f"\noutput f = {last}\n")
    want = by_input.grad(x=x, y=y, tin=got["m"])["tin"]
    np.testing.assert_allclose(got["gm"], want, rtol=1e-12, atol=1e-12)
