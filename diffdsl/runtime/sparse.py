"""Sparse Jacobians and Hessians of a `Program`, as `scipy.sparse` CSR matrices.

For each request (kind, output, inputs, mode) a `SparsePlan` is made once per program: the
pattern from the graph (`sparsity`), a colouring of it (`colouring`), and one derivative graph
that computes the compressed product, one sweep per colour (`sparsity.compressed_*`). Its
kernel is compiled once like any other derivative's; each call runs it and scatters the
compressed numbers into the pattern's places. Rows of a Jacobian are the output's elements
flattened; columns (and a Hessian's rows) are the elements of the `wrt` inputs, flattened and
concatenated in the order of `wrt`. The structure of a result is the pattern, the same at
every point, so an entry that happens to be zero at this point is stored as an explicit zero.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..errors import UsageError
from ..graph import autodiff, colouring, sparsity
from ..graph.colouring import Pattern
from ..graph.ir import Graph
from . import engine

MODES = ("auto", "forward", "reverse")


class SparsePlan(NamedTuple):
    pattern: Pattern
    colours: np.ndarray  # of the columns (forward, Hessian) or of the rows (reverse)
    mode: str  # "forward", "reverse" or "hessian"
    graph: Graph  # outputs "value" and, when there are sweeps, "compressed"
    take: np.ndarray  # where each entry (pattern order) stands in the flat compressed product

    @property
    def sweeps(self) -> int:
        """The number of colours: forward or reverse sweeps in the compressed kernel."""
        return int(self.colours.max()) + 1 if self.colours.size else 0


def scipy_sparse():
    try:
        import scipy.sparse
    except ImportError:
        raise UsageError("sparse derivatives are scipy.sparse matrices, and SciPy is not "
                         "installed", hint="pip install 'diffdsl[optimize]'") from None
    return scipy.sparse


def pattern(prog, of=None, wrt=None, hessian: bool = False) -> Pattern:
    """The pattern of the Jacobian of `of` (or of its Hessian) over the `wrt` columns."""
    of = autodiff.pick_output(prog.graph, of)
    wrt = autodiff.pick_inputs(prog.graph, wrt)
    find = sparsity.hessian_pattern if hessian else sparsity.jacobian_pattern
    return prog.sparse_plans.get(("pattern", of, tuple(wrt), hessian),
                                 lambda: find(prog.graph, of, wrt))


def pattern_matrix(prog, of=None, wrt=None, hessian: bool = False):
    """The pattern as a CSR matrix of booleans (True where the derivative may be nonzero)."""
    p = pattern(prog, of, wrt, hessian)
    return scipy_sparse().csr_matrix((np.ones(p.nnz, dtype=bool), p.indices.copy(),
                                      p.indptr.copy()), shape=p.shape)


def plan(prog, kind: str, of=None, wrt=None, mode: str = "auto") -> SparsePlan:
    """The plan of a sparse "jacobian" or "hessian", made once per program and request."""
    if kind not in ("jacobian", "hessian"):
        raise UsageError(f"sparse=True is for jacobian and hessian, not {kind}")
    if mode not in MODES:
        raise UsageError(f"unknown jacobian mode '{mode}'; use auto, forward or reverse")
    of = autodiff.pick_output(prog.graph, of)
    wrt = autodiff.pick_inputs(prog.graph, wrt)
    return prog.sparse_plans.get((kind, of, tuple(wrt), mode),
                                 lambda: _make_plan(prog, kind, of, wrt, mode))


def _make_plan(prog, kind: str, of: str, wrt: list[str], mode: str) -> SparsePlan:
    p = pattern(prog, of, wrt, hessian=kind == "hessian")
    if kind == "hessian":
        mode, colours, locate = "hessian", colouring.star_colouring(p), \
            colouring.locate_symmetric
    else:
        by_column = colouring.column_colouring(p) if mode != "reverse" else None
        by_row = colouring.row_colouring(p) if mode != "forward" else None
        if mode == "auto":  # the fewer sweeps; forward on a tie
            mode = "forward" if by_column.max(initial=-1) <= by_row.max(initial=-1) else \
                "reverse"
        colours, locate = (by_column, colouring.locate_columns) if mode == "forward" else \
            (by_row, colouring.locate_rows)
    seeds = colouring.groups(colours)

    def build() -> Graph:
        if kind == "hessian":
            return sparsity.compressed_hessian(prog.graph, of, wrt, seeds)
        return sparsity.compressed_jacobian(prog.graph, of, wrt, seeds, mode)

    request = f"sparse {kind} of {of} wrt {','.join(wrt)} mode {mode}"
    graph = prog.derived(request, build)
    made = graph.outputs.get(sparsity.COMPRESSED)
    if (made.shape[0] if made is not None else 0) != len(seeds):
        raise RuntimeError(f"the stored graph of '{request}' does not fit its colouring")
    colour, position = locate(p, colours)
    width = made.shape[1] if made is not None else 0
    return SparsePlan(p, colours, mode, graph, colour * width + position)


def value_and(prog, kind: str, inputs: dict, *, of=None, wrt=None, mode: str = "auto",
              backend=None, dtype=None) -> tuple:
    """`(value, matrix)` from one evaluation of the compressed kernel: a CSR matrix, or for a
    batch a list of them (nested as the batch dimensions), all with the pattern's structure."""
    sp = scipy_sparse()
    found = plan(prog, kind, of, wrt, mode)
    dtype = prog.dtype if dtype is None else engine.check_dtype(dtype)
    out = prog.engine.run(found.graph, inputs, prog.backend if backend is None else backend,
                          dtype)
    value = out["value"]
    batch = np.shape(value)[:np.ndim(value) - len(found.graph.outputs["value"].shape)]
    p = found.pattern
    rows = math.prod(batch)
    if sparsity.COMPRESSED in out:
        size = found.graph.outputs[sparsity.COMPRESSED].size
        data = np.asarray(out[sparsity.COMPRESSED]).reshape(rows, size)[:, found.take]
    else:  # zero everywhere: no sweep ran
        data = np.zeros((rows, p.nnz), dtype=engine.DTYPES[dtype])
    matrices = [sp.csr_matrix((row, p.indices.copy(), p.indptr.copy()), shape=p.shape)
                for row in data]
    if not batch:
        return value, matrices[0]
    return value, _nest(matrices, batch)


def _nest(items: list, batch: tuple) -> list:
    """A flat list in row-major order as nested lists of the batch's shape (`tolist` style)."""
    holder = np.empty(len(items), dtype=object)
    for k, item in enumerate(items):  # one by one: NumPy would look inside a sequence
        holder[k] = item
    return holder.reshape(batch).tolist()
