"""The fuzzer in the test suite (issue 10): a few hundred generated programs, each of which
must give a located error or evaluate with every comparison of `fuzzing.check` holding.
`python bench/fuzz.py --seconds N` runs the same checker for as long as asked."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from fuzzing import Outcome, check, programs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(source=programs(), seed=st.integers(0, 2**32 - 1))
def test_generated_programs_error_with_a_location_or_agree_everywhere(source, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overflow and domain warnings are the program's
        outcome = check(source, seed)
    assert outcome.kind in ("error", "evaluated"), f"{source}\n{outcome.detail}"


@pytest.mark.parametrize("source, kind", [
    ("input x\noutput y = x * v\n", "error"),
    ("input x\noutput y = if x > 0 then sin(sqrt(x)) + cos(sqrt(x)) else 0\n", "evaluated"),
    ("input v[2]\nt0 = v * 2\noutput y = sum(t0) ^ 2\noutput z = t0\n", "evaluated"),
    ("input x\noutput y = abs(x) + max(x, 1)\n", "evaluated"),
])
def test_the_checker_classifies(source, kind):
    assert check(source, 1).kind == kind


def test_the_checker_finds_a_wrong_derivative(monkeypatch):
    """A planted bug, a gradient off by one, is caught as a disagreement."""
    import diffdsl
    real = diffdsl.Program.jacobian

    def wrong(self, *args, **kwargs):
        jac = real(self, *args, **kwargs)
        if kwargs.get("mode") == "forward":
            jac = {name: value + 1 for name, value in jac.items()}
        return jac

    monkeypatch.setattr(diffdsl.Program, "jacobian", wrong)
    outcome = check("input x\noutput y = x * x\n", 0)
    assert outcome == Outcome("disagreement", outcome.detail) and "forward" in outcome.detail


def test_an_infinite_partial_is_no_disagreement():
    """cbrt'(0) is infinite: reverse mode says -inf, forward mode NaN (inf times the other
    inputs' zero tangents). Both say the derivative does not exist (found by the long run)."""
    source = ("input x\ninput A[2, 2]\ninput v[2]\n"
              "output y = trace(inv(eye(2) * 3 + cbrt((A @ eye(2))) * 0.1))\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert check(source, 6).kind == "evaluated"


def test_the_checker_finds_a_nan_where_the_other_mode_is_finite(monkeypatch):
    import diffdsl
    real = diffdsl.Program.jacobian

    def broken(self, *args, **kwargs):
        jac = real(self, *args, **kwargs)
        if kwargs.get("mode") == "forward":
            jac = {name: np.full_like(value, np.nan) for name, value in jac.items()}
        return jac

    monkeypatch.setattr(diffdsl.Program, "jacobian", broken)
    outcome = check("input x\noutput y = x * x\n", 0)
    assert outcome.kind == "disagreement" and "forward" in outcome.detail


def _plant_one_ulp(monkeypatch, shift):
    """The cpu backend's values moved by `shift(value)`: one ulp at a jump, or a real bug."""
    import diffdsl
    real = diffdsl.Program.evaluate

    def moved(self, inputs, *args, backend=None, **kwargs):
        if backend == "cpu":
            inputs = {n: shift(np.asarray(v, dtype=float)) for n, v in inputs.items()}
        return real(self, inputs, *args, backend=backend, **kwargs)

    monkeypatch.setattr(diffdsl.Program, "evaluate", moved)


STEP = "input x\noutput y = ceil(x) + x\n"


def test_one_ulp_at_a_jump_is_rounding_not_a_disagreement(monkeypatch):
    """On the grid x is an integer, so one ulp more in one backend moves ceil(x) by 1; off
    the grid the backends agree (two libms may differ in the last bit, as NumPy's SIMD cbrt
    and glibc's do)."""
    import fuzzing

    _plant_one_ulp(monkeypatch, lambda v: np.where(v == np.round(v), np.nextafter(v, 9), v))
    prog = __import__("diffdsl").compile(STEP)
    point = {"x": np.array(2.0)}
    assert fuzzing._values_disagree(prog, point, None) is not None
    assert fuzzing._rounding_at_a_step(prog, point, np.random.default_rng(0),
                                       lambda p: fuzzing._values_disagree(prog, p, None))


def test_a_wrong_kernel_at_a_jump_still_disagrees(monkeypatch):
    import fuzzing

    _plant_one_ulp(monkeypatch, lambda v: v + 0.5)
    prog = __import__("diffdsl").compile(STEP)
    point = {"x": np.array(2.0)}
    assert not fuzzing._rounding_at_a_step(prog, point, np.random.default_rng(0),
                                           lambda p: fuzzing._values_disagree(prog, p, None))


def test_without_a_jump_one_ulp_is_never_excused(monkeypatch):
    import fuzzing

    prog = __import__("diffdsl").compile("input x\noutput y = exp(x)\n")
    assert not fuzzing._rounding_at_a_step(prog, {"x": np.array(2.0)},
                                           np.random.default_rng(0), lambda p: "differs")


def test_an_infinite_partial_summed_to_nan_is_no_disagreement():
    """sqrt(x - x): reverse mode sums sqrt'(0) * 1 + sqrt'(0) * -1 = inf - inf = NaN, forward
    mode's tangent 1 - 1 = 0 never meets the inf (found by the long run)."""
    import fuzzing

    import diffdsl
    prog = diffdsl.compile("input x\noutput y = sqrt(trace(x * [[1, 2], [0.5, -1]]))\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert fuzzing._jacobians(prog, {"x": np.array(0.13)}, "y")[1] is None


def _bench_fuzz():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).parent.parent / "bench" / "fuzz.py"
    spec = importlib.util.spec_from_file_location("bench_fuzz", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_long_run_ends_with_its_counts_when_its_time_is_up():
    """The time running out is no failure, also where Hypothesis reports it as a flaky group
    (the input it replays had passed before; a 35-minute run ended in a traceback so)."""
    fuzz = _bench_fuzz()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = fuzz.run(1.0, 7, None)
    assert counts["programs"] > 0
    group = getattr(__import__("builtins"), "ExceptionGroup", None)
    if group is None:
        from exceptiongroup import ExceptionGroup as group
    assert fuzz._time_up(group("flaky", [fuzz.TimeUp(), group("replayed", [fuzz.TimeUp()])]))
    assert not fuzz._time_up(group("flaky", [fuzz.TimeUp(), ValueError("a real failure")]))
    assert not fuzz._time_up(ValueError())


STAIRCASE = ("input v[2]\ninput A[2, 2]\nconst c = 1e1\nt0 = lgamma(A[0, 0])\n"
             "output y = ceil((A[0, 0]) ** (-2))\n")


def test_a_staircase_finer_than_the_difference_step_is_not_smooth():
    """ceil(a ** -2) near a = 0.045 jumps every 4e-5: at the steps 1e-4 and 5e-5 both central
    differences see a line of slope -20000, while the derivative between the jumps is 0
    (found by the long run, point seed 259). A step 10**4 times finer sees it flat."""
    import fuzzing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = fuzzing.check(STAIRCASE, 259)
    assert outcome.kind == "evaluated", outcome.detail


def test_a_wrong_slope_is_still_found_with_the_finer_step():
    """The finer step excuses only what is flat at its scale: a derivative off by 1% on a
    smooth function is still a disagreement."""
    import fuzzing

    import diffdsl
    prog = diffdsl.compile("input x\noutput y = exp(x) * 50\n")
    point = {"x": np.array(0.3)}
    jac = {"x": prog.jacobian(of="y", **point)["x"] * 1.01}
    outcome = fuzzing._finite_differences(prog, point, jac, np.random.default_rng(0), "y")
    assert outcome.kind == "disagreement"
