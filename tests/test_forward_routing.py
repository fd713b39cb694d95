"""A value a select made constant carries exactly zero tangent, whatever meets it after.

The mirror of tests/test_select_routing.py for what follows a select: `t = if x > 0 then x
else 0` is the constant 0 where x <= 0, and an op whose derivative is infinite at 0 (sqrt,
cbrt, `t ** 0.5`, acos(1 - t)) applied to t afterwards must not turn that zero tangent into
0 * inf = NaN in forward mode (reverse mode routes the cotangent through the select's guard;
forward mode now keeps the same guard). Hypothesis draws programs over such values in sums,
products, quotients, powers, nested dynamic ifs, a generator sum and a `def` called twice.
Where the guard is false every derivative (grad, both Jacobian modes, hessian, jvp) is exactly
0; where it holds, it equals that of the program written without the select. Found by the long
fuzz run, through a `while` loop whose body set its variable to a constant.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_select_routing import FUNCTION, derivatives, uses

import diffdsl

# Finite at t = 0 with an infinite derivative there.
STEEP = ["sqrt(t)", "cbrt(t)", "t ** 0.5", "acos(1 - t)", "sqrt(t) * t + cbrt(t)"]
DEAD_POINTS = [-1.0, -0.25, 0.0]
LIVE_POINTS = [0.5, 1.7]


@st.composite
def programs(draw):
    """(the program with the select, the same program with t = x)."""
    steep = draw(st.sampled_from(STEEP))
    e = draw(uses(4)).replace("x", "t").replace("@", f"({steep})")
    select = draw(st.sampled_from(["t = if x > 0 then x else 0\n",
                                   "t = 0\nif x > 0 { t = x }\n",
                                   "t = abs(x)\nwhile t > -1 max 1 {\n    break if x > 0\n"
                                   "    t = 0 * 0.5\n}\n"]))
    head = FUNCTION + "input x\n"
    return head + select + f"output y = {e}\n", head + f"t = x\noutput y = {e}\n"


def check(text: str, live_text: str, backend: str) -> None:
    guarded = diffdsl.compile(text, backend=backend)
    live = diffdsl.compile(live_text, backend=backend)
    for x in DEAD_POINTS + LIVE_POINTS:
        with np.errstate(all="ignore"):
            if not np.isfinite(guarded(x=x)):
                continue  # the value itself is infinite here (a division by the 0)
            want = derivatives(live, x) if x > 0 else None
            got = derivatives(guarded, x)
        for kind, value in got.items():
            if want is None:
                assert value == 0.0, f"{kind} at x = {x} on {backend}: {value}\n{text}"
            elif np.isfinite(want[kind]):
                np.testing.assert_allclose(value, want[kind], rtol=1e-9, atol=1e-12,
                                           err_msg=f"{kind} at x = {x} on {backend}:\n{text}")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_steep_op_after_a_select_numpy(case):
    check(*case, backend="numpy")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_steep_op_after_a_select_cpu(case):
    check(*case, backend="cpu")


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_the_fuzzed_program(backend):
    prog = diffdsl.compile("input v[2]\nt0 = abs(v[0])\nwhile t0 > -1 max 1 {\n"
                           "    break if (1.5 < v[0]) and (t0 > 2)\n    t0 = 0 * 0.5\n}\n"
                           "output y = (cbrt(t0) * (t0 * 2))\n", backend=backend)
    v = np.array([-1.36782666, 1.09552723])
    for mode in ("forward", "reverse"):
        assert prog.jacobian(v=v, mode=mode)["v"].tolist() == [0.0, 0.0]
    assert prog.jvp({"v": np.ones(2)}, v=v) == 0.0
