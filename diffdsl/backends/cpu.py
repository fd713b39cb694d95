"""The CPU backend: a graph as machine code through the LLVM emitter, the tape above a size.

A `Kernel` takes one array per input port and per output port (DESIGN.md, decision 7):

    point(inputs, outputs)            one evaluation; C-contiguous arrays of the kernel's dtype
    run(inputs, strides, outputs, rows)
                                      `rows` rows; inputs[k] has `strides[k]` elements a row
                                      (0: shared by every row), outputs are (rows, size)

Inputs are read in place and outputs written once. Batches run serially below a work size
and on threads above it, each thread a slice of the rows with its own scratch (the emitted
row loop releases the GIL).
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..ir import Graph
from . import llvm, native

# Graphs with more nodes than this run on the tape; from bench/compile.py (README).
TAPE_THRESHOLD = 2_000_000
# Work (rows x nodes) below which a batch runs on one thread; from bench/threads.py (README).
PARALLEL_WORK = 2_000_000
THREADS_ENV = "DIFFDSL_NUM_THREADS"
EXPORTS = ("diffdsl_rows", "diffdsl_point", "diffdsl_batch")

_ROWS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_int64, ctypes.c_void_p)
_pool: list = []


def uses_tape(graph: Graph, threshold: int | None = None) -> bool:
    return len(graph.nodes) > (TAPE_THRESHOLD if threshold is None else threshold)


def _data_offset() -> int | None:
    """Where a NumPy array object holds its data pointer, checked on live arrays; None if
    no offset checks out (then single points go through the row entry)."""
    probes = [np.empty(3), np.empty((2, 2), dtype=np.float32), np.empty(())]
    for offset in range(8, 64, 8):
        if all(ctypes.c_void_p.from_address(id(a) + offset).value == a.ctypes.data
               for a in probes):
            return offset
    return None


DATA_OFFSET = _data_offset()


def threads() -> int:
    return max(1, int(os.environ.get(THREADS_ENV) or os.cpu_count() or 1))


def emit(graph: Graph, dtype: str, key: str = "") -> tuple[str, int]:
    """LLVM IR text of `graph` for this process's NumPy, and the scratch it needs."""
    return llvm.emit(graph, dtype, DATA_OFFSET or 0, header=key)


class Kernel:
    """Machine code of one graph in one dtype (or its tape, for huge graphs)."""

    def __init__(self, graph: Graph, dtype, obj: bytes | None = None, slots: int | None = None,
                 cache: bool = True):
        """`obj` and `slots`: object code and scratch from the cache, else compiled here;
        `cache=False` keeps the tape's interpreter off the disk."""
        self.dtype = np.dtype(dtype)
        self.nodes = len(graph.nodes)
        self.n_in = len(graph.inputs)
        self.n_out = len(graph.outputs)
        self.in_sizes = [port.size for port in graph.inputs.values()]
        self.tape = None
        self.obj = None
        self._point = self._batch = self._scratch = None
        if uses_tape(graph):
            from . import tape
            self.tape = tape.Tape(graph, self.dtype)
            self._interpreter = tape.interpreter(cache)
            return
        if obj is None:
            text, slots = emit(graph, self.dtype.name)
            obj = native.compile_ir(text, self.nodes)
        self.obj = obj
        self.slots = slots
        self._lib = native.Library(obj, EXPORTS)  # unloaded with this kernel
        self._rows = _ROWS(self._lib.address("diffdsl_rows"))
        if DATA_OFFSET is not None:
            self._point = self._lib.builtin("diffdsl_point")
            self._batch = self._lib.builtin("diffdsl_batch")
        self._scratch = np.empty(max(slots, 1), dtype=self.dtype)

    def point_builtin(self):
        """The single-point builtin, called as `f(*inputs, *outputs, scratch)` with the
        GIL held; None where it cannot be used (the tape, or an unknown NumPy layout)."""
        return self._point

    def scratch_array(self):
        return self._scratch

    def point(self, inputs: list, outputs: list) -> None:
        if self._point is not None:
            # The GIL is held (a builtin), so one scratch array serves every point call.
            self._point(*inputs, *outputs, self._scratch)
        else:
            self.run(inputs, [0] * len(inputs), outputs, 1)

    def run(self, inputs: list, strides: list, outputs: list, rows: int) -> None:
        if self.tape is not None:
            return self._run_tape(inputs, strides, outputs, rows)
        steps = np.array(list(strides) + [a.size // max(rows, 1) for a in outputs] or [0],
                         dtype=np.int64)
        n = min(threads(), rows) if rows > 1 and rows * self.nodes >= PARALLEL_WORK else 1
        if n <= 1 and self._batch is not None:
            self._batch(*inputs, *outputs, steps, self._scratch,
                        np.array([0, rows], dtype=np.int64))
            return
        ptrs = np.array([a.ctypes.data for a in (*inputs, *outputs)] or [0], dtype=np.uintp)
        if n <= 1:
            self._rows(ptrs.ctypes.data, steps.ctypes.data, 0, rows, self._scratch.ctypes.data)
            return
        cuts = [rows * k // n for k in range(n + 1)]
        scratch = [np.empty(max(self.slots, 1), dtype=self.dtype) for _ in range(n)]
        jobs = [_executor().submit(self._rows, ptrs.ctypes.data, steps.ctypes.data,
                                   cuts[k], cuts[k + 1], scratch[k].ctypes.data)
                for k in range(1, n)]
        # The first slice runs here: one hand-off fewer, and this thread would wait anyway.
        self._rows(ptrs.ctypes.data, steps.ctypes.data, cuts[0], cuts[1], scratch[0].ctypes.data)
        for job in jobs:
            job.result()

    def _run_tape(self, inputs, strides, outputs, rows) -> None:
        t = self.tape
        # The tape reads one concatenated row layout; build it once.
        X = np.empty((rows, sum(self.in_sizes)), dtype=self.dtype)
        offset = 0
        for a, stride, size in zip(inputs, strides, self.in_sizes, strict=True):
            X[:, offset:offset + size] = a.reshape(rows, size) if stride else a.reshape(size)
            offset += size
        out = np.empty((rows, t.n_out), dtype=self.dtype)
        parallel = rows > 1 and rows * self.nodes >= PARALLEL_WORK
        run = self._interpreter.batch if parallel else self._interpreter.batch_serial
        run(t.code, t.args, t.consts, t.outputs, X, out, self.dtype.type(1), self.dtype.type(0))
        offset = 0
        for o in outputs:
            width = o.size // max(rows, 1)
            o.reshape(rows, width)[...] = out[:, offset:offset + width]
            offset += width


def _executor() -> ThreadPoolExecutor:
    if not _pool:
        _pool.append(ThreadPoolExecutor(max_workers=threads(), thread_name_prefix="diffdsl"))
    return _pool[0]
