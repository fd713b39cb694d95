"""The engine: where a graph runs, its compiled kernels, and the fast single-point path.

`Engine.run(graph, inputs, backend, dtype)` is the one route of an evaluation: a single point
given as host arrays of the declared shapes goes straight to the kernel (`_Plan.try_point`);
anything else is checked (`inputs.prepare_inputs`) and sent to one backend, the numpy
interpreter, the CPU's machine code or the GPU. Kernels are made once per graph and dtype,
from the disk cache when an entry is there.
"""

from __future__ import annotations

import functools
import math
import os
import threading
from typing import Callable

import numpy as np

from ..errors import InputError, UsageError
from ..graph import shared_part
from ..graph.ir import Graph
from .inputs import prepare_inputs, unflatten

DTYPES = {"float64": np.float64, "float32": np.float32}
BACKENDS = ("auto", "numpy", "cpu", "cuda")
# Rows from which "auto" sends a batch to a GPU (set before any GPU measurement: README).
CUDA_AUTO_ROWS = 100_000
# A batch of this many rows or more computes what its rows share once, where that is this many
# nodes or more (`shared_part`): below, the second kernel's compile and call cost more.
HOIST_ROWS = 64
HOIST_NODES = 64
BACKEND_ENV = "DIFFDSL_BACKEND"  # what "auto" means when set: lets a test suite pick numpy


class Stats:
    """Counts of the expensive steps, so tests can watch that re-evaluation builds nothing."""

    def __init__(self):
        self.graphs_built = 0  # graphs lowered from source or derived by autodiff
        self.kernels_built = 0  # kernels compiled by a backend (not loaded from the cache)
        self._lock = threading.Lock()  # `+=` on an attribute is not atomic across threads

    def count(self, what: str) -> None:
        """One more of `what` ("graphs_built" or "kernels_built")."""
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    @property
    def builds(self) -> int:
        return self.graphs_built + self.kernels_built


class Once:
    """Values made once per key, however many threads ask at the same time: the first asker
    builds, the others wait for its result instead of building their own (a key a lock, so
    that different keys build side by side). A build that fails raises in the thread that ran
    it; the next asker tries again. Builds may nest (a Hessian's plan asks for its pattern):
    the keys form no cycle, and each lock is re-entrant."""

    def __init__(self):
        self._made: dict = {}
        self._building: dict = {}
        self._lock = threading.Lock()

    def get(self, key, build: Callable):
        found = self._made.get(key)
        if found is not None:
            return found
        with self._lock:
            lock = self._building.setdefault(key, threading.RLock())
        with lock:
            found = self._made.get(key)
            if found is None:
                found = self._made[key] = build()
        with self._lock:  # later askers find the value without a lock
            self._building.pop(key, None)
        return found

    def peek(self, key):
        """The value of `key` when it is made, else None (builds nothing)."""
        return self._made.get(key)

    def items(self) -> list:
        return list(self._made.items())

    def values(self) -> list:
        return list(self._made.values())


class Engine:
    """Kernels and plans of one program's graphs; `cache=False` keeps them off the disk."""

    def __init__(self, stats: Stats, cache: bool = True):
        self.stats = stats
        self.cache = cache
        # Keyed by the graph itself, hashed by its key: an equal graph finds the same kernel.
        # Made once however many threads ask first (`Once`).
        self._kernels = Once()  # (graph, dtype[, "cuda"]) -> kernel
        self._plans: dict = {}  # (graph, dtype) -> _Plan, set before its kernel is shown

    def run(self, graph: Graph, inputs: dict, backend: str, dtype: str) -> dict:
        """Every output of `graph` by name, each of shape batch + declared shape."""
        backend = resolve_backend(backend)
        if backend in ("cpu", "auto"):
            plan = self._plans.get((graph, dtype))
            if plan is not None:
                fast = plan.try_point(inputs)
                if fast is not None:
                    return fast
        on_device = _device_inputs(inputs)
        if backend == "cuda" or (backend == "auto" and on_device):
            return self._run_cuda(graph, inputs, on_device, dtype)
        if on_device:  # GPU arrays given to a CPU backend: copied to the host once
            inputs = {k: (_to_host(v) if k in on_device else v) for k, v in inputs.items()}
        dt = DTYPES[dtype]
        # Not converted to `dtype` yet: the CPU converts a batch a chunk at a time.
        batch, arrays = prepare_inputs(graph, inputs, dt, convert=False)
        if backend == "auto":
            if _rows(batch) >= CUDA_AUTO_ROWS and gpu_present():
                return self._run_cuda(graph, inputs, on_device, dtype)
            backend = "cpu"
        if backend == "numpy":
            from ..backends import numpy as reference
            return unflatten(graph.outputs, reference.evaluate(graph, arrays, dt), batch)
        return self._run_cpu(graph, arrays, batch, dtype)

    def compiled_plan(self, graph: Graph, dtype: str) -> _Plan | None:
        """The single-point plan of `graph` once its CPU kernel is compiled, else None."""
        return self._plans.get((graph, dtype))

    def fast_function(self, graph: Graph, dtype: str, backend: str, keep=None, rename=None,
                      single: bool = False):
        """`_Plan.fast(keep, rename, single)` of `graph` once its CPU kernel is compiled and
        `backend` runs single points there; else None."""
        plan = self._plans.get((graph, dtype))
        if plan is None or resolve_backend(backend) not in ("cpu", "auto"):
            return None
        return plan.fast(keep, rename, single, backend)

    # the CPU ----------------------------------------------------------------------------------
    def _run_cpu(self, graph: Graph, arrays: dict, batch: tuple, dtype: str) -> dict:
        rows = _rows(batch)
        if rows >= HOIST_ROWS:
            parts = self.split(graph, frozenset(n for n in graph.inputs
                                                if np.ndim(arrays[n]) != 2))
            if parts is not None:  # what every row shares, computed once
                prefix, rest = parts
                once = self._run_cpu(prefix, {n: arrays[n] for n in prefix.inputs}, (), dtype)
                return self._run_cpu(rest, {**arrays, shared_part.NAME: once[shared_part.NAME]},
                                     batch, dtype)
        kernel = self.kernel(graph, dtype)
        # A batch keeps its dtype (`cpu.Kernel.run` converts it); a point is converted here.
        given = [np.ascontiguousarray(arrays[name], dtype=None if batch else DTYPES[dtype])
                 for name in graph.inputs]
        strides = [port.size if a.ndim == 2 else 0
                   for port, a in zip(graph.inputs.values(), given, strict=True)]
        outs = {name: np.empty(tuple(batch) + port.shape, dtype=DTYPES[dtype])
                for name, port in graph.outputs.items()}
        if batch == ():
            kernel.point(given, list(outs.values()))
        else:
            kernel.run(given, strides, list(outs.values()), rows)
        return {name: (out[()] if out.ndim == 0 else out) for name, out in outs.items()}

    def split(self, graph: Graph, shared: frozenset):
        """`shared_part.split` of `graph` for the inputs given once (not per row), made once
        for each graph and set of them."""
        return self._kernels.get((graph, shared, "split"), lambda: shared_part.split(
            graph, set(shared), HOIST_NODES) or False) or None  # False: kept, not split

    def kernel(self, graph: Graph, dtype: str = "float64"):
        """The compiled CPU kernel of `graph`: made once, from the disk cache when there."""
        return self._kernels.get((graph, dtype), lambda: self._build_kernel(graph, dtype))

    def _build_kernel(self, graph: Graph, dtype: str):
        from ..backends import cpu
        if cpu.uses_tape(graph):
            kernel = cpu.Kernel(graph, dtype, cache=self.cache)
            self.stats.count("kernels_built")
        else:
            kernel = self._cached_kernel(graph, dtype)
        self._plans[(graph, dtype)] = _Plan(graph, kernel, functools.partial(self.split, graph))
        return kernel

    def _cached_kernel(self, graph: Graph, dtype: str):
        from ..backends import cpu, native
        from ..cache import CacheUnavailable, KernelCache, kernel_key, warn_in_memory
        store = KernelCache() if self.cache else None
        key = None
        if store is not None:
            key = kernel_key(graph.key(), "cpu", dtype,
                             f"{native.target_id()} data {cpu.DATA_OFFSET}")
            entry = store.load_object(key)
            if entry is not None:
                try:
                    return cpu.Kernel(graph, dtype, entry[0], entry[1]["slots"])
                except (RuntimeError, KeyError, TypeError):
                    store.drop(key)  # a foreign or damaged object: rebuilt below
        kernel = cpu.Kernel(graph, dtype)
        self.stats.count("kernels_built")
        if store is not None:
            try:
                store.store_object(key, kernel.obj, {"slots": kernel.slots,
                                                     "nodes": len(graph.nodes)})
            except CacheUnavailable as exc:
                warn_in_memory(str(exc))
        return kernel

    # the GPU ----------------------------------------------------------------------------------
    def _run_cuda(self, graph: Graph, inputs: dict, on_device: set, dtype: str) -> dict:
        """Evaluate on the GPU. Device inputs are used in place, and then results stay there."""
        from ..backends import cuda as gpu
        if not gpu.available():
            raise UsageError("backend 'cuda' needs an NVIDIA GPU with a working driver, and "
                             "none was found", hint="use --backend cpu, or install the "
                             "'cuda' extra (numba-cuda) on a machine with a GPU")
        # Shapes are checked as for host inputs; a zero-stride stand-in copies no data.
        standins = {k: (np.broadcast_to(np.float64(0), tuple(v.shape)) if k in on_device
                        else v) for k, v in inputs.items()}
        batch, arrays = prepare_inputs(graph, standins)
        rows = _rows(batch)
        kernel = self.cuda_kernel(graph, dtype)
        given = []
        for name, port in graph.inputs.items():
            if name in on_device:
                value = gpu.as_device(inputs[name])
                shape = (rows, port.size) if arrays[name].ndim == 2 else (1, port.size)
                given.append(value.reshape(shape))
            else:
                given.append(np.ascontiguousarray(arrays[name], dtype=DTYPES[dtype]))
        try:
            outs = kernel.run(given, rows)
        except TypeError as exc:  # a device array of the other dtype: not copied silently
            raise InputError(str(exc)) from None
        result = {}
        for (name, port), out in zip(graph.outputs.items(), outs, strict=True):
            shape = tuple(batch) + port.shape
            if isinstance(out, np.ndarray):
                value = out.reshape(shape)
                result[name] = value[()] if not shape else value
            else:
                result[name] = out.reshape(shape or (1,))
        return result

    def cuda_kernel(self, graph: Graph, dtype: str = "float64"):
        """The compiled CUDA kernel of `graph`, made once (cached on disk like the CPU's)."""
        return self._kernels.get((graph, dtype, "cuda"),
                                 lambda: self._build_cuda_kernel(graph, dtype))

    def _build_cuda_kernel(self, graph: Graph, dtype: str):
        from ..backends import cuda as gpu
        from ..backends import emit
        from ..graph.loops import expand
        graph = expand(graph)  # the CUDA kernels run loops written out (regions: until issue 25)
        if gpu.uses_tape(graph):
            kernel = gpu.Kernel(graph, dtype, cache=self.cache).warm()
        else:
            from ..cache import kernel_key
            from ..version import __version__
            key = kernel_key(graph.key(), "cuda", dtype)
            source = gpu.module_source(graph, dtype, key, __version__)
            # Made in memory when the cache is off or unusable, or its entry is damaged.
            kernel = emit.load_module(f"diffdsl_cuda_kernel_{key[:32]}", source,
                                      key if self.cache else None,
                                      lambda module: gpu.Kernel(graph, dtype, module).warm())
        self.stats.count("kernels_built")
        return kernel


class _Plan:
    """What a single-point call needs of a compiled graph, looked up once.

    `fast(keep, rename, single)` writes a function for the call people make in a loop: it takes
    the inputs dict and returns the outputs (`single`: the one output itself, not a dict of
    it). The function is specialised to the ports (generated text, as `dataclasses` writes
    `__init__`), so a single point costs a few attribute checks, one allocation per returned
    output and one call of the kernel's builtin. A value not of exactly the declared shape
    and dtype, C-contiguous (or a Python float for a scalar), goes to `_batch`: a batch of
    such arrays (leading dimensions agreeing) runs on the kernel from there, about 10 us
    sooner than through the general path (bench/engine.py, det3 at 10^5 rows). Anything
    else returns None, and the caller takes the general path, which converts or explains.
    """

    def __init__(self, graph: Graph, kernel, splits=None):
        self.kernel = kernel
        self.splits = splits  # Engine.split of the graph: a batch's shared part, by inputs
        self.dtype = kernel.dtype
        self.shapes = [(name, port.shape) for name, port in graph.inputs.items()]
        self.outputs = [(name, port.shape) for name, port in graph.outputs.items()]
        self.sizes = [math.prod(shape) for _, shape in self.shapes]
        self.try_point = self.fast(backend="auto")  # Engine.run's: "auto" may mean the GPU

    def fast(self, keep=None, rename=None, single: bool = False, backend: str = "cpu"):
        """The single-point function; `keep(name)` selects the outputs it returns (the others
        are written into arrays it reuses) and `rename(name)` their keys; `single` returns
        the only output kept, not a dict."""
        k = self.kernel
        env = {"ndarray": np.ndarray, "empty": np.empty, "array": np.array,
               "dtype": self.dtype, "point": k.point_builtin(), "scratch": k.scratch_array(),
               "run": k.point}
        lines = ["def fast(inputs):", f"    if len(inputs) != {len(self.shapes)}:",
                 "        return None"]
        env["batch"] = functools.partial(self._batch, keep=keep, rename=rename, single=single,
                                         backend=backend)
        for j, (name, shape) in enumerate(self.shapes):
            v = f"i{j}"
            lines += [f"    {v} = inputs.get({name!r})",
                      f"    if type({v}) is not ndarray or {v}.shape != {shape!r} "
                      f"or {v}.dtype != dtype or not {v}.flags.c_contiguous:"]
            if shape == ():
                lines += [f"        if type({v}) is not float:", "            return batch(inputs)",
                          f"        {v} = array({v}, dtype)"]
            else:
                lines += ["        return batch(inputs)"]
        result = []
        for j, (name, shape) in enumerate(self.outputs):
            if keep is None or keep(name):
                lines.append(f"    o{j} = empty({shape!r}, dtype)")
                key = name if rename is None else rename(name)
                result.append(f"{key!r}: o{j}" + ("" if shape else "[()]"))
            else:
                env[f"o{j}"] = np.empty(shape, self.dtype)  # written, never returned
        args = [f"i{j}" for j in range(len(self.shapes))] + \
            [f"o{j}" for j in range(len(self.outputs))]
        if env["point"] is not None:
            lines.append(f"    point({', '.join(args + ['scratch'])})")
        else:
            lines.append(f"    run([{', '.join(args[:len(self.shapes)])}], "
                         f"[{', '.join(args[len(self.shapes):])}])")
        if single and len(result) == 1:
            lines.append("    return " + result[0].partition(": ")[2])
        else:
            lines.append("    return {" + ", ".join(result) + "}")
        exec("\n".join(lines), env)
        return env["fast"]

    def _batch(self, inputs: dict, keep, rename, single: bool, backend: str):
        """`fast`'s result for a batch of arrays of the kernel's dtype, C-contiguous, each of
        shape B + its declared shape (the same B for all) or of its declared shape alone
        (shared by every row; a scalar may be a Python float); None for anything else, and
        for a batch that "auto" may send to the GPU."""
        arrays, strides, batch = [], [], None
        for (name, shape), size in zip(self.shapes, self.sizes, strict=True):
            a = inputs.get(name)
            if type(a) is float and shape == ():
                a = np.array(a, self.dtype)
            elif type(a) is not np.ndarray or a.dtype != self.dtype or \
                    not a.flags.c_contiguous:
                return None
            extra = a.ndim - len(shape)
            if extra < 0 or a.shape[extra:] != shape:
                return None
            if extra:
                if batch is None:
                    batch = a.shape[:extra]
                elif a.shape[:extra] != batch:
                    return None
            arrays.append(a)
            strides.append(size if extra else 0)
        rows = 0 if batch is None else math.prod(batch)
        if rows == 0 or (rows >= CUDA_AUTO_ROWS and resolve_backend(backend) == "auto"
                         and gpu_present()):
            return None
        if rows >= HOIST_ROWS and 0 in strides and self.splits is not None and self.splits(
                frozenset(n for (n, _), s in zip(self.shapes, strides, strict=True) if s == 0)):
            return None  # the general path runs what the rows share once
        outs = [np.empty(batch + shape, self.dtype) for _, shape in self.outputs]
        self.kernel.run(arrays, strides, outs, rows)
        found = {name if rename is None else rename(name): out
                 for (name, _), out in zip(self.outputs, outs, strict=True)
                 if keep is None or keep(name)}
        return next(iter(found.values())) if single and len(found) == 1 else found


def resolve_backend(name: str) -> str:
    """What "auto" means here: DIFFDSL_BACKEND when set, else "auto" (decided per call: the
    GPU for device inputs or large batches when one is present, else the CPU)."""
    name = check_backend(name)
    if name == "auto":
        name = check_backend(os.environ.get(BACKEND_ENV, "auto"))
    return name


def gpu_present() -> bool:
    """A real GPU (not Numba's simulator) that numba.cuda can use."""
    from ..backends import cuda as gpu
    return gpu.driver_found() and gpu.available() and not gpu.simulated()


def _device_inputs(inputs: dict) -> set:
    if all(type(v) in (np.ndarray, float, int, list) for v in inputs.values()):
        return set()  # the common case, decided without importing the CUDA backend
    from ..backends import cuda as gpu
    return {k for k, v in inputs.items() if gpu.is_device_array(v)}


def _to_host(value) -> np.ndarray:
    from ..backends import cuda as gpu
    return gpu.as_device(value).copy_to_host()


def _rows(batch: tuple) -> int:
    return math.prod(batch)


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend '{name}'; choose one of {', '.join(BACKENDS)}")
    return name


def check_dtype(name) -> str:
    if isinstance(name, type) or isinstance(name, np.dtype):
        name = np.dtype(name).name
    if name not in DTYPES:
        raise UsageError(f"unknown dtype '{name}'; choose float64 or float32")
    return name
