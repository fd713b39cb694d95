"""Batches on Dask: Dask arrays in, Dask arrays out, one kernel call per chunk.

`run(...)` is what `Program` does when an input is a Dask array. The batch axes stay chunked
as given and every block of the result is one evaluation of the compiled graph on the blocks
of the inputs (`da.blockwise`); the declared axes are one chunk. An input shared by every row
becomes a single-chunk array: one key in the task graph that each block depends on, sent once
to each worker, not copied into every task. A reduction over the rows (`reduce="sum"`) is then
NumPy's `sum` on the Dask result, which Dask does as a tree of partial sums.

What travels with each task is a `Recipe`: the program's source text and options, not its
graphs or machine code. A worker process compiles the recipe once (the plan and the kernels
come from the disk cache when they are there) and keeps the program for later tasks. The
graph a worker derives must be the graph the caller derived: the task carries its key, so a
worker with another version of diffdsl fails loudly instead of computing something else.

Dask is imported only when a Dask array is given, so `import diffdsl` stays light.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import InputError, UsageError
from .engine import DTYPES, check_backend
from .inputs import host_values, label, prepare_inputs


def has_dask(values: dict) -> bool:
    """Whether any value is a Dask array (none can be while dask.array is not imported)."""
    da = sys.modules.get("dask.array")
    return da is not None and any(isinstance(v, da.Array) for v in values.values())


@dataclass(frozen=True)
class Recipe:
    """How another process gets the program: `build()` compiles it again; `key` names it."""

    build: Callable
    key: str

    @staticmethod
    def of(program, compile_source: Callable) -> Recipe:
        """The recipe of `program`: its source and options when it was compiled from text
        (`compile_source` is `diffdsl.compile`), else its graph."""
        options = {"filename": program.filename, "backend": program.backend,
                   "dtype": program.dtype, "cache": program.cache,
                   "limits": dict(sorted(program.limits.items()))}
        if program.source is not None:
            build = functools.partial(compile_source, program.source, **options)
            what = program.source
        else:  # a Program made from a graph directly: the graph travels instead
            del options["limits"]
            build = functools.partial(type(program), program.graph, **options)
            what = program.graph.key()
        text = f"{what}\n{sorted(options.items())!r}"
        return Recipe(build, hashlib.sha256(text.encode()).hexdigest())


# Programs by recipe key in this process: the caller's own (held weakly, so dropping the
# program still unloads its kernels) and those built here for tasks (held for later tasks).
# Threads of one worker that run a program's first tasks at once build each graph and kernel
# once: the program itself sees to that (`engine.Once`).
_callers: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_built: dict = {}
_lock = threading.Lock()


def program_for(recipe: Recipe):
    """The program of `recipe` in this process, compiled at most once."""
    found = _callers.get(recipe.key) or _built.get(recipe.key)
    if found is not None:
        return found
    with _lock:
        found = _callers.get(recipe.key) or _built.get(recipe.key)
        if found is None:
            found = _built[recipe.key] = recipe.build()
        return found


def run(program, compile_source: Callable, request, graph, inputs: dict, backend: str,
        dtype: str) -> dict:
    """Every output of `graph` as a Dask array of shape batch + declared shape.

    `request` is `(kind, of, wrt, mode, value)` of a derivative graph
    (`program.derivative(*request)` rebuilds it elsewhere), or None for the program's own
    graph.
    """
    import dask.array as da
    from dask.base import tokenize

    check_backend(backend)
    dt = DTYPES[dtype]
    inputs = host_values(inputs)  # tangents and seeds too: arrays of other libraries
    batch = _check(graph, inputs, dt)
    recipe = Recipe.of(program, compile_source)
    _callers[recipe.key] = program  # tasks run in this process use the caller's program
    batch_index = tuple(f"b{k}" for k in range(len(batch)))
    chunks = _batch_chunks(graph, inputs, batch)
    args = []
    for k, (name, port) in enumerate(graph.inputs.items()):
        value = inputs[name]
        core = tuple(f"i{k}_{d}" for d in range(len(port.shape)))
        batched = np.ndim(value) > len(port.shape)
        if not isinstance(value, da.Array):
            value = np.asarray(value)
            value = da.from_array(value, chunks=(chunks + (-1,) * len(core)) if batched
                                  else -1, name=f"diffdsl-input-{tokenize(value)}")
        # The declared axes in one chunk; the batch axes as given (aligned by blockwise).
        value = value.rechunk({axis: -1 for axis in range(value.ndim - len(core), value.ndim)})
        args += [value, (batch_index if batched else ()) + core]
    key = graph.key()
    task = f"diffdsl-{request[0] if request else 'eval'}-" + tokenize(
        key, recipe.key, backend, dtype, *(a.name for a in args[::2]))
    blocks = da.blockwise(_chunk, batch_index, *args, name=task, concatenate=True,
                          meta=np.empty((0,) * len(batch), dtype=object), recipe=recipe,
                          request=request, key=key, backend=backend, precision=dtype)
    out = {}
    for k, (name, port) in enumerate(graph.outputs.items()):
        extra = tuple(range(len(batch), len(batch) + len(port.shape)))
        out[name] = blocks.map_blocks(
            _pick, k, dtype=dt, chunks=blocks.chunks + tuple((n,) for n in port.shape),
            new_axis=list(extra) or None, meta=np.empty((0,) * (len(batch) + len(extra)), dt))
    return out


def _check(graph, inputs: dict, dt) -> tuple:
    """Check names, shapes and batch agreement as every evaluation does, on zero-stride
    stand-ins of the arrays (no data is read or copied); return the batch shape."""
    standins = {}
    for name, value in inputs.items():
        shape = getattr(value, "shape", None)
        if shape is None or not hasattr(value, "dtype"):
            standins[name] = value  # a number or a list: checked as it is
            continue
        if any(isinstance(n, float) and math.isnan(n) for n in shape):
            raise InputError(f"{label(name)}: a Dask array whose chunk sizes are unknown",
                             hint="call .compute_chunk_sizes() on it first")
        kind = np.dtype(value.dtype)
        standins[name] = np.broadcast_to(np.zeros((), kind if kind.kind not in "fiu" else dt),
                                         shape)
    batch, _ = prepare_inputs(graph, standins, dt)
    return batch


def _batch_chunks(graph, inputs: dict, batch: tuple) -> tuple:
    """Chunks for batched inputs given as NumPy arrays: those of the first batched Dask
    array, or Dask's automatic ones when no batched input is a Dask array."""
    import dask.array as da
    for name, port in graph.inputs.items():
        value = inputs[name]
        if isinstance(value, da.Array) and value.ndim > len(port.shape):
            return value.chunks[:len(batch)]
    return ("auto",) * len(batch)


def _chunk(*blocks, recipe: Recipe, request, key: str, backend: str, precision: str) -> tuple:
    """One block of every output: the graph evaluated on one block of each input."""
    program = program_for(recipe)
    graph = program.graph if request is None else program.derivative(*request)
    if graph.key() != key:
        raise UsageError("a Dask worker derived a different graph than the caller did",
                         hint="run the same version of diffdsl on every worker")
    out = program.engine.run(graph, dict(zip(graph.inputs, blocks, strict=True)), backend,
                             precision)
    return tuple(np.asarray(out[name]) for name in graph.outputs)


def _pick(block: tuple, k: int) -> np.ndarray:
    return block[k]
