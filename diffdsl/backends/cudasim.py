"""IEEE `math` for Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1).

The simulator runs kernels as Python, where `math.sqrt(-1.0)` raises instead of giving NaN and
results are Python floats; the CUDA backend gives the generated modules `SIM_MATH` as their
`math`, so the simulator gives the values a GPU gives.
"""

from __future__ import annotations

import math
import types

import numpy as np

from ..graph.special import py_lgamma


def _ieee(ufunc):
    def fn(*xs):
        with np.errstate(all="ignore"):
            return ufunc(*xs)
    fn.__name__ = ufunc.__name__
    return fn


def _typed(fn):
    """`fn` of Python floats with the result in the argument's NumPy type, and NaN or
    infinity where Python raises."""
    def typed(*xs):
        try:
            value = fn(*(float(x) for x in xs))
        except ValueError:
            value = math.nan
        except OverflowError:
            value = math.inf
        return np.asarray(xs[0]).dtype.type(value)
    typed.__name__ = fn.__name__
    return typed


class SimMath(types.SimpleNamespace):
    """`math` as a GPU computes it: NaN or infinity where Python's math raises, and results of
    the arguments' NumPy type (float32 stays float32). A function not listed is Python's,
    made so (`_typed`)."""

    def __getattr__(self, name):
        return _typed(getattr(math, name))


SIM_MATH = SimMath(
    pi=math.pi, e=math.e, inf=math.inf, nan=math.nan, erf=_typed(math.erf),
    lgamma=_typed(py_lgamma),  # +inf at the poles, where Python's math.lgamma raises
    exp=_ieee(np.exp), log=_ieee(np.log), log1p=_ieee(np.log1p), expm1=_ieee(np.expm1),
    log2=_ieee(np.log2), log10=_ieee(np.log10), sqrt=_ieee(np.sqrt), sin=_ieee(np.sin),
    cos=_ieee(np.cos), tan=_ieee(np.tan), asin=_ieee(np.arcsin), acos=_ieee(np.arccos),
    atan=_ieee(np.arctan), sinh=_ieee(np.sinh), cosh=_ieee(np.cosh), tanh=_ieee(np.tanh),
    asinh=_ieee(np.arcsinh), acosh=_ieee(np.arccosh), atanh=_ieee(np.arctanh),
    floor=_ieee(np.floor), ceil=_ieee(np.ceil), atan2=_ieee(np.arctan2), cbrt=_ieee(np.cbrt),
    hypot=_ieee(np.hypot), copysign=_ieee(np.copysign), fabs=_ieee(np.fabs),
)
