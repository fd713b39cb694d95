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

    def stack(items):  # (r, len(items))
        return np.stack([column(v) for v in items], axis=1) if items else \
            np.zeros((r, 0), dtype)

    # A stream that reads a region's values or an input whole: its argument is that node's
    # array, sliced at once (element by element, 10^6 elements took a minute). Listed only
    # where the body reads it in place, as captures (`materialize`).
    if any(region.in_place(j) for j in range(len(region.streams)) if region.source(j) >= 0):
        region, args = materialize(region, args, lambda a, k, length: [
            a[..., k + e] for e in range(length)])
    captures, streams = split_args(region, args)
    data = [np.broadcast_to(np.asarray(items[0], dtype)[..., k:k + length], (r, length))
            if (k := region.source(j)) >= 0 else stack(items)
            for j, ((length, _, _), items) in enumerate(zip(region.streams, streams,
                                                             strict=True))]
    if region.carry:
        sums, maps, state = _scan(region, stack(captures), data,
                                  stack(initial_state(region, args)), dtype)
        values = _finish(region, sums, maps, [state], dtype)
        return values if rows is not None else values[0]
    given = {"@i": np.tile(np.arange(n, dtype=dtype), r).reshape(r * n, 1),
             "@c": np.repeat(stack(captures), n, axis=0)}
    for j, ((_, stride, offset), width) in enumerate(zip(region.streams, region.widths(),
                                                         strict=True)):
        at = offset + stride * np.arange(n)[:, None] + np.arange(width)[None, :]
        given[f"@s{j}"] = data[j][:, at].reshape(r * n, width)
    out = evaluate(region.body, given, dtype)
    values = _finish(region, out["@sum"].reshape(r, n, region.sums),
                     out["@map"].reshape(r, n * region.maps), [], dtype)
    return values if rows is not None else values[0]


def _finish(region, sums: np.ndarray, maps: np.ndarray, state: list, dtype) -> np.ndarray:
    """The values of a region from each iteration's sums (rows, n, sums) and the stacked
    map outputs: the sums taken over the iterations in order (as the unrolled sum adds them:
    `np.sum` would add them pairwise), then the maps, the winners, a scan's final state."""
    total = np.cumsum(sums, axis=1)[:, -1, :]  # a running sum adds in order
    winners = []
    for e in region.winners:
        won = _fold(sums[:, :, e], region.kind(e))
        total[:, e] = np.take_along_axis(sums[:, :, e], won[:, None], axis=1)[:, 0]
        winners.append(won[:, None].astype(dtype))
    return np.concatenate([total, maps] + winners + state, axis=1)


def _fold(x: np.ndarray, kind: str) -> np.ndarray:
    """The iteration (per row of x, rows by iterations) that a min or max folded left wins,
    as the op folds: `best = best if best <= x[i] else x[i]` (>= for max), so the earlier
    value on a tie, and a NaN, which loses every comparison, wins where it comes and is
    beaten by the value after it. The fold therefore starts again after a row's last NaN
    (which wins where it is the last iteration), and from there it is the first of the
    extreme values."""
    n = x.shape[1]
    nan = np.isnan(x)
    start = np.where(nan.any(axis=1), n - np.argmax(nan[:, ::-1], axis=1), 0)[:, None]
    counted = np.arange(n)[None, :] >= start
    edge = np.inf if kind == "min" else -np.inf
    best = (np.min if kind == "min" else np.max)(np.where(counted, x, edge), axis=1)
    won = np.argmax(counted & (x == best[:, None]), axis=1)
    return np.where(start[:, 0] >= n, n - 1, won)


def _scan(region, captures: np.ndarray, data: list, state: np.ndarray, dtype) -> tuple:
    """A scan's sums of each iteration, map outputs and final state: its body evaluated over
    all rows once per iteration, in order, each iteration given the state the one before it
    wrote. Captures, each stream's data and the initial state are (rows, elements)."""
    r = captures.shape[0]
    given = {"@c": captures}
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
