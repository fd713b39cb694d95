"""`a ** b` at the special values of IEEE pow is the same on every backend.

The rule is C's pow (what the constant folder's math.pow, LLVM and CUDA call): NumPy's own
fast path for a scalar exponent 0.5 (sqrt) differs from it at -inf and -0.0, and the fuzzer
found the numpy and cpu backends disagreeing there. Every base/exponent pair of the special
values is checked on each backend against C's pow, read through ctypes from libm.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np
import pytest

import diffdsl

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.pow.restype = ctypes.c_double
_libm.pow.argtypes = [ctypes.c_double, ctypes.c_double]

BASES = [-math.inf, -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, math.inf, math.nan]
EXPONENTS = [0.5, -0.5, 1 / 3, 2.0, 3.0, -1.0, -2.0, -3.0, 0.0, 1.0, 2.5, math.inf, -math.inf]


def _same(got, want) -> bool:
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
@pytest.mark.parametrize("exponent", EXPONENTS)
def test_constant_exponent_matches_c_pow(backend, exponent):
    prog = diffdsl.compile(f"input x\noutput y = x ** {exponent!r}\n".replace("inf", "1e999"))
    for base in BASES:
        got = float(prog(x=base, backend=backend))
        assert _same(got, _libm.pow(base, exponent)), (backend, base, exponent, got)


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_dynamic_exponent_batch_matches_c_pow(backend):
    pairs = [(b, e) for b in BASES for e in EXPONENTS]
    xs = np.array([b for b, _ in pairs])
    es = np.array([e for _, e in pairs])
    prog = diffdsl.compile("input x\ninput e\noutput y = x ** e\n")
    got = prog(x=xs, e=es, backend=backend)
    for (b, e), g in zip(pairs, got, strict=True):
        assert _same(float(g), _libm.pow(b, e)), (backend, b, e, g)


def test_negative_bases_in_a_vectorised_loop_match_c_pow():
    """In a loop the CPU calls the vector pow with |x| and puts the sign and the NaN back
    itself (ops.py, `_POW_LL`): integer exponents, odd and even, of negative bases (llsq's
    t ** j) keep C's sign, and non-integers give NaN, to an ulp of C's pow (the vector pow is
    not correctly rounded, as the scalar one is not)."""
    rng = np.random.default_rng(7)
    n = 600
    x = -rng.uniform(0.05, 3.0, n)
    x[:40] = [b for b in BASES for _ in range(4)]
    e = rng.integers(-9, 10, n).astype(float)
    e[::7] += rng.uniform(0.1, 0.9, len(e[::7]))  # some not integers
    e[1::13] = rng.choice([0.0, -0.0, math.inf, -math.inf, 2.0**53, 2.0**53 + 2], len(e[1::13]))
    prog = diffdsl.compile(f"input x[{n}]\ninput e[{n}]\n"
                           f"output y = [x[i] ** e[i] for i in range({n})]\n", cache=False)
    got = prog(x=x, e=e, backend="cpu")
    want = np.array([_libm.pow(a, b) for a, b in zip(x, e, strict=True)])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[finite]), np.signbit(want[finite]))
    np.testing.assert_array_max_ulp(got[finite], want[finite], maxulp=1)
