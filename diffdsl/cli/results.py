"""Results worded for people and written as JSON (INTERFACE.md): values and derivatives,
sparse matrices, the kernel cache, files written chunk by chunk.

JSON values are nested lists of numbers, non-finite ones the strings "nan", "inf", "-inf".
Text is `name = value`, an array on the lines below its name when it takes several.
"""

from __future__ import annotations

import numpy as np


def to_json(value):
    """Nested lists of numbers; non-finite numbers as the strings "nan", "inf", "-inf"."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        return _number(float(arr))
    return [to_json(v) for v in arr]


def _number(x: float):
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return x


def json_tree(table):
    """`to_json` of every array in nested dicts (a Hessian's `{input: {input: array}}`)."""
    if isinstance(table, dict):
        return {k: json_tree(v) for k, v in table.items()}
    return to_json(table)


def format_value(value) -> str:
    arr = np.asarray(value)
    if arr.ndim == 0:
        return repr(float(arr))
    return np.array2string(arr, precision=10, max_line_width=100, separator=", ")


def labelled_lines(items: list[tuple[str, object]]) -> list[str]:
    """`label = value` for each item; an array of several lines goes below `label =`,
    indented."""
    lines = []
    for label, value in items:
        text = format_value(value)
        if "\n" in text:
            lines.append(f"{label} =")
            lines.append("    " + text.replace("\n", "\n    "))
        else:
            lines.append(f"{label} = {text}")
    return lines


def derivative_items(kind: str, of: str, result) -> list[tuple[str, str, object]]:
    """`(label, key, array)` for each array of a derivative's result: the label for people
    (`∂d/∂A`, `∂²f/∂x∂y`, `vjp A`), the key of its array in `.npz`, `.npy` and Zarr output
    (`grad.A`, `hessian.x.y`, `jvp`)."""
    if kind == "hessian":
        return [(f"\u2202\u00b2{of}/\u2202{a}\u2202{b}", f"hessian.{a}.{b}", h)
                for a, row in result.items() for b, h in row.items()]
    if kind == "hessian_diagonal":
        return [(f"\u2202\u00b2{of}/\u2202{name}\u00b2", f"hessian_diagonal.{name}", r)
                for name, r in result.items()]
    if kind == "jvp":
        return [(f"jvp {of}", "jvp", result)]
    word = {"vjp": "vjp ", "hvp": f"hvp {of} "}.get(kind, "\u2202" + of + "/\u2202")
    return [(f"{word}{name}", f"{kind}.{name}", r) for name, r in result.items()]


def sparse_json(pattern, names: list, data) -> dict:
    """A sparse result's CSR parts (`data` of every batch row stacked) and its columns' inputs."""
    return {"wrt": names, "shape": list(pattern.shape), "indptr": pattern.indptr.tolist(),
            "indices": pattern.indices.tolist(), "data": to_json(data)}


def sparse_lines(kind: str, of: str, names: list, batch: tuple, matrices: list) -> list[str]:
    """Each matrix of a sparse result (one a batch row): its size, then `(i, j)  value` for
    each stored element."""
    wrt = names[0] if len(names) == 1 else f"({', '.join(names)})"
    label = (f"\u2202\u00b2{of}/\u2202{wrt}\u00b2" if kind == "hessian"
             else f"\u2202{of}/\u2202{wrt}")
    lines = []
    for index, m in zip(np.ndindex(*batch), matrices, strict=True):
        where = f"[{', '.join(map(str, index))}]" if batch else ""
        lines.append(f"{label}{where}: sparse {m.shape[0]}x{m.shape[1]}, {m.nnz} stored")
        coo = m.tocoo()
        for i, j, v in zip(coo.row, coo.col, coo.data, strict=True):
            lines.append(f"    ({i}, {j})  {format_value(v)}")
    return lines


def cache_text(info: dict) -> str:
    """`diffdsl cache info` (`info` from `cache_info`) or, with "removed", `cache clear`."""
    if "removed" in info:
        return f"removed {info['removed']} kernels from {info['path']}"
    return (f"kernel cache: {info['path']}\nentries: {info['entries']}\n"
            f"size: {info['bytes'] / 1e6:.1f} MB")


def written_json(output: str, shapes: dict) -> dict:
    """What chunked output wrote: `{"output": path, "arrays": {key: {"shape", "dtype"}}}`,
    from `shapes` of key -> (shape, dtype)."""
    return {"output": output, "arrays": {key: {"shape": list(shape), "dtype": str(dtype)}
                                         for key, (shape, dtype) in shapes.items()}}


def written_text(output: str, shapes: dict) -> str:
    arrays = written_json(output, shapes)["arrays"]
    return f"wrote {output}: " + ", ".join(f"{key} {a['shape']} {a['dtype']}"
                                           for key, a in arrays.items())
