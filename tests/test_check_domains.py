"""`diffdsl check`'s default points: ranges inside the domains of the program's functions,
worked out by hand for each program below, and a property: wherever the analysis moves a
range, every point drawn from it puts the argument inside the op's domain."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl import cli
from diffdsl.symbolic.domains import default_ranges

LOG5 = math.log(5.0)
# program body of `output f = ...` over `input x` -> (low, high, ops), derived by hand
CASES = {
    "log(x)": (0.5, 1.5, []),  # the default range is already inside x > 0
    "sqrt(x - 1)": (1.5, 2.5, ["sqrt"]),  # x > 1
    "asin(x)": (-0.5, 0.5, ["asin"]),  # the middle half of (-1, 1)
    "acos(3 * x + 7)": (-2.5, -13 / 6, ["acos"]),  # (-8/3, -2), middle half
    "1 / (x - 1)": (1.5, 2.5, ["division"]),  # x != 1: the side above
    "1 / (1 - x)": (1.5, 2.5, ["division"]),
    "log(x - 3)": (3.5, 4.5, ["log"]),
    "lgamma(x - 2)": (2.5, 3.5, ["lgamma"]),  # away from the poles at x - 2 = 0, -1, ...
    "log(-x)": (-1.5, -0.5, ["log"]),  # x < 0
    "tan(2 * x)": (-math.pi / 8, math.pi / 8, ["tan"]),  # |2x| < pi/2, middle half
    "log(exp(x) - 5)": (LOG5 + 0.5, LOG5 + 1.5, ["log"]),  # x > log 5
    "sqrt(1 / x - 2)": (0.125, 0.375, ["sqrt"]),  # 1/x > 2: 0 < x < 1/2
    "(x - 2) ** 0.5": (2.5, 3.5, ["pow"]),  # a real power of x - 2 > 0
    "acosh(x) + log(2 - x)": (1.25, 1.75, ["acosh", "log"]),  # 1 < x < 2
    "log(sqrt(x - 1) - 1)": (2.5, 3.5, ["log", "sqrt"]),  # sqrt(x - 1) > 1: x > 2
    "log(2 ** x - 4)": (2.5, 3.5, ["log"]),  # 2**x > 4
    "cbrt(x - 1)": (1.5, 2.5, ["cbrt"]),  # cbrt' is infinite at x = 1
    # one case for each invertible step, the bound worked out through its inverse
    "log(atan(x) - 1)": (math.tan(1) + 0.5, math.tan(1) + 1.5, ["log"]),
    "log(tanh(x) - 0.5)": (math.atanh(0.5) + 0.5, math.atanh(0.5) + 1.5, ["log"]),
    "log(sinh(x) - 2)": (math.asinh(2) + 0.5, math.asinh(2) + 1.5, ["log"]),
    "log(asinh(x) - 2)": (math.sinh(2) + 0.5, math.sinh(2) + 1.5, ["log"]),
    "log(expm1(x) - 2)": (math.log(3) + 0.5, math.log(3) + 1.5, ["log"]),
    "log(log1p(x) - 2)": (math.expm1(2) + 0.5, math.expm1(2) + 1.5, ["log", "log1p"]),
    "log(log2(x) - 2)": (4.5, 5.5, ["log", "log2"]),  # log2's need x > 0 is met too
    "log(log10(x) - 2)": (100.5, 101.5, ["log", "log10"]),
    "log(cbrt(x) - 2)": (8.5, 9.5, ["log"]),
    "log(x ** 3 - 8)": (2.5, 3.5, ["log"]),
    "log(-2 * x - 1)": (-2.0, -1.0, ["log"]),  # x < -1/2
    "log(x / -2 - 1)": (-3.5, -2.5, ["log"]),  # x < -2
    "log(-3 / x - 1)": (-2.5, -1.5, ["log"]),  # -3 < x < 0, wide: [L + 0.5, L + 1.5)
    "log(0.5 ** x - 4)": (-3.5, -2.5, ["log"]),  # x < -2
    "log(atanh(x) - 1)": (math.tanh(1) + (1 - math.tanh(1)) / 4,  # tanh(1) < x < 1
                          1 - (1 - math.tanh(1)) / 4, ["atanh", "log"]),
    "(x - 3) ** -1": (0.5, 1.5, []),  # x != 3, already outside the default range
    "atanh(x / 4)": (0.5, 1.5, []),  # |x| < 4 holds the default range
    "if x > 0 then sqrt(x) else 0": (0.5, 1.5, []),  # guarded: meant for every x
    "log(x) + log(-x)": (0.5, 1.5, []),  # nowhere finite: nothing to choose
    "acosh(0.25 * atan(x))": (0.5, 1.5, []),  # atan(x) > 4 never holds (found by the property)
    "x ** 3 + sin(x)": (0.5, 1.5, []),
}


@pytest.mark.parametrize("body", CASES)
def test_ranges_worked_out_by_hand(body):
    low, high, ops = CASES[body]
    found = default_ranges(diffdsl.compile(f"input x\noutput f = {body}").graph)["x"]
    np.testing.assert_allclose([found["low"][0], found["high"][0]], [low, high], rtol=1e-12)
    assert found["ops"] == ops


def test_ranges_per_element_and_what_several_inputs_share():
    prog = diffdsl.compile("input v[3]\ninput y\ninput z\n"
                           "output f = log(v[0]) + sqrt(v[1] - 2) + asin(v[2]) + log(y + z)")
    found = default_ranges(prog.graph)
    np.testing.assert_array_equal(found["v"]["low"], [0.5, 2.5, -0.5])
    np.testing.assert_array_equal(found["v"]["high"], [1.5, 3.5, 0.5])
    for name in "yz":  # log(y + z) depends on two inputs: the analysis says nothing
        assert (found[name]["low"][0], found[name]["high"][0], found[name]["ops"]) == \
            (0.5, 1.5, [])


def _check(capsys, tmp_path, body, *options):
    path = tmp_path / "p.dd"
    path.write_text(f"input x\noutput f = {body}\n")
    code = cli.main(["check", str(path), *options])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("body", ["log(x - 3)", "sqrt(x - 1)", "asin(x)", "1 / (x - 1)",
                                  "acosh(x) + log(2 - x)"])
def test_check_compares_at_every_point(capsys, tmp_path, body):
    """Every point is inside the domain: each of the 3 points x 3 directions (2 random, 1
    coordinate) is compared. From [0.5, 1.5), the range before, some points were outside
    it for the programs that are not finite everywhere there (the pole of `1 / (x - 1)` is a
    single point: the new range keeps 0.5 away from it)."""
    code, out = _check(capsys, tmp_path, body, "--json")
    numeric = json.loads(out)["numeric"]["f"]["x"]
    assert code == 0 and numeric["ok"] and numeric["checked"] == 3 * 3
    if "/" not in body:
        code, out = _check(capsys, tmp_path, body, "--json", "--domain", "x=0.5:1.5")
        assert json.loads(out)["numeric"]["f"]["x"]["checked"] < 3 * 3


def test_check_says_where_points_come_from_and_domain_wins(capsys, tmp_path):
    code, out = _check(capsys, tmp_path, "log(x - 3)")
    assert code == 0
    assert out.splitlines()[0] == "x: points drawn from [3.5, 4.5), clear of the " \
                                  "singularities of log"
    assert "finite differences max rel err" in out
    code, out = _check(capsys, tmp_path, "log(x - 3)", "--domain", "x=0.5:1.5")
    assert out.splitlines()[0] == "x: points drawn from [0.5, 1.5), as given"
    assert "finite differences: no point where the output is finite" in out
    code, out = _check(capsys, tmp_path, "log(x) + log(-x)")  # said plainly, not "ok" alone
    assert not out.startswith("x:") and "no point where the output is finite" in out


# The property ------------------------------------------------------------------------------
# Invertible steps a chain is built from; `c` is a constant, never 0.
# (`c / e` is left out: its inverse maps an interval around 0 to two, which the analysis
# leaves alone; the cases above cover it.)
STEPS = ["({e} + {c})", "({e} - {c})", "({c} - {e})", "({c} * {e})", "({e} / {c})", "(-{e})",
         "exp({e})", "log({e})", "cbrt({e})", "sinh({e})", "atan({e})", "tanh({e})",
         "({e}) ** 3", "2 ** {e}"]
# The op at the top and the open interval its argument needs.
TOPS = {"log": (0.0, math.inf), "sqrt": (0.0, math.inf), "asin": (-1.0, 1.0),
        "acos": (-1.0, 1.0), "acosh": (1.0, math.inf), "atanh": (-1.0, 1.0),
        "log1p": (-1.0, math.inf)}
constants = st.sampled_from([0.25, 0.5, 1.5, 2.0, 3.0]).flatmap(
    lambda c: st.sampled_from([c, -c]))


def _inside(top: str, values: np.ndarray, strict: bool) -> np.ndarray:
    """In the open interval (`strict`) or the closed one. Float64 can round a value onto a
    bound (tanh(20) is 1.0): drawn points are let off that, and a grid point counts only
    when it is strictly inside. NaN is outside."""
    a, b = TOPS[top]
    if strict:
        return (values > a) & (values < b)
    return (values >= a) & (values <= b)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(STEPS), constants), min_size=1, max_size=3),
       st.sampled_from(sorted(TOPS)))
def test_every_point_drawn_is_inside_the_domain(chain, top):
    """Every point drawn from the range chosen puts the argument of the op at the top inside
    its domain, unless no point does (none of a dense grid): then nothing could be done."""
    arg = "x"
    for step, c in chain:
        arg = step.format(e=arg, c=repr(c))
    found = default_ranges(diffdsl.compile(f"input x\noutput f = {top}({arg})").graph)["x"]
    points = np.random.default_rng(0).uniform(found["low"][0], found["high"][0], 64)
    chain_of = diffdsl.compile(f"input x\noutput e = {arg}", backend="numpy")
    with np.errstate(all="ignore"):
        if _inside(top, chain_of(x=points), strict=False).all():
            return
        grid = np.concatenate([np.linspace(-50, 50, 400_001), np.geomspace(1e-6, 1, 1000),
                               -np.geomspace(1e-6, 1, 1000)])
        somewhere = grid[_inside(top, chain_of(x=grid), strict=True)]
    assert somewhere.size == 0, (top, arg, found, somewhere[:3])
