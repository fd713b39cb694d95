"""Special functions the op table needs and Python lacks: libm's lgamma, and digamma as a graph.

Both are used by the `lgamma` row of `ops.OPS`: `py_lgamma` folds it (as the compiled code
computes it), `digamma_graph` builds its derivative from other ops.
"""

from __future__ import annotations

import math


def _libm_lgamma():
    """The C library's lgamma, which the compiled code calls (Python's math.lgamma is its own,
    5e-9 off near x = 1 and 2, where lgamma is near zero)."""
    import ctypes
    import ctypes.util
    import sys
    names = ["ucrtbase"] if sys.platform == "win32" else [ctypes.util.find_library("m"), None]
    for name in names:
        try:
            fn = ctypes.CDLL(name).lgamma
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
        return fn
    return None


_LGAMMA = _libm_lgamma()


def py_lgamma(x: float) -> float:
    """libm's lgamma: +inf at the poles and for huge |x| (where Python's raises)."""
    if _LGAMMA is not None:
        return _LGAMMA(float(x))
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):
        return math.inf


# digamma(x) = d/dx lgamma(x), from ops already in the table, through the builder `g`:
# reflection psi(x) = psi(1 - x) - pi / tan(pi x) for x < 0; the recurrence
# psi(y) = psi(y + 8) - sum_{k<8} 1 / (y + k); then the asymptotic series at z = y + 8 >= 8,
# psi(z) ~ log z - 1 / (2z) - sum_k B_2k / (2k z^2k), to z^-14 (the first term left out is
# below 2e-15 at z = 8). Derivatives of every order come by differentiating this graph.
DIGAMMA_SHIFT = 8
_DIGAMMA_SERIES = (1 / 12, 1 / 120, 1 / 252, 1 / 240, 1 / 132, 691 / 32760, 1 / 12)


def digamma_graph(g, x):
    c = g.const
    reflect = g.op("lt", x, c(0.0))
    y = g.select(reflect, g.sub(c(1.0), x), x)
    shift = c(0.0)
    for k in range(DIGAMMA_SHIFT):
        shift = g.add(shift, g.div(c(1.0), g.add(y, c(float(k)))))
    z = g.add(y, c(float(DIGAMMA_SHIFT)))
    w = g.div(c(1.0), g.mul(z, z))
    series = c(_DIGAMMA_SERIES[-1])
    for coef in reversed(_DIGAMMA_SERIES[:-1]):  # 1/12 - w (1/120 - w (1/252 - ...))
        series = g.sub(c(coef), g.mul(w, series))
    psi = g.sub(g.sub(g.sub(g.op("log", z), g.div(c(0.5), z)), g.mul(w, series)), shift)
    cot = g.div(c(math.pi), g.op("tan", g.mul(c(math.pi), x)))
    return g.select(reflect, g.sub(psi, cot), psi)
