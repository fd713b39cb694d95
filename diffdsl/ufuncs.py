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

NAMESPACE = {"np": np}  # the names the rows' NumPy spellings use


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
