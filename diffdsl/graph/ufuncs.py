"""Each op of the table as a NumPy function, from its row: the reference interpreter runs them
over batches (backends/numpy.py) and lowering folds static reals with them (static.py), so a
static value is what the program computes at run time.

A row's `numpy` spelling is compiled once into a function of arrays (or NumPy scalars); a row
without one (NumPy has no erf) has its `fold` mapped over the elements, in float64, with the
result in the arguments' dtype.
"""

from __future__ import annotations

import numpy as np

from .ops import OPS


def c_power(a, b):
    """np.power, except where NumPy computes a scalar exponent 0.5 as sqrt: C's pow (which the
    folder and the compiled backends call) gives pow(-inf, 0.5) = inf and pow(-0.0, 0.5) = +0.0,
    where sqrt gives nan and -0.0."""
    out = np.power(a, b)
    half = np.equal(b, 0.5)
    if np.any(half):
        fixed = np.where(half & np.equal(a, -np.inf), np.inf, np.where(half, out + 0.0, out))
        out = fixed.astype(np.asarray(out).dtype, copy=False)
    return out


NAMESPACE = {"np": np, "c_power": c_power}  # the names the rows' NumPy spellings use


def _mapped(fold):
    each = np.vectorize(fold, otypes=[np.float64])

    def fn(*xs):
        arrays = [np.asarray(x) for x in xs]
        out = each(*(a.astype(np.float64) for a in arrays))
        dtype = np.result_type(*arrays)
        return out.astype(dtype) if dtype.kind == "f" else out
    return fn


def _function(row):
    if not row.numpy:
        return _mapped(row.fold)
    args = [f"a{k}" for k in range(row.arity)]
    return eval(f"lambda {', '.join(args)}: {row.numpy.format(*args)}", dict(NAMESPACE))


FUNCTIONS = {name: _function(row) for name, row in OPS.items() if row.arity}
