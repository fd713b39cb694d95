"""The tape: a graph as opcode and operand arrays, run by one Numba interpreter.

The CPU backend's machine code grows with the graph (about 130 bytes of IR a node); past
`cpu.TAPE_THRESHOLD` nodes it runs the graph as a tape instead, whose arrays take 24 bytes a
node. The interpreter is compiled once, for all graphs, from text written from the op table
(`backends/numba_text.py`: opcodes are positions in `ops.OPS`, and each branch is its row's
`numba` spelling), and kept in the kernel cache, where Numba keeps its machine code.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from ..graph.ir import Graph, verify
from ..graph.loops import expand
from . import emit, numba_text

# OpenMP's idle threads spin by default: on a small shared machine each parallel call then
# cost 7 to 11 ms whatever the work. Set before Numba starts its threads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

CODE = numba_text.CODE


class Tape:
    """Arrays describing a graph: `code[i]`, operands `a0..a2`, and constants."""

    def __init__(self, graph: Graph, dtype):
        graph = verify(expand(graph))  # the tape runs loops written out
        n = len(graph.nodes)
        self.code = np.empty(n, dtype=np.int32)
        self.args = np.zeros((n, 3), dtype=np.int32)
        self.consts = np.zeros(n, dtype=dtype)
        position = {}
        for port in graph.inputs.values():
            for i in port.ids:
                position[i] = len(position)
        for i, node in enumerate(graph.nodes):
            self.code[i] = CODE[node.op]
            if node.op == "input":
                self.args[i, 0] = position[i]
            elif node.op == "const":
                self.consts[i] = node.attr
            else:
                self.args[i, : len(node.args)] = node.args
        self.outputs = np.array([i for port in graph.outputs.values() for i in port.ids],
                                dtype=np.int32)
        self.n_out = len(self.outputs)


TEMPLATE = '''\
# diffdsl tape interpreter, written from the op table by backends/tape.py; do not edit
import math

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def dd_cbrt(x):
    return np.cbrt(x)


@njit(cache=True, nogil=True)
{round}

@njit(cache=True, nogil=True, error_model="numpy")
def run(code, args, consts, outputs, X, r, OUT, v, one, zero):
    """Evaluate row `r` of `X` into row `r` of `OUT`; `v` is scratch, one slot per node."""
    for i in range(code.shape[0]):
        op = code[i]
        a = v[args[i, 0]]
        b = v[args[i, 1]]
{dispatch}
    for k in range(outputs.shape[0]):
        OUT[r, k] = v[outputs[k]]


@njit(cache=True, nogil=True)
def point(code, args, consts, outputs, x, one, zero):
    v = np.empty(code.shape[0], dtype=consts.dtype)
    out = np.empty((1, outputs.shape[0]), dtype=consts.dtype)
    run(code, args, consts, outputs, x.reshape((1, x.shape[0])), 0, out, v, one, zero)
    return out[0]


@njit(cache=True, nogil=True, parallel=True)
def batch(code, args, consts, outputs, X, OUT, one, zero):
    for r in prange(X.shape[0]):
        v = np.empty(code.shape[0], dtype=consts.dtype)
        run(code, args, consts, outputs, X, r, OUT, v, one, zero)


@njit(cache=True, nogil=True)
def batch_serial(code, args, consts, outputs, X, OUT, one, zero):
    v = np.empty(code.shape[0], dtype=consts.dtype)
    for r in range(X.shape[0]):
        run(code, args, consts, outputs, X, r, OUT, v, one, zero)
'''


@functools.cache
def source() -> str:
    """The interpreter's module text."""
    lines = numba_text.dispatch("v[i]", ("a", "b", "v[args[i, 2]]"), "one", "zero",
                                {"input": "X[r, args[i, 0]]", "const": "consts[i]"}, " " * 8)
    return TEMPLATE.format(round=numba_text.ROUND.format(integer="one * int(x)"),
                           dispatch="\n".join(lines))


def interpreter(cache: bool = True):
    """The interpreter module: `point(code, args, consts, outputs, x, one, zero)`, and
    `batch` and `batch_serial(code, args, consts, outputs, X, OUT, one, zero)`, where `one`
    and `zero` are of the tape's dtype. Kept in the kernel cache unless `cache` is False."""
    return emit.interpreter("tape", source(), cache)
