"""Checking the values a user gives against a graph's declared inputs.

Values may be Python numbers, nested lists, NumPy scalars or arrays, or arrays of other
libraries: anything NumPy reads through `__array__`, `__array_interface__`, the buffer protocol
(`array.array`, `memoryview`) or `__dlpack__` (PyTorch CPU tensors, JAX arrays), viewed without
a copy where NumPy can (`host_array`). A value with leading dimensions beyond the declared
shape is a batch; every batched input must agree on them. Arrays of the requested dtype that
are C-contiguous are used in place (no copy).
"""

from __future__ import annotations

import difflib
import math

import numpy as np

from ..errors import InputError
from ..graph import autodiff
from ..graph.ir import Graph, Port


def prepare_inputs(graph: Graph, given: dict, dtype=np.float64,
                   convert: bool = True) -> tuple[tuple, dict]:
    """Check the given values against the declared inputs; find the batch shape.

    Returns the batch shape `B` and, per input, an array of `dtype` of shape (rows, size) when
    batched or (size,) when shared by every row: a view of the value given when it is an
    array of that dtype and contiguous. `convert=False` leaves a NumPy array of another real
    dtype in it (the CPU kernel converts a batch a chunk at a time).
    """
    for name in given:
        if name not in graph.inputs:
            if name.startswith("@t:"):
                raise InputError(f"a tangent is given for '{name[3:]}', which is not an input "
                                 "of this program", hint="the inputs are: " + ", ".join(
                                     n for n in graph.inputs if not n.startswith("@")))
            close = difflib.get_close_matches(name, list(graph.inputs), n=1)
            hint = f"did you mean '{close[0]}'?" if close else \
                f"the inputs are: {', '.join(graph.inputs) or 'none'}"
            raise InputError(f"'{name}' is not an input of this program", hint=hint)
    missing = [name for name in graph.inputs if name not in given]
    if missing:
        raise InputError(f"missing value for {', '.join(label(m) for m in missing)}",
                         graph.inputs[missing[0]].span,
                         hint="give every input, as NAME=VALUE")
    batch = None
    batch_from = None
    arrays = {}
    shaped = {}
    for name, port in graph.inputs.items():
        arr = as_real_array(label(name), given[name], dtype, convert)
        declared = port.shape
        extra = arr.ndim - len(declared)
        if extra < 0 or arr.shape[extra:] != declared:
            raise InputError(
                f"{label(name)} is declared with shape {list(declared)}, but the value given "
                f"has shape {list(arr.shape)}", port.span,
                hint="a batch adds leading dimensions: shape B + "
                     f"{list(declared)}" if declared else "a batch of scalars has any shape")
        if extra:
            b = arr.shape[:extra]
            if batch is not None and b != batch:
                raise InputError(
                    f"batch shapes do not agree: {label(batch_from)} has batch {list(batch)} "
                    f"and {label(name)} has batch {list(b)}", hint="every batched input needs the "
                    "same leading dimensions; give shared inputs at their declared shape")
            batch, batch_from = b, name
        shaped[name] = (arr, extra)
    rows = math.prod(batch) if batch is not None else None
    for name, (arr, extra) in shaped.items():
        size = graph.inputs[name].size
        arrays[name] = arr.reshape(rows, size) if extra else arr.reshape(size)
    return (batch if batch is not None else ()), arrays


def label(name: str) -> str:
    """How an input of a derivative graph is named in messages."""
    if name == autodiff.SEED:
        return "the seed"
    if name.startswith("@t:"):
        return f"the tangent for '{name[3:]}'"
    return f"input '{name}'"


# Values taken as they are: NumPy's own, Python's numbers and lists, and text (refused later).
_PLAIN = (np.ndarray, np.generic, float, int, list, tuple, str, bytes, bytearray, type(None))
_ARRAY_HOOKS = ("__array__", "__array_interface__", "__array_struct__")


def host_values(values: dict) -> dict:
    """`values` with every array of another library in host memory as a NumPy array."""
    return {name: host_array(value, name if name.startswith("@") else f"input '{name}'")
            for name, value in values.items()}


def host_array(value, name: str = "value"):
    """`value` as a NumPy array when it is an array of another library in host memory
    (viewing its memory where NumPy can: no copy); anything else as it is. Arrays on a GPU
    (`__cuda_array_interface__`) and Dask arrays stay as they are, for the paths that take
    them. An array that cannot be read on the host (a tensor on a GPU through DLPack, a
    PyTorch tensor that requires grad) is an `InputError` that says what to do."""
    if isinstance(value, _PLAIN) or _on_device(value) or hasattr(value, "__dask_graph__"):
        return value
    try:
        if any(hasattr(value, hook) for hook in _ARRAY_HOOKS):
            return np.asarray(value)
        if hasattr(value, "__dlpack__"):
            return np.from_dlpack(value)
        try:
            view = memoryview(value)
        except TypeError:
            return value  # not an array: `as_real_array` says what it is
        return np.asarray(view)
    except (TypeError, ValueError, RuntimeError, BufferError) as exc:
        what = a_or_an(type(value).__name__)
        raise InputError(f"{label_of(name)}: cannot read {what} as an array in host memory: "
                         f"{exc}", hint="give a NumPy array, or copy the value to the CPU "
                         "first (PyTorch: tensor.detach().cpu(); JAX: jax.device_get)") from None


def _on_device(value) -> bool:
    """Whether `value` lies on a GPU (as `backends.cuda.is_device_array` says, without
    importing it)."""
    try:  # a CPU PyTorch tensor raises on the attribute
        return getattr(type(value), "__cuda_ndarray__", False) or \
            getattr(value, "__cuda_array_interface__", None) is not None
    except Exception:
        return False


def a_or_an(word: str) -> str:
    """`word` after its indefinite article, as it is said: "an ArrayImpl", "a Tensor",
    "a UserList", "an ndarray"."""
    lower = word.lower()
    vowel = (lower[:1] in ("a", "e", "i", "o", "u") and not lower.startswith(
        ("uni", "use", "usa", "uti", "eu", "one"))) or lower.startswith("nd")
    return f"{'an' if vowel else 'a'} {word}"


def label_of(name: str) -> str:
    """`name` as messages say it: a graph name (`@t:x`, the seed) through `label`, else as
    given (already worded: "input 'x'")."""
    return label(name) if name.startswith("@") else name


def as_real_array(name: str, value, dtype=np.float64, convert: bool = True) -> np.ndarray:
    value = host_array(value, name)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiu":
            raise InputError(f"{name}: expected real numbers, got an array of "
                             f"{value.dtype}")
        return value if value.dtype == dtype or not convert else value.astype(dtype)
    bad = _not_a_number(value)
    if bad is not None:
        raise InputError(f"{name}: expected numbers, got {bad}")
    try:
        try:
            arr = np.asarray(value, dtype=np.float64)
        except OverflowError:  # an int beyond a double's range: infinite, as 1e400 is
            arr = np.asarray(_huge_ints_to_inf(value), dtype=np.float64)
    except (ValueError, TypeError):
        raise InputError(f"{name}: expected a number or a regular nested list of "
                         "numbers (every row the same length)") from None
    return arr if arr.dtype == dtype else arr.astype(dtype)


def _huge_ints_to_inf(value):
    """The same nesting of lists with ints too large for a double as +-inf (no recursion:
    a list may be nested deeply)."""
    def convert(item):
        if isinstance(item, int):
            try:
                return float(item)
            except OverflowError:
                return float("inf") if item > 0 else float("-inf")
        return item

    if not isinstance(value, (list, tuple)):
        return convert(value)
    root: list = []
    stack = [(value, root)]
    while stack:
        src, dst = stack.pop()
        for item in src:
            if isinstance(item, (list, tuple)):
                child: list = []
                dst.append(child)
                stack.append((item, child))
            else:
                dst.append(convert(item))
    return root


def _not_a_number(value) -> str | None:
    """What in a nested list is not a real number (None, booleans, text), or None if all are."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (bool, np.bool_)) or item is None or isinstance(item, (str, bytes)):
            return "null" if item is None else repr(item)
        elif not isinstance(item, (int, float, np.number)):
            return a_or_an(type(item).__name__)
    return None


def unflatten(ports: dict[str, Port], flat: dict, batch: tuple) -> dict:
    out = {}
    for name, port in ports.items():
        arr = flat[name]
        out[name] = arr.reshape(tuple(batch) + port.shape)
        if not out[name].shape:
            out[name] = out[name][()]
    return out
