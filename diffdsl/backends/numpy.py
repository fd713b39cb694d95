"""The reference interpreter: evaluates a graph with NumPy, each node over all batch rows, with
the functions the op table's rows spell (`ufuncs.FUNCTIONS`)."""

from __future__ import annotations

import numpy as np

from ..graph.ir import Graph, verify, verifying
from ..graph.loops import initial_state, materialize, split_args
from ..graph.ufuncs import FUNCTIONS


def _region(region, args: list, rows: int | None, dtype) -> np.ndarray:
    """A region's values, shape (rows, size) or (size,): its body evaluated once over all rows
    and iterations together (iteration as one more batch axis), the sums taken over the
    iterations in order (as the unrolled sum adds them: `np.sum` would add them pairwise)."""
    n = region.n
    r = rows if rows is not None else 1

    def column(v):  # (r,) whether the value is shared or one per row
        return np.broadcast_to(np.asarray(v, dtype=dtype), (r,))

    # A stream that reads a region's values whole: its argument is that region's array.
    region, args = materialize(region, args, lambda a, k, length: [a[..., k + e]
                                                                   for e in range(length)])
    if region.carry:
        sums, maps, state = _scan(region, args, r, column, dtype)
        values = _finish(region, sums, maps, [state], dtype)
        return values if rows is not None else values[0]
    captures, streams = split_args(region, args)
    given = {"@i": np.tile(np.arange(n, dtype=dtype), r).reshape(r * n, 1),
             "@c": np.repeat(np.stack([column(v) for v in captures], axis=1)
                             if captures else np.zeros((r, 0), dtype), n, axis=0)}
    for j, ((_, stride, offset), width) in enumerate(zip(region.streams, region.widths(),
                                                         strict=True)):
        data = np.stack([column(v) for v in streams[j]], axis=1) if streams[j] else \
            np.zeros((r, 0), dtype)
        at = offset + stride * np.arange(n)[:, None] + np.arange(width)[None, :]
        given[f"@s{j}"] = data[:, at].reshape(r * n, width)
    out = evaluate(region.body, given, dtype)
    values = _finish(region, out["@sum"].reshape(r, n, region.sums),
                     out["@map"].reshape(r, n * region.maps), [], dtype)
    return values if rows is not None else values[0]


def _finish(region, sums: np.ndarray, maps: np.ndarray, state: list, dtype) -> np.ndarray:
    """The values of a region from each iteration's sums (rows, n, sums) and the stacked
    map outputs: the sums taken over the iterations in order (as the unrolled sum adds them:
    `np.sum` would add them pairwise), then the maps, the winners, a scan's final state."""
    n, r = region.n, sums.shape[0]
    total = np.cumsum(sums, axis=1)[:, -1, :]  # a running sum adds in order
    winners = []
    for e in region.winners:  # folded left as the op folds: the earlier value on a tie
        keep = np.less_equal if region.kind(e) == "min" else np.greater_equal
        best, won = sums[:, 0, e].copy(), np.zeros(r, dtype=dtype)
        for i in range(1, n):
            kept = keep(best, sums[:, i, e])
            best = np.where(kept, best, sums[:, i, e])
            won = np.where(kept, won, dtype.type(i))
        total[:, e] = best
        winners.append(won[:, None])
    return np.concatenate([total, maps] + winners + state, axis=1)


def _scan(region, args: list, r: int, column, dtype) -> tuple:
    """A scan's sums of each iteration, map outputs and final state: its body evaluated over
    all rows once per iteration, in order, each iteration given the state the one before it
    wrote."""
    captures, streams = split_args(region, args)

    def stack(items):
        return np.stack([column(v) for v in items], axis=1) if items else np.zeros((r, 0), dtype)

    given = {"@c": stack(captures)}
    data = [stack(items) for items in streams]
    state = stack(initial_state(region, args))
    sums, maps = [], []
    for i in range(region.n):
        given["@i"] = np.full((r, 1), i, dtype)
        given["@h"] = state
        for j, ((_, stride, offset), width) in enumerate(zip(region.streams, region.widths(),
                                                             strict=True)):
            start = offset + stride * i
            given[f"@s{j}"] = data[j][:, start:start + width]
        out = evaluate(region.body, given, dtype)
        sums.append(out["@sum"])
        maps.append(out["@map"])
        state = out["@next"]
    return np.stack(sums, axis=1), np.concatenate(maps, axis=1), state


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
    data = {name: np.asarray(inputs[name], dtype=dtype) for name in graph.inputs}
    with np.errstate(all="ignore"):
        for i, node in enumerate(graph.nodes):
            if node.op in ("input", "array"):  # an element, or the whole input (read whole)
                d = data[node.attr[0]]
                values[i] = d if node.op == "array" else d[..., node.attr[1]]
                continue
            if node.op == "const":
                values[i] = dtype.type(node.attr)
                continue
            if node.op == "region":
                values[i] = _region(node.attr, [values[a] for a in node.args], rows, dtype)
                continue
            if node.op == "part":
                values[i] = values[node.args[0]][..., node.attr]
                continue
            result = FUNCTIONS[node.op](*(values[a] for a in node.args))
            # Keep float32 programs in float32: np.where and friends return float64.
            if getattr(result, "dtype", dtype) != dtype:
                result = result.astype(dtype)
            values[i] = result
    out = {}
    for name, port in graph.outputs.items():
        if port.whole is not None:  # a region's values in a row
            node, first = port.whole
            block = np.asarray(values[node][..., first:first + port.size], dtype=dtype)
            out[name] = block if rows is None else np.broadcast_to(
                block, (rows, port.size)).copy()
            continue
        cols = [np.asarray(values[i], dtype=dtype) for i in port.ids]
        if rows is None:
            out[name] = np.array(cols, dtype=dtype).reshape(len(cols))
        else:
            result = np.empty((rows, len(cols)), dtype=dtype)
            for k, col in enumerate(cols):
                result[:, k] = col
            out[name] = result
    return out
