"""`while c max N as label { ... }`: a program reads how its loop ended (issue 23, item 6).

`label.steps` is the number of steps that ran and `label.converged` whether the loop stopped
on its own (its condition false, or a `break if`) rather than at `max`. Both are checked
against the same loops run in Python; their derivatives must be exactly zero, and every
backend must compute them as the numpy interpreter does.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from compare import backend_params, compare_with_reference

import diffdsl

BACKENDS = ["numpy", "cpu"]


def compile_(source: str, backend: str = "numpy"):
    return diffdsl.compile(source, filename="t.dd", backend=backend, cache=False)


NEWTON = """\
input c
input x0
r = x0
while abs(r * r - c) > 1e-12 * c max {N} as newton {{
    r = r - (r * r - c) / grad(r * r - c, r)
}}
output r
output steps = newton.steps
output converged = newton.converged
"""


def newton_in_python(c, x0, most):
    r, steps = x0, 0
    while abs(r * r - c) > 1e-12 * c and steps < most:
        r, steps = r - (r * r - c) / (2 * r), steps + 1
    return r, steps, abs(r * r - c) <= 1e-12 * c


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("c, x0", [(2.0, 1.0), (10.0, 3.0), (4.0, 2.0), (1e6, 1.0)])
@pytest.mark.parametrize("most", [3, 40])
def test_newton_reports_its_steps_and_whether_it_converged(c, x0, most, backend):
    prog = compile_(NEWTON.format(N=most), backend)
    r, steps, converged = newton_in_python(c, x0, most)
    out = prog(c=c, x0=x0)
    assert out["r"] == pytest.approx(r, rel=1e-15)
    assert (out["steps"], out["converged"]) == (steps, float(converged))
    if most == 3 and c == 1e6:  # from 1 to 1000 in 3 steps: not there
        assert out == {**out, "steps": 3.0, "converged": 0.0}
    if c == 4.0:  # already the root: no step, converged
        assert (out["steps"], out["converged"]) == (0.0, 1.0)


def test_a_loop_that_reaches_its_goal_on_its_last_step_has_converged():
    """The condition is tested once more after step N: three halvings of 8 reach 1."""
    prog = compile_("input x\nt = x\nwhile t > 1 max 3 as halve { t = t / 2 }\n"
                    "output n = halve.steps\noutput ok = halve.converged\n")
    assert prog(x=8.0) == {"n": 3.0, "ok": 1.0}
    assert prog(x=8.5) == {"n": 3.0, "ok": 0.0}
    assert prog(x=0.5) == {"n": 0.0, "ok": 1.0}


@pytest.mark.parametrize("backend", BACKENDS)
def test_their_derivatives_are_exactly_zero(backend):
    prog = compile_(NEWTON.format(N=6), backend)
    for c in (2.0, 1e6):
        for of in ("steps", "converged"):
            grads = prog.grad(c=c, x0=1.0, of=of)
            assert grads == {"c": 0.0, "x0": 0.0}, of
            hess = prog.hessian(c=c, x0=1.0, of=of)
            assert all(v == 0.0 for row in hess.values() for v in row.values()), of
            assert prog.jacobian(c=c, x0=1.0, of=of, mode="forward") == {"c": 0.0, "x0": 0.0}
    # while the root itself carries the derivative of the steps that ran: 1 / (2 sqrt(c))
    assert prog.grad(c=2.0, x0=1.0, of="r")["c"] == pytest.approx(0.5 / 2 ** 0.5, rel=1e-9)


@pytest.mark.parametrize("backend", backend_params())
def test_every_backend_computes_them_as_the_interpreter(backend):
    compare_with_reference(NEWTON.format(N=5), backend, hessians=False)
    compare_with_reference(NEWTON.format(N=2), backend, batch=(3,), hessians=False)


def test_break_if_is_converged_and_counts_the_step_it_stopped():
    prog = compile_("input x\nt = x\nwhile t > 0 max 6 as walk {\n    t = t - 1\n"
                    "    break if t < 2.5\n    t = t - 0.5\n}\noutput t\n"
                    "output n = walk.steps\noutput ok = walk.converged\n")
    for x in (1.0, 4.0, 9.0, 50.0):
        t, n, ok = x, 0, True
        while t > 0:
            if n == 6:
                ok = False
                break
            n += 1
            t -= 1
            if t < 2.5:
                break
            t -= 0.5
        assert prog(x=x) == {"t": t, "n": float(n), "ok": float(ok)}, x


def test_a_static_loop_gives_static_values():
    prog = compile_("input x\nk = 0\nwhile k < 4 max 10 as count { k += 1 }\n"
                    "output y = x * count.steps + count.converged\n"
                    "while k < 9 max 2 as short { k += 1 }\n"
                    "output z = short.steps + 10 * short.converged\n")
    assert "select" not in prog.graph.op_counts()
    assert prog(x=2.0) == {"y": 9.0, "z": 2.0}


def test_a_loop_value_is_a_name_in_every_expression():
    """In a later loop's condition (just before its `max`), and as an unnamed output, which
    takes the name as written."""
    prog = compile_("input x\nt = x\nwhile t > 1 max 10 as halve { t = t / 2 }\n"
                    "k = 0\nwhile k < halve.steps max 10 { k += 1 }\n"
                    "output k\noutput halve.steps\n")
    assert prog.outputs == {"k": (), "halve.steps": ()}
    assert prog(x=100.0) == {"k": 7.0, "halve.steps": 7.0}


def test_labels_follow_the_scoping_of_names():
    """Read in a later condition, in an if, after a loop inside a def; and a label set in one
    branch of a dynamic if only is undefined after it, with the reason."""
    prog = compile_("def root(c) {\n    r = c\n    while abs(r * r - c) > 1e-9 max 30 as it {\n"
                    "        r = (r + c / r) / 2\n    }\n    return [r, it.steps]\n}\n"
                    "input c\nout = root(c)\n"
                    "output tries = if out[1] > 5 then 1 else 0\noutput out\n")
    r, steps = 2.0, 0
    while abs(r * r - 2) > 1e-9 and steps < 30:
        r, steps = (r + 2 / r) / 2, steps + 1
    out = prog(c=2.0)
    assert out["tries"] == 0.0 and list(out["out"]) == [r, steps]
    with pytest.raises(diffdsl.UnknownNameError) as caught:
        compile_("input x\nt = x\nif x > 0 {\n    while t > 1 max 3 as h { t = t / 2 }\n}\n"
                 "output n = h.steps\n")
    assert (caught.value.span.line, caught.value.span.column) == (6, 12)
    assert "only in one branch of the `if` at line 3" in str(caught.value)


ERRORS = [
    ("input x\nt = x\nwhile t > 1 max 3 as h { t = t / 2 }\noutput h\n",
     diffdsl.UnknownNameError, (4, 8), "'h' names a while loop: read h.steps or h.converged"),
    ("input x\nt = x\nwhile t > 1 max 3 as h { t = t / 2 }\noutput h.step\n",
     diffdsl.UnknownNameError, (4, 10), "did you mean 'h.steps'?"),
    ("input x\nt = x\nwhile t > 1 max 3 as h { t = t / 2 }\noutput t.steps\n",
     diffdsl.TypeMismatchError, (4, 8), "'t' is a value, not a named while loop"),
    ("input x\noutput q.converged\n", diffdsl.UnknownNameError, (2, 8),
     "unknown while loop 'q'"),
    ("input x\noutput (x + 1).steps\n", diffdsl.DDSyntaxError, (2, 15),
     "unexpected character '.'"),
    ("input x\nwhile x > 1 max 3 as { }\noutput x\n", diffdsl.DDSyntaxError, (2, 22),
     "expected a name"),
]


@pytest.mark.parametrize("source, error, where, words", ERRORS, ids=[e[3] for e in ERRORS])
def test_errors_are_located(source, error, where, words):
    with pytest.raises(error) as caught:
        compile_(source)
    span = caught.value.span
    assert (span.line, span.column) == where
    assert words in str(caught.value)


def test_the_command_line_prints_them(tmp_path):
    source = tmp_path / "newton.dd"
    source.write_text(NEWTON.format(N=3))
    done = subprocess.run([sys.executable, "-m", "diffdsl", "eval", str(source), "--inputs",
                           "c=1e6", "x0=1", "--json"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"steps": 3.0' in done.stdout and '"converged": 0.0' in done.stdout
    np.testing.assert_allclose(newton_in_python(1e6, 1.0, 3)[1], 3)
