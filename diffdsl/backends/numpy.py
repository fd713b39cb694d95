"""The reference interpreter: evaluates a graph with NumPy, each node over all batch rows."""

from __future__ import annotations

import math

import numpy as np

from ..ir import Graph
from ..ops import OPS, np_power, py_lgamma

_erf = np.frompyfunc(math.erf, 1, 1)


def _erf_array(x):
    return np.asarray(_erf(x), dtype=np.asarray(x).dtype)


def _lgamma_array(x):
    """libm's lgamma (as the compiled code calls it) over an array, of its dtype."""
    arr = np.asarray(x)
    out = np.vectorize(py_lgamma, otypes=[np.float64])(arr.astype(np.float64))
    return out.astype(arr.dtype) if arr.dtype.kind == "f" else out


# The names the table's NumPy spellings use, and one compiled lambda per op made from them.
NAMESPACE = {"np": np, "_erf": _erf_array, "_lgamma": _lgamma_array, "_power": np_power}
_FUNCS = {}
for _name, _row in OPS.items():
    if _row.arity:
        _args = ", ".join(f"a{k}" for k in range(_row.arity))
        _body = _row.np.format(*(f"a{k}" for k in range(_row.arity)))
        _FUNCS[_name] = eval(f"lambda {_args}: {_body}", dict(NAMESPACE))


def evaluate(graph: Graph, inputs: dict[str, np.ndarray], dtype=np.float64) -> dict:
    """Evaluate every output.

    `inputs[name]` is an array of shape (rows, size) for a batched input, or (size,) for one
    shared by all rows. Returns `{output: array (rows, size)}` when any input is batched, else
    `{output: array (size,)}`.
    """
    dtype = np.dtype(dtype)
    rows = None
    for value in inputs.values():
        if value.ndim == 2:
            rows = value.shape[0]
    values: list = [None] * len(graph.nodes)
    for name, port in graph.inputs.items():
        data = np.asarray(inputs[name], dtype=dtype)
        for k, i in enumerate(port.ids):
            values[i] = data[:, k] if data.ndim == 2 else data[k]
    with np.errstate(all="ignore"):
        for i, node in enumerate(graph.nodes):
            if node.op == "input":
                continue
            if node.op == "const":
                values[i] = dtype.type(node.attr)
                continue
            result = _FUNCS[node.op](*(values[a] for a in node.args))
            # Keep float32 programs in float32: np.where and friends return float64.
            if getattr(result, "dtype", dtype) != dtype:
                result = result.astype(dtype)
            values[i] = result
    out = {}
    for name, port in graph.outputs.items():
        cols = [np.asarray(values[i], dtype=dtype) for i in port.ids]
        if rows is None:
            out[name] = np.array(cols, dtype=dtype).reshape(len(cols))
        else:
            result = np.empty((rows, len(cols)), dtype=dtype)
            for k, col in enumerate(cols):
                result[:, k] = col
            out[name] = result
    return out
