"""`while c max N { ... }` and `break if c` (issue 13): loops that stop on the data.

Values are checked against the same loops run in Python; derivatives against derivatives
carried through those Python loops by hand (the chain rule, step by step) and against central
finite differences. Hypothesis draws the step map, the exit test and the start point.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import diffdsl

BACKENDS = ["numpy", "cpu"]


def compile_(source: str, backend: str = "numpy"):
    return diffdsl.compile(source, filename="t.dd", backend=backend, cache=False)


HALVING = """\
input x
t = x
k = 0
while t > 1 max 10 {
    t = t / 2
    k += 1
}
output t
output k
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x", [0.5, 1.0, 3.0, 100.0, 1e9])
def test_the_loop_runs_while_the_condition_holds_and_at_most_n_times(x, backend):
    prog = compile_(HALVING, backend)
    t, k = x, 0
    while t > 1 and k < 10:
        t, k = t / 2, k + 1
    out = prog(x=x)
    assert (out["t"], out["k"]) == (t, k)
    # each step that ran halves the derivative; the exit test adds nothing
    assert prog.grad(x=x, of="t")["x"] == 0.5 ** k
    assert prog.grad(x=x, of="k")["x"] == 0.0


def test_zero_steps_and_a_condition_false_at_once():
    prog = compile_("input x\nt = x\nwhile t > 1 max 0 { t = t / 2 }\n"
                    "u = x\nwhile x < -100 max 5 { u = u * 3 }\noutput t\noutput u\n")
    assert prog(x=7.0) == {"t": 7.0, "u": 7.0}
    assert prog.grad(x=7.0, of="u")["x"] == 1.0


def test_a_static_condition_simply_unrolls():
    prog = compile_("input x\nk = 0\ns = x\nwhile k < 4 max 10 {\n    s = s * x\n    k += 1\n"
                    "    last = k\n}\noutput s\noutput n = last\n")
    assert "select" not in prog.graph.op_counts()
    assert prog(x=2.0) == {"s": 32.0, "n": 4.0}  # a name first set in the body persists here


def test_names_first_assigned_in_a_dynamic_body_are_undefined_after_it():
    with pytest.raises(diffdsl.UnknownNameError) as caught:
        compile_("input x\nt = x\nwhile t > 1 max 3 {\n    h = t / 2\n    t = h\n}\n"
                 "output h\n")
    assert caught.value.span.line == 7


def test_graph_size_grows_linearly_in_n():
    sizes = {n: len(compile_(HALVING.replace("max 10", f"max {n}")).graph) for n in (10, 20, 40)}
    assert sizes[40] - sizes[20] == 2 * (sizes[20] - sizes[10]) > 0


# --- derivatives follow the steps that ran; nothing leaks from the others -----------------------

ROOTS = ("input x\nt = x\nwhile t > 0.5 max 6 { t = sqrt(t - 0.5) + log(t - 0.5) * 0.01 }\n"
         "output t\n")


def roots_by_hand(x):
    """The loop of ROOTS with dt/dx and d2t/dx2 carried along by the chain rule."""
    t, d, dd = x, 1.0, 0.0
    for _ in range(6):
        if not t > 0.5:
            break
        u = t - 0.5
        f1 = 0.5 / math.sqrt(u) + 0.01 / u  # d step / dt
        f2 = -0.25 / u ** 1.5 - 0.01 / u ** 2
        t, d, dd = math.sqrt(u) + 0.01 * math.log(u), f1 * d, f2 * d * d + f1 * dd
    return t, d, dd


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x", [0.3, 0.9, 1.7, 3.0])
def test_no_nan_from_steps_that_did_not_run(x, backend):
    """After the loop stops, each later step computes sqrt and log of a negative number (NaN,
    with NaN derivatives): the select keeps them out of every derivative."""
    prog = compile_(ROOTS, backend)
    t, d, dd = roots_by_hand(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the NaNs of the steps not taken, computed and dropped
        assert prog(x=x) == pytest.approx(t, rel=1e-14)
        assert prog.grad(x=x)["x"] == pytest.approx(d, rel=1e-12)
        assert prog.jacobian(x=x, mode="forward")["x"] == pytest.approx(d, rel=1e-12)
        assert prog.jvp({"x": 1.0}, x=x) == pytest.approx(d, rel=1e-12)
        assert prog.hessian(x=x)["x"]["x"] == pytest.approx(dd, rel=1e-10)


# --- break if ----------------------------------------------------------------------------------

NEWTON = """\
input x
input c
r = x
steps = 0
while 1 > 0 max 40 {
    f = r * r - c
    break if abs(f) < 1e-12
    r = r - f / grad(r * r - c, r)
    steps += 1
}
output r
output steps
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_break_if_stops_in_the_middle_of_a_step(backend):
    prog = compile_(NEWTON, backend)
    for x, c in [(1.0, 2.0), (3.0, 5.0), (1.0, 1.0)]:
        r, steps, dx, dc = x, 0, 1.0, 0.0
        while steps < 40 and abs(r * r - c) >= 1e-12:
            # r' = r / 2 + c / (2 r): the chain rule by hand through each step that runs
            dx, dc = (0.5 - c / (2 * r * r)) * dx, (0.5 - c / (2 * r * r)) * dc + 1 / (2 * r)
            r, steps = r - (r * r - c) / (2 * r), steps + 1
        out = prog(x=x, c=c)
        assert (out["r"], out["steps"]) == (r, steps)
        grads = prog.grad(x=x, c=c, of="r")
        assert grads["x"] == pytest.approx(dx, rel=1e-9, abs=1e-20)
        assert grads["c"] == pytest.approx(dc, rel=1e-12)
        if steps:  # converged: d root / d c is 1 / (2 sqrt(c)), the start no longer matters
            assert abs(grads["x"]) < 1e-11 and grads["c"] == pytest.approx(0.5 / c ** 0.5)


def test_static_break_conditions():
    prog = compile_("input x\ns = x\nk = 0\nwhile 1 > 0 max 9 {\n    k += 1\n    break if k > 3\n"
                    "    s = s * 2\n    break if 1 > 2\n}\noutput s\n")
    assert "select" not in prog.graph.op_counts()
    assert prog(x=1.0) == 8.0


def test_symbolic_export_and_check_of_a_short_loop():
    """A loop of 3 steps with a `break if` exports as nested Piecewise; `diffdsl check` proves
    its derivatives against sympy.diff (50 digits) and finite differences."""
    from diffdsl.symbolic.check import check
    from diffdsl.symbolic.report import format_check

    prog = compile_("input x\ninput a\nt = x\nwhile t > 1 max 3 {\n    t = t * a / 2\n"
                    "    break if t < 0.2\n    t = t + 0.1\n}\noutput t\n")
    (formula,) = prog.to_sympy().values()
    symbols = {s.name: s for s in formula.free_symbols}
    for x, a in [(0.5, 1.0), (3.0, 1.5), (9.0, 1.9), (1.5, 0.2)]:
        assert float(formula.subs({symbols["x"]: x, symbols["a"]: a})) == \
            pytest.approx(prog(x=x, a=a), rel=1e-14)
    report = check(prog.graph)
    assert report["ok"], format_check(report)
    assert {e["status"] for e in report["symbolic"]["t"].values()} <= {"proven", "numeric50"}


# --- where a while may stand -------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_in_a_def_nested_and_in_a_dynamic_if(backend):
    prog = compile_("""\
def collatz_like(a) {
    n = 0
    while a > 1 max 8 {
        a = if a > 3 then a / 2 else a - 0.75
        n += 1
    }
    return [a, n]
}
input x
input y
out = collatz_like(x)
total = 0
i = 0
while i < y max 4 {
    j = 0
    while j < i max 4 {
        total += x * j
        j += 1
    }
    i += 1
}
z = x
if y > 2 {
    while z < 10 max 5 { z = z * y }
}
output out
output total
output z
""", backend)

    def collatz_like(a):
        n = 0
        while a > 1 and n < 8:
            a, n = (a / 2 if a > 3 else a - 0.75), n + 1
        return [a, n]

    for x, y in [(7.0, 3.0), (2.5, 1.5), (0.5, 4.0)]:
        total, i = 0.0, 0
        while i < y and i < 4:
            total += sum(x * j for j in range(min(i, 4)))
            i += 1
        z = x
        if y > 2:
            k = 0
            while z < 10 and k < 5:
                z, k = z * y, k + 1
        out = prog(x=x, y=y)
        np.testing.assert_allclose(out["out"], collatz_like(x), rtol=1e-15)
        assert out["total"] == pytest.approx(total) and out["z"] == pytest.approx(z)


# --- errors -------------------------------------------------------------------------------------

ERRORS = [
    ("input x\nwhile x > 0 max x { }\noutput x\n", diffdsl.StaticValueError, (2, 17),
     "must be static"),
    ("input x\nwhile x > 0 max 2.5 { }\noutput x\n", diffdsl.TypeMismatchError, (2, 17),
     "must be an integer"),
    ("input x\nwhile x > 0 max -1 { }\noutput x\n", diffdsl.ShapeError, (2, 17),
     "cannot be negative"),
    ("input x\ny = x\nwhile y > 0 max 3 { y = [y, y] }\noutput y\n", diffdsl.ShapeError, (3, 1),
     "has shape [] before a step of the loop and [2] after it"),
    ("input x\nwhile [x, x] max 3 { }\noutput x\n", diffdsl.ShapeError, (2, 7),
     "a condition must be a scalar"),
    ("input x\nwhile x > 0 max 3 { const c = 1 }\noutput x\n", diffdsl.AssignmentError, (2, 21),
     "only at the top level"),
    ("input x\nbreak if x > 0\noutput x\n", diffdsl.AssignmentError, (2, 1),
     "directly in the body of a while loop"),
    ("input x\nwhile x > 0 max 3 { if x > 1 { break if x > 2 } }\noutput x\n",
     diffdsl.AssignmentError, (2, 32), "directly in the body of a while loop"),
    ("input x\nwhile x > 0 max 1000001 { }\noutput x\n", diffdsl.LimitError, (2, 17), "steps"),
    ("input x\nwhile x > 0 { }\noutput x\n", diffdsl.DDSyntaxError, (2, 13), "expected 'max'"),
]


@pytest.mark.parametrize("source, error, where, words", ERRORS, ids=[e[3] for e in ERRORS])
def test_errors_are_located(source, error, where, words):
    with diffdsl.limits.using(steps=1_000_000), pytest.raises(error) as caught:
        compile_(source)
    span = caught.value.span
    assert (span.line, span.column) == where
    assert words in str(caught.value)


def test_cli_runs_a_while_loop_and_reports_errors(tmp_path):
    good, bad = tmp_path / "halve.dd", tmp_path / "bad.dd"
    good.write_text(HALVING)
    bad.write_text("input x\nwhile x > 0 max x { }\noutput x\n")
    done = subprocess.run([sys.executable, "-m", "diffdsl", "grad", str(good), "--of", "t",
                           "--inputs", "x=12", "--json"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"value": 0.75' in done.stdout and '"x": 0.0625' in done.stdout
    done = subprocess.run([sys.executable, "-m", "diffdsl", "eval", str(bad), "--inputs", "x=1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "bad.dd:2:17: error" in done.stderr
    assert "Traceback" not in done.stderr


# --- Hypothesis: random loops against the same loop in Python, derivatives by hand -------------

STEPS = {  # text, step(t, p), d step / dt, d step / dp
    "affine": ("t * p + 0.3", lambda t, p: t * p + 0.3, lambda t, p: p, lambda t, p: t),
    "sine": ("t + p * sin(t)", lambda t, p: t + p * math.sin(t),
             lambda t, p: 1 + p * math.cos(t), lambda t, p: math.sin(t)),
    "square": ("t * t * p - 0.1", lambda t, p: t * t * p - 0.1, lambda t, p: 2 * t * p,
               lambda t, p: t * t),
}
TESTS = {"t < 3": lambda t: t < 3, "abs(t) > 0.2": lambda t: abs(t) > 0.2,
         "t * t < 4": lambda t: t * t < 4}


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(step=st.sampled_from(sorted(STEPS)), test=st.sampled_from(sorted(TESTS)),
       n=st.integers(0, 12), x=st.floats(-2.5, 2.5), p=st.floats(0.2, 1.6),
       with_break=st.booleans())
def test_random_loops_match_python(step, test, n, x, p, with_break):
    text, fn, d_t, d_p = STEPS[step]
    keep = TESTS[test]
    if with_break:  # the same exit, taken by `break if` at the top of the body
        loop = f"while 1 > 0 max {n} {{\n    break if not ({test})\n    t = {text}\n}}\n"
    else:
        loop = f"while {test} max {n} {{\n    t = {text}\n}}\n"
    prog = compile_(f"input x\ninput p\nt = x\n{loop}output t\n")
    t, dx, dp = x, 1.0, 0.0
    for _ in range(n):
        # Away from the exit test's boundary, where rounding could decide either way.
        assume(all(abs(t - edge) > 1e-6 for edge in (3, 0.2, -0.2, 2, -2)))
        if not keep(t):
            break
        dx, dp = d_t(t, p) * dx, d_t(t, p) * dp + d_p(t, p)
        t = fn(t, p)
        assume(abs(t) < 1e6)
    got = prog(x=x, p=p)
    grads = prog.grad(x=x, p=p)
    assert got == pytest.approx(t, rel=1e-12, abs=1e-12)
    assert grads["x"] == pytest.approx(dx, rel=1e-9, abs=1e-9)
    assert grads["p"] == pytest.approx(dp, rel=1e-9, abs=1e-9)
