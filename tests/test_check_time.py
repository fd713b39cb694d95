"""`check` gives SymPy a bounded time (`check.SYMPY_SECONDS`): SymPy's diff of a polynomial
fit with exact rational powers takes seconds an element, so a check could run for hours.
Past the time the elements left are "skipped", with the reason, and finite differences
still compare every one of them: the verdict rests on them, a wrong derivative included."""

import dataclasses
import time

import pytest
import sympy

import diffdsl
from diffdsl.graph import ops
from diffdsl.symbolic import check

SOURCE = "input x[6]\noutput y = sum(sin(x[i]) * x[(i + 1) % 6] for i in range(6))\n"


def _skipped(entry):
    return entry["counts"].get("skipped", 0)


def test_a_check_whose_sympy_time_ran_out_building_the_expressions(monkeypatch):
    monkeypatch.setattr(check, "SYMPY_SECONDS", 0.0)
    report = diffdsl.compile(SOURCE).check()
    entry = report["symbolic"]["y"]["x"]
    assert entry["status"] == "skipped" and _skipped(entry) == 6
    assert "SymPy's 0 s ran out building the expressions" in entry["reason"]
    assert report["status"] == "ok" and report["numeric"]["y"]["x"]["checked"] > 0


def test_large_elements_begun_after_the_time_are_skipped_the_rest_decided(monkeypatch):
    slow_diff = check.oracle_diff

    def oracle_diff(*args):  # each element's diff takes a second: elements 0 and 1 begin in
        time.sleep(1.0)      # the 2 s, element 2 at 2 s or later
        return slow_diff(*args)
    monkeypatch.setattr(check, "oracle_diff", oracle_diff)
    monkeypatch.setattr(check, "SYMPY_SECONDS", 2.0)
    monkeypatch.setattr(check, "SIMPLIFY_LIMIT", 0)  # every element large: skipped when late
    report = diffdsl.compile(SOURCE).check()
    entry = report["symbolic"]["y"]["x"]
    assert 1 <= 6 - _skipped(entry) <= 2 and _skipped(entry) >= 4
    assert entry["counts"].get("proven", 0) + entry["counts"].get("numeric50", 0) >= 1
    assert "SymPy's 2 s ran out" in entry["reason"] and report["status"] == "ok"


def test_past_the_time_an_element_is_decided_without_simplify():
    """A small element is still differentiated past the time (cheap), but `simplify`, which
    can take minutes on one element (lgamma's Piecewise), is not tried."""
    x = sympy.Symbol("x", real=True)
    ours, theirs = sympy.sin(x) ** 2 + sympy.cos(x) ** 2, sympy.Integer(1)
    assert check.decide(ours, theirs, 0.0, 10) == ("proven", "simplify")
    assert check.decide(ours, theirs, 0.0, 10, late=True)[0] == "numeric50"
    assert check.decide(ours, theirs, 1e-3, 10, late=True)[0] == "mismatch"


@pytest.mark.parametrize("seconds", [0.0, 60.0])
def test_a_wrong_derivative_is_found_with_or_without_sympy(monkeypatch, seconds):
    wrong = dataclasses.replace(ops.OPS["sin"],
                                pullback=lambda g, a, out, ct: (g.mul(ct, out),))  # sin' = sin?
    monkeypatch.setitem(ops.OPS, "sin", wrong)
    monkeypatch.setattr(check, "SYMPY_SECONDS", seconds)
    report = diffdsl.compile(SOURCE).check()
    assert report["status"] == "mismatch" and not report["numeric"]["y"]["x"]["ok"]
    assert (report["symbolic"]["y"]["x"]["status"] == "mismatch") == (seconds > 0)


def test_no_proof_is_tried_where_the_formulas_differ_at_fifty_digits(monkeypatch):
    """Past PROOF_RTOL the two formulas differ, so SymPy's `simplify` (minutes on lgamma's
    series against polygamma) is not asked; below it, it is."""
    import sympy as sp

    from diffdsl.symbolic import check as checking
    x = sp.Symbol("x", real=True)
    asked = []
    monkeypatch.setattr(checking, "_prove_zero", lambda diff: asked.append(diff) or "simplify")
    assert checking.decide(sp.sin(x), sp.sin(x) + 1e-15, 1e-15, 5)[0] == "rounding"
    assert checking.decide(sp.sin(x), sp.sin(x) + 1e-18, 1e-18, 5)[0] == "rounding"
    assert not asked
    assert checking.decide(sp.sin(x), sp.cos(x - sp.pi / 2), 1e-45, 5) == ("proven", "simplify")
    assert len(asked) == 1
