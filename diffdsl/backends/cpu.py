"""The CPU backend: a graph compiled by Numba, straight-line below a size, a tape above it.

A `Kernel` evaluates rows: `run(X)` takes `X` of shape (rows, inputs) in the concatenated
layout of `emit` and returns (rows, outputs). Small batches run serially, large ones over
threads (DESIGN.md, decision 7): on a small shared machine a parallel region costs more than
a little work.
"""

from __future__ import annotations

import os

import numpy as np

from ..ir import Graph
from . import emit, tape

# Graphs with more nodes than this run on the tape; from bench/compile.py (README).
TAPE_THRESHOLD = 2500
# Work (rows x nodes) below which a batch runs serially; from bench/threads.py (README).
PARALLEL_WORK = 1_000_000

# OpenMP's idle threads spin by default: on a small shared machine each parallel call then
# cost 7 to 11 ms whatever the work (bench/threads.py). Set before Numba starts its threads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def uses_tape(graph: Graph, threshold: int | None = None) -> bool:
    return len(graph.nodes) > (TAPE_THRESHOLD if threshold is None else threshold)


def module_source(graph: Graph, dtype: str, key: str, version: str) -> str:
    return emit.emit_module(graph, dtype, key, version)


import_file = emit.import_file
module_in_memory = emit.module_in_memory


class Kernel:
    """Compiled evaluation of one graph in one dtype."""

    def __init__(self, graph: Graph, dtype, module=None):
        self.dtype = np.dtype(dtype)
        self.nodes = len(graph.nodes)
        self.n_in = sum(port.size for port in graph.inputs.values())
        self.n_out = sum(port.size for port in graph.outputs.values())
        self.module = module
        self.tape = None if module is not None else tape.Tape(graph, self.dtype)
        self._seen = self.compiled_now()  # the tape's functions may be compiled already

    def point(self, x: np.ndarray) -> np.ndarray:
        if self.tape is not None:
            t = self.tape
            return tape.point(t.code, t.args, t.consts, t.outputs, x)
        return self.module.point(x)

    def run(self, X: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], self.n_out), dtype=self.dtype)
        parallel = X.shape[0] > 1 and X.shape[0] * self.nodes >= PARALLEL_WORK
        if self.tape is not None:
            t = self.tape
            fn = tape.batch if parallel else tape.batch_serial
            fn(t.code, t.args, t.consts, t.outputs, X, out)
        else:
            (self.module.batch if parallel else self.module.batch_serial)(X, out)
        return out

    def new_compiles(self) -> int:
        """Functions Numba compiled (not loaded from its cache) since the last ask."""
        now = self.compiled_now()
        new, self._seen = now - self._seen, now
        return new

    def compiled_now(self) -> int:
        """Numba's running count of compilations of this kernel's functions."""
        if self.tape is not None:
            fns = [tape.run, tape.point, tape.batch, tape.batch_serial]
        else:
            m = self.module
            fns = [m.body, m.point, m.batch, m.batch_serial]
        total = 0
        for fn in fns:
            stats = getattr(fn, "stats", None)
            if stats is not None:
                total += sum(stats.cache_misses.values())
        return total
