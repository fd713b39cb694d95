"""The CPU backend: a graph as machine code through the LLVM emitter, the tape above a size.

A `Kernel` takes one array per input port and per output port (DESIGN.md, decision 7):

    point(inputs, outputs)            one evaluation; C-contiguous arrays of the kernel's dtype
    run(inputs, strides, outputs, rows)
                                      `rows` rows; inputs[k] has `strides[k]` elements a row
                                      (0: shared by every row), outputs are (rows, size)

Inputs are read in place and outputs written once. A batched input of another real dtype than
the kernel's (float64 data for a float32 kernel) is converted a chunk of rows at a time by the
thread that runs the chunk, into a buffer of its own that stays in its cache: converting it
whole first would read and write the array once more from memory, on one core, and hold a
copy of it (bench/value_paths.py). Batches run serially below a work size and on threads
above it, each thread a slice of the rows with its own scratch (the emitted row loop releases
the GIL): on the spinning pool's threads (pool.py), or, for a batch that converts its inputs,
a batch another thread's batch holds the pool from, or one above CHUNK_WORK, on an executor's.
Above CHUNK_WORK each thread runs its slice in chunks of rows,
never waiting for the others between them, for a progress bar and so that Ctrl-C is heard
between chunks; building a kernel shows its steps on a bar too (`progress`: on a terminal,
after a second).
"""

from __future__ import annotations

import ctypes
import functools
import os
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import progress
from ..graph.ir import Graph
from ..graph.loops import has_regions
from . import llvm, native, pool
from .llvm_cold import cold, outside_loops
from .llvm_lanes import interleave

# Graphs with more nodes than this run on the tape; from bench/compile.py (README).
TAPE_THRESHOLD = 2_000_000
# Work (rows x nodes) below which a batch runs on one thread: where the spinning pool's
# threads start to pay, about 10 us of work (`python bench/engine.py --parts 5`).
PARALLEL_WORK = 200_000
# The same for an executor's threads, which sleep between batches: a batch that converts its
# inputs, or finds the pool held by another thread's (bench/engine.py, before pool.py).
EXECUTOR_WORK = 2_000_000
# Work (rows x nodes) of one chunk of a big batch: from about 15 ms (adds and multiplies) to
# 2 s (libm calls) on one core, so that a bar moves and Ctrl-C is heard within seconds, while
# a chunk's call costs nothing to speak of (bench/chunks.py).
CHUNK_WORK = 100_000_000
# Bytes of converted inputs in one chunk of a batch given in another dtype: a core's L2 cache.
CONVERT_BYTES = 256 * 2**10
THREADS_ENV = "DIFFDSL_NUM_THREADS"
EXPORTS = ("diffdsl_rows", "diffdsl_point", "diffdsl_batch", "diffdsl_spread",
           "diffdsl_spread_bytes")

_ROWS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_int64, ctypes.c_void_p)
_SPREAD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
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


def _address(a: np.ndarray) -> int:
    """The address of an array's data: read from the array object where the layout is known
    (0.1 us; `a.ctypes.data` takes 0.7)."""
    if DATA_OFFSET is None:
        return a.ctypes.data
    return ctypes.c_size_t.from_address(id(a) + DATA_OFFSET).value


def threads() -> int:
    return max(1, int(os.environ.get(THREADS_ENV) or _cpus()))


@functools.cache
def _cpus() -> int:
    """The CPUs this process may run on (os.cpu_count where that is not known), asked once:
    it took 5 us a batch call (a tenth of det3's at 10^5 rows). A process pinned to fewer
    CPUs than the machine has would otherwise spin more threads than it has cores."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def emit(graph: Graph, dtype: str, key: str = "") -> tuple[str, int]:
    """LLVM IR text of `graph` for this process's NumPy, and the scratch it needs; short
    loops run several iterations at once (llvm_lanes)."""
    t = llvm.TYPES[dtype][0]
    return llvm.emit(interleave(graph, t), dtype, DATA_OFFSET or 0, header=key,
                     vector_math=native.vector_math(), straight=native.STRAIGHT, spread=True)


def code_size(graph: Graph, top: bool = True) -> int:
    """The size the optimiser's test reads (`native.OPTIMIZE_NODES`, and OPTIMIZE_LOOP_NODES
    for a graph with loops): a graph's nodes, and for a graph with regions the nodes that
    become instructions: a region's body counts once (its loop runs it n times), its inputs
    and the parts that read its values not at all, so a loop over data is optimised however
    much data it reads. The code outside the loops counts too, but where it is left
    unoptimised (`llvm_cold`: native.STRAIGHT, less work than the loops). (A graph
    without regions keeps the plain count: O2 code generation of a million-element
    Jacobian's stores takes seconds.)"""
    if not any(node.op == "region" for node in graph.nodes):
        return len(graph.nodes)
    inside = sum(code_size(node.attr.body, False) for node in graph.nodes
                 if node.op == "region")
    return inside + (0 if top and cold(graph, native.STRAIGHT) else outside_loops(graph))


def _build(graph: Graph, dtype: str) -> tuple[bytes, int]:
    """Object code of `graph` and the scratch it needs; a bar names the step under way."""
    nodes = len(graph.nodes)
    with progress.bar(2, f"compiling {nodes:,} nodes", unit="step", rate=False) as shown:
        shown.set_postfix_str("LLVM IR")
        text, slots = emit(graph, dtype)
        shown.update()
        shown.set_postfix_str("machine code")
        obj = native.compile_ir(text, code_size(graph), loops=has_regions(graph))
        shown.update()
    return obj, slots


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
        self.spread = 0
        if uses_tape(graph):
            from . import tape
            self.tape = tape.Tape(graph, self.dtype)
            self._interpreter = tape.interpreter(cache)
            return
        if obj is None:
            obj, slots = _build(graph, self.dtype.name)
        self.obj = obj
        self.slots = slots
        self._lib = native.Library(obj, EXPORTS)  # unloaded with this kernel
        self._rows_at = self._lib.address("diffdsl_rows")
        self._rows = _ROWS(self._rows_at)
        self._spread = None  # a scratch row for each slice on the pool
        # Loops split over the pool's threads in one evaluation (llvm_spread): the bytes a
        # slice of theirs needs (0: none), the entry, and its scratch, used under the
        # pool's lock (the builtin's is used with the GIL held, which this call releases).
        self.spread = ctypes.CFUNCTYPE(ctypes.c_int64)(
            self._lib.address("diffdsl_spread_bytes"))()
        self._spread_at = _SPREAD(self._lib.address("diffdsl_spread"))
        self._spread_scratch = np.empty(max(slots, 1) if self.spread else 0, dtype=self.dtype)
        if DATA_OFFSET is not None:
            self._point = self._lib.builtin("diffdsl_point")
            self._batch = self._lib.builtin("diffdsl_batch")
        self._scratch = np.empty(max(slots, 1), dtype=self.dtype)

    def point_builtin(self):
        """The single-point builtin, called as `f(*inputs, *outputs, scratch)` with the
        GIL held; None where it cannot be used (the tape, or an unknown NumPy layout), or
        where `point` may split loops over threads."""
        return None if self.spread else self._point

    def scratch_array(self):
        return self._scratch

    def point(self, inputs: list, outputs: list) -> None:
        if self.spread and self._spread_point(inputs, outputs):
            return
        if self._point is not None:
            # The GIL is held (a builtin), so one scratch array serves every point call.
            self._point(*inputs, *outputs, self._scratch)
        else:
            self.run(inputs, [0] * len(inputs), outputs, 1)

    def _spread_point(self, inputs: list, outputs: list) -> bool:
        """One evaluation whose long loops split over the pool's threads (llvm_spread);
        False, having run nothing, on one thread or where another batch holds the pool."""
        n = min(threads(), pool.MOST + 1)
        spin = pool.pool()
        if n < 2 or not spin.lock.acquire(blocking=False):
            return False
        try:
            context = spin.spread(n, self.spread)
            ports = np.array([_address(a) for a in (*inputs, *outputs)] or [0], dtype=np.uintp)
            self._spread_at(_address(ports), _address(self._spread_scratch), context)
            spin.spread_done()
        finally:
            spin.lock.release()
        return True

    def run(self, inputs: list, strides: list, outputs: list, rows: int) -> None:
        """`inputs` C-contiguous, of any real dtype: those of another dtype than the kernel's
        are converted (see the module's docstring)."""
        if self.tape is not None:
            return self._run_tape(inputs, strides, outputs, rows)
        # Shared inputs are small, and so is a small batch: converted whole, here.
        row_bytes = self.dtype.itemsize * sum(
            s for a, s in zip(inputs, strides, strict=True) if a.dtype != self.dtype)
        inputs = [a if a.dtype == self.dtype or (s and rows * row_bytes > CONVERT_BYTES)
                  else np.ascontiguousarray(a, dtype=self.dtype)
                  for a, s in zip(inputs, strides, strict=True)]
        convert = [k for k, a in enumerate(inputs) if a.dtype != self.dtype]
        if rows == 1 and self.spread and not convert and self._spread_point(inputs, outputs):
            return
        steps = np.array(list(strides) + [a.size // max(rows, 1) for a in outputs] or [0],
                         dtype=np.int64)
        work = rows * self.nodes
        n = min(threads(), rows) if rows > 1 and work >= PARALLEL_WORK else 1
        chunk = max(1, CONVERT_BYTES // row_bytes) if convert else rows
        if work > CHUNK_WORK:
            with progress.bar(rows, f"evaluating {rows:,} rows", unit="row") as shown:
                self._slices(inputs, outputs, steps, rows, n,
                             min(chunk, _chunk_rows(self.nodes)), shown, convert)
        elif n <= 1 and self._batch is not None and not convert:
            self._batch(*inputs, *outputs, steps, self._scratch,
                        np.array([0, rows], dtype=np.int64))
        elif convert or n <= 1 or not self._pooled(inputs, outputs, steps, rows, n):
            self._slices(inputs, outputs, steps, rows, n if work >= EXECUTOR_WORK else 1,
                         chunk, None, convert)

    def _pooled(self, inputs, outputs, steps, rows: int, n: int) -> bool:
        """Rows 0..rows in `n` slices on the spinning pool (pool.py), each slice with a
        scratch of this kernel's, used only by the batch that holds the pool; False, having
        run nothing, where another thread's batch holds it."""
        spin = pool.pool()
        if not spin.lock.acquire(blocking=False):
            return False
        n = min(n, pool.MOST + 1)
        try:
            if self._spread is None or len(self._spread) < n:
                self._spread = _rows_apart(n, self.slots, self.dtype)
            ports = np.array([_address(a) for a in (*inputs, *outputs)] or [0], dtype=np.uintp)
            spread = self._spread
            spin.run(n, self._rows_at, _address(ports), _address(steps), rows,
                     _address(spread), spread.strides[0])
        finally:
            spin.lock.release()
        return True

    def _slices(self, inputs, outputs, steps, rows: int, n: int, chunk: int, shown=None,
                convert=()):
        """Rows 0..rows in `n` slices, one a thread (this thread runs the first), each slice
        in chunks of `chunk` rows. The threads never wait for each other between chunks;
        `shown` counts the rows done, updated from this thread after each of its chunks and
        while it waits for the others. Interrupted (Ctrl-C), the others stop after their
        chunk. The inputs numbered in `convert` are of another dtype: each thread converts a
        chunk's rows of them into buffers of its own and runs the chunk there."""
        arrays = (*inputs, *outputs)
        ptrs = np.array([a.ctypes.data for a in arrays] or [0], dtype=np.uintp)
        cuts = [rows * k // n for k in range(n + 1)]
        scratch = [np.empty(max(self.slots, 1), dtype=self.dtype) for _ in range(n)]
        buffers = [{j: np.empty((chunk, steps[j]), dtype=self.dtype) for j in convert}
                   for _ in range(n)] if convert else None
        row_bytes = steps * np.array([a.itemsize for a in arrays] or [0], dtype=np.int64)
        done = [0] * n  # rows finished in each slice, each written by one thread only
        counted = 0
        stop = []

        def count() -> None:
            nonlocal counted
            if shown is not None:
                shown.update(sum(done) - counted)
                counted = sum(done)

        def work(k: int, after=None, arrays=arrays) -> None:
            # `arrays`: the data the pointers point to lives while any slice runs
            for begin in range(cuts[k], cuts[k + 1], chunk):
                if stop:
                    return
                end = min(begin + chunk, cuts[k + 1])
                if buffers is None:
                    self._rows(ptrs.ctypes.data, steps.ctypes.data, begin, end,
                               scratch[k].ctypes.data)
                else:  # the chunk's rows as rows 0..end-begin: each pointer moved to `begin`
                    moved = ptrs + (row_bytes * begin).astype(np.uintp)
                    for j, buffer in buffers[k].items():
                        buffer[:end - begin] = arrays[j][begin:end]  # NumPy casts without the GIL
                        moved[j] = buffer.ctypes.data
                    self._rows(moved.ctypes.data, steps.ctypes.data, 0, end - begin,
                               scratch[k].ctypes.data)
                done[k] = end - cuts[k]
                if after is not None:
                    after()

        jobs = [_executor().submit(work, k) for k in range(1, n)]
        try:
            # The first slice runs here: one hand-off fewer, and this thread would wait anyway.
            work(0, None if shown is None else count)
            while shown is not None and futures.wait(jobs, timeout=progress.TICK_S).not_done:
                count()
        except BaseException:  # Ctrl-C: the other slices end after the chunk they are on
            stop.append(True)
            raise
        for job in jobs:
            job.result()
        count()

    def _run_tape(self, inputs, strides, outputs, rows) -> None:
        t = self.tape
        # The tape reads one concatenated row layout; build it once.
        X = np.empty((rows, sum(self.in_sizes)), dtype=self.dtype)
        offset = 0
        for a, stride, size in zip(inputs, strides, self.in_sizes, strict=True):
            X[:, offset:offset + size] = a.reshape(rows, size) if stride else a.reshape(size)
            offset += size
        out = np.empty((rows, t.n_out), dtype=self.dtype)
        for begin, end in _chunks(rows, self.nodes):
            parallel = end - begin > 1 and (end - begin) * self.nodes >= PARALLEL_WORK
            run = self._interpreter.batch if parallel else self._interpreter.batch_serial
            run(t.code, t.args, t.consts, t.outputs, X[begin:end], out[begin:end],
                self.dtype.type(1), self.dtype.type(0))
        offset = 0
        for o in outputs:
            width = o.size // max(rows, 1)
            o.reshape(rows, width)[...] = out[:, offset:offset + width]
            offset += width


def _rows_apart(n: int, size: int, dtype) -> np.ndarray:
    """`n` scratch rows of `size` elements for `n` threads, each starting on a cache line of
    its own: rows that shared a line made det5's gradient on two threads slower than on one
    (the line moving between the cores at each write)."""
    line = 128 // dtype.itemsize  # two lines: the prefetcher fetches them in pairs
    width = -(-max(size, 1) // line) * line
    memory = np.empty(n * width + line, dtype=dtype)
    skip = (-memory.ctypes.data % 128) // dtype.itemsize
    return memory[skip:skip + n * width].reshape(n, width)


def _chunk_rows(nodes: int) -> int:
    return max(1, CHUNK_WORK // max(nodes, 1))


def _chunks(rows: int, nodes: int):
    """(begin, end) of each chunk of a batch on the tape: one for a small batch; for a big
    one, chunks of about CHUNK_WORK, their rows counted on a bar."""
    size = _chunk_rows(nodes)
    if rows <= size:
        yield 0, rows
        return
    with progress.bar(rows, f"evaluating {rows:,} rows", unit="row") as shown:
        for begin in range(0, rows, size):
            end = min(rows, begin + size)
            yield begin, end
            shown.update(end - begin)


def _executor() -> ThreadPoolExecutor:
    if not _pool:
        _pool.append(ThreadPoolExecutor(max_workers=threads(), thread_name_prefix="diffdsl"))
    return _pool[0]
