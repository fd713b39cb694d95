"""The reference interpreter: evaluates a graph with NumPy, each node over all batch rows, with
the functions the op table's rows spell (`ufuncs.FUNCTIONS`)."""

from __future__ import annotations

import numpy as np

from ..graph.ir import Graph, verify, verifying
from ..graph.ufuncs import FUNCTIONS


def evaluate(graph: Graph, inputs: dict[str, np.ndarray], dtype=np.float64) -> dict:
    """Evaluate every output.

    `inputs[name]` is an array of shape (rows, size) for a batched input, or (size,) for one
    shared by all rows. Returns `{output: array (rows, size)}` when any input is batched, else
    `{output: array (size,)}`. The graph is verified first under `DIFFDSL_VERIFY=1` only:
    evaluation is the hot path of this backend.
    """
    if verifying():
        verify(graph)
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
            result = FUNCTIONS[node.op](*(values[a] for a in node.args))
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
