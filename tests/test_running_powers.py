"""Powers of a loop's index as running products (`backends/llvm_powers.py`): pow every
`FRESH` iterations, the last power times the base between. Against the interpreter (NumPy's
power, element by element) and the program written out, at ordinary bases and at every edge
(0, -0.0, negative, infinite, NaN, underflow, overflow), and in derivatives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kept_reductions import WRITTEN_OUT, build

from diffdsl.backends import cpu, llvm_powers

EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.75, 1.0000001, 3.0, -2.5, 1e-30, 1e30, np.inf, -np.inf,
         np.nan, 5e-324]


def program(m: int, shift: str) -> str:
    return (f"input c[{m}]\ninput a\n"
            f"output y = sum(c[j] * a ** (j{shift}) for j in range({m}))\n"
            f"output p = [a ** (j{shift}) for j in range({m})]\n")


def powers_taken(prog) -> list:
    found = []
    for graph in (prog.graph, prog.derivative("grad", of="y")):
        for node in graph.nodes:
            if node.op == "region":
                found.append(llvm_powers.running_powers(node.attr.body, "double"))
    return found


def same(got, want, rtol, atol=0.0):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isinf(got), np.isinf(want))
    ok = np.isfinite(want)
    signed = ok & (np.abs(want) > atol)  # within atol of 0 either sign (or 0) is as close
    np.testing.assert_array_equal(np.sign(got[signed]), np.sign(want[signed]))
    np.testing.assert_allclose(got[ok], want[ok], rtol=rtol, atol=atol)


# Below the smallest normal double a product rounds to a multiple of 2**-1074, not to a
# relative precision: FRESH products are within FRESH such steps of pow's subnormal result.
SUBNORMAL = llvm_powers.FRESH * 2.0 ** -1074
# A product of FRESH factors: within FRESH roundings of pow's, relative.
ROUNDINGS = llvm_powers.FRESH * 2.0 ** -53


@pytest.mark.parametrize("shift", ["", " + 1", " + 3"])
@pytest.mark.parametrize("a", EDGES)
def test_a_running_power_is_pow_at_every_edge(a, shift):
    """Each power of 300 is within FRESH roundings of pow's, and equal to it where pow's is
    0, infinite, NaN or of a sign (a product of a negative base, of -0.0)."""
    prog = build(program(300, shift))
    assert all(taken for taken in powers_taken(prog))
    point = {"c": np.linspace(-1, 1, 300), "a": a}
    got, want = (prog.evaluate(point, backend=b) for b in ("cpu", "numpy"))
    same(got["p"], want["p"], ROUNDINGS)
    if np.isfinite(want["y"]):  # the sum: within its terms' magnitude's roundings
        scale = np.sum(np.abs(point["c"] * want["p"]))
        assert abs(got["y"] - want["y"]) <= 1e-13 * scale
    else:
        same(got["y"], want["y"], 0)
    with np.errstate(all="ignore"):
        exact = np.power(a, np.arange(300.0) + float(shift.strip(" +") or 0))
    same(got["p"], exact, ROUNDINGS)
    np.testing.assert_array_equal(np.signbit(got["p"][exact == 0]), np.signbit(exact[exact == 0]))


@settings(max_examples=25, deadline=None)
@given(m=st.integers(65, 400), b=st.integers(0, 4),
       a=st.floats(-1.5, 1.5, allow_nan=False), seed=st.integers(0, 2**16))
def test_running_powers_in_derivatives_match_the_program_written_out(m, b, a, seed):
    """The gradient by the coefficients and by the base (whose pullback holds a ** (j + b - 1),
    a running power from b = 1 on and pow at b = 0, whose first exponent is -1)."""
    source = program(m, f" + {b}")
    kept = build(source)
    rng = np.random.default_rng(seed)
    point = {"c": rng.normal(size=m), "a": a}
    want = build(source, WRITTEN_OUT).grad(point, of="y", backend="numpy")
    got = kept.grad(point, of="y", backend="cpu")
    for name in want:
        same(got[name], want[name], 1e-11, SUBNORMAL)


def test_a_power_whose_exponent_starts_below_zero_is_pow():
    """a ** (j - 1) at a = 0 is inf, then 1, then 0: a product from inf would be NaN."""
    prog = build(program(100, " - 1"))
    assert not any(powers_taken(prog)[:1][0])
    got = prog.evaluate({"c": np.ones(100), "a": 0.0}, backend="cpu")["p"]
    assert got[0] == np.inf and got[1] == 1.0 and not np.any(got[2:])


def test_an_exponent_past_the_exact_integers_keeps_pow():
    """a ** (j + 2**60) is a ** 2**60 in every iteration (2**60 + j rounds to 2**60): pow,
    where a product would multiply in a factor per iteration."""
    prog = build("input a\noutput p = [a ** (j + 1152921504606846976) for j in range(100)]\n")
    bodies = [node.attr.body for node in prog.graph.nodes if node.op == "region"]
    assert bodies and not any(llvm_powers.running_powers(body, "double") for body in bodies)
    got = prog.evaluate({"a": 1.0 - 2.0**-52}, backend="cpu")["p"]
    assert np.all(got == got[0]) and got[0] == pytest.approx(np.exp(-256.0), rel=1e-9)


def test_single_precision_keeps_pow():
    """Single precision's roundings are too coarse for a run of products: pow each time."""
    prog = build(program(100, ""))
    bodies = [node.attr.body for node in prog.graph.nodes if node.op == "region"]
    assert all(llvm_powers.running_powers(body, "double") for body in bodies)
    assert not any(llvm_powers.running_powers(body, "float") for body in bodies)
    point = {"c": np.ones(100), "a": 0.99}
    got = prog.evaluate(point, backend="cpu", dtype="float32")["p"]
    np.testing.assert_allclose(got, 0.99 ** np.arange(100.0), rtol=1e-6)


@pytest.mark.parametrize("backend", ["cpu", "numpy"])
@pytest.mark.parametrize("x, y, want", [(0.0, 0.0, 0.0), (0.0, 1.0, 1.0), (0.0, 2.0, 0.0),
                                        (3.0, 0.0, 0.0), (2.0, 3.0, 12.0), (-2.0, 2.0, -4.0)])
def test_the_derivative_of_a_power_by_its_base_at_a_zero_exponent(x, y, want, backend):
    """d/dx x ** y = y x ** (y - 1), and 0 where y = 0 (x ** 0 is 1 at every x), not 0 * inf
    at x = 0: a dynamic exponent, as an input and as a loop's index (the first term of a
    polynomial kept as a loop), the exponent a constant written out."""
    prog = build("input x\ninput y\noutput z = x ** y\n")
    assert prog.grad({"x": x, "y": y}, backend=backend)["x"] == want
    poly = build("input a\noutput s = sum(a ** j for j in range(70))\n")
    got = poly.grad({"a": x}, backend=backend)["a"]
    exact = sum(j * x ** (j - 1) for j in range(1, 70))
    assert got == pytest.approx(exact, rel=1e-13) and np.isfinite(got)


def test_a_base_read_from_an_outer_loops_element_is_a_running_power():
    """`x[i] ** j` over j inside a loop over i: the inner loop reads x[i] as a stream of
    stride 0, the same in every iteration, so its power is a running product too (pow each
    iteration before: Vandermonde least squares 6.5 times as slow as with t(i) computed);
    at every edge, and its gradient, as the program written out computes them."""
    n, m = 15, 70
    source = (f"input x[{n}]\ninput y[{n}]\ninput w[{m}]\n"
              f"output cost = sum((y[i] - sum(w[j] * x[i] ** j for j in range({m}))) ** 2 "
              f"for i in range({n}))\n"
              f"output p = [sum(x[i] ** (j + 1) for j in range({m})) for i in range({n})]\n")
    prog = build(source)
    inner = [node.attr for outer in prog.graph.nodes if outer.op == "region"
             for node in outer.attr.body.nodes if node.op == "region"]
    assert inner and all(llvm_powers.running_powers(r.body, "double",
                                                    llvm_powers.still_streams(r))
                         for r in inner)
    assert ".fresh:" in cpu.emit(prog.graph, "float64")[0]  # the kernel takes them so
    x = np.array(EDGES)
    point = {"x": x, "y": np.linspace(-1, 1, n), "w": np.linspace(1, -1, m) / m}
    got, want = (prog.evaluate(point, backend=b) for b in ("cpu", "numpy"))
    same(got["p"], want["p"], 1e-13)
    finite = {"x": np.linspace(-1.2, 1.2, n), "y": point["y"], "w": point["w"]}
    kept = prog.grad(finite, of="cost", backend="cpu")
    written = build(source, WRITTEN_OUT).grad(finite, of="cost", backend="numpy")
    for name in written:
        same(kept[name], written[name], 1e-11, SUBNORMAL)
