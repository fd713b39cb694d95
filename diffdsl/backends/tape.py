"""The tape: a graph as opcode and operand arrays, run by one Numba interpreter.

Straight-line kernels compile in time that grows with the node count (Numba's type inference
takes about a millisecond a statement); past a threshold the CPU backend runs the graph as a
tape instead. The interpreter below is compiled once, for all graphs, and cached by Numba.

Opcodes are the positions of the ops in `OPCODES`; the interpreter's branches are ordered by
how often the ops occur in derivative graphs.
"""

from __future__ import annotations

import math
import os

import numpy as np

# OpenMP's idle threads spin by default: on a small shared machine each parallel call then
# cost 7 to 11 ms whatever the work. Set before Numba starts its threads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from numba import njit, prange  # noqa: E402  (after the setting above)

from ..ir import Graph
from ..ops import OPS

OPCODES = (
    "input", "const", "mul", "add", "sub", "neg", "select", "div", "le", "ge", "lt", "gt",
    "eq", "ne", "pow", "exp", "log", "sqrt", "sin", "cos", "tan", "abs", "sign", "tanh",
    "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "log1p", "expm1",
    "log2", "log10", "cbrt", "floor", "ceil", "erf", "not", "and", "or", "min", "max",
    "atan2", "hypot",
)
CODE = {name: k for k, name in enumerate(OPCODES)}
if set(OPCODES) != set(OPS):  # a new op in the table needs a branch in `run` below
    raise ImportError(f"tape opcodes out of step with ops.OPS: {set(OPS) ^ set(OPCODES)}")


class Tape:
    """Arrays describing a graph: `code[i]`, operands `a0..a2`, and constants."""

    def __init__(self, graph: Graph, dtype):
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


@njit(cache=True, nogil=True, error_model="numpy")
def run(code, args, consts, outputs, X, r, OUT, v):
    """Evaluate row `r` of `X` into row `r` of `OUT`; `v` is scratch, one slot per node."""
    for i in range(code.shape[0]):
        op = code[i]
        a = v[args[i, 0]]
        b = v[args[i, 1]]
        if op == 2:
            v[i] = a * b
        elif op == 3:
            v[i] = a + b
        elif op == 4:
            v[i] = a - b
        elif op == 5:
            v[i] = -a
        elif op == 6:
            v[i] = b if a != 0 else v[args[i, 2]]
        elif op == 7:
            v[i] = a / b
        elif op == 0:
            v[i] = X[r, args[i, 0]]
        elif op == 1:
            v[i] = consts[i]
        elif op == 8:
            v[i] = 1.0 if a <= b else 0.0
        elif op == 9:
            v[i] = 1.0 if a >= b else 0.0
        elif op == 10:
            v[i] = 1.0 if a < b else 0.0
        elif op == 11:
            v[i] = 1.0 if a > b else 0.0
        elif op == 12:
            v[i] = 1.0 if a == b else 0.0
        elif op == 13:
            v[i] = 1.0 if a != b else 0.0
        elif op == 14:
            v[i] = a ** b
        elif op == 15:
            v[i] = math.exp(a)
        elif op == 16:
            v[i] = math.log(a)
        elif op == 17:
            v[i] = math.sqrt(a)
        elif op == 18:
            v[i] = math.sin(a)
        elif op == 19:
            v[i] = math.cos(a)
        elif op == 20:
            v[i] = math.tan(a)
        elif op == 21:
            v[i] = abs(a)
        elif op == 22:
            v[i] = np.sign(a)
        elif op == 23:
            v[i] = math.tanh(a)
        elif op == 24:
            v[i] = math.sinh(a)
        elif op == 25:
            v[i] = math.cosh(a)
        elif op == 26:
            v[i] = math.asin(a)
        elif op == 27:
            v[i] = math.acos(a)
        elif op == 28:
            v[i] = math.atan(a)
        elif op == 29:
            v[i] = math.asinh(a)
        elif op == 30:
            v[i] = math.acosh(a)
        elif op == 31:
            v[i] = math.atanh(a)
        elif op == 32:
            v[i] = math.log1p(a)
        elif op == 33:
            v[i] = math.expm1(a)
        elif op == 34:
            v[i] = math.log2(a)
        elif op == 35:
            v[i] = math.log10(a)
        elif op == 36:
            v[i] = np.cbrt(a)
        elif op == 37:
            v[i] = math.floor(a)
        elif op == 38:
            v[i] = math.ceil(a)
        elif op == 39:
            v[i] = math.erf(a)
        elif op == 40:
            v[i] = 1.0 if a == 0 else 0.0
        elif op == 41:
            v[i] = 1.0 if (a != 0 and b != 0) else 0.0
        elif op == 42:
            v[i] = 1.0 if (a != 0 or b != 0) else 0.0
        elif op == 43:
            v[i] = a if a <= b else b
        elif op == 44:
            v[i] = a if a >= b else b
        elif op == 45:
            v[i] = math.atan2(a, b)
        else:
            v[i] = math.hypot(a, b)
    for k in range(outputs.shape[0]):
        OUT[r, k] = v[outputs[k]]


@njit(cache=True, nogil=True)
def point(code, args, consts, outputs, x):
    v = np.empty(code.shape[0], dtype=consts.dtype)
    out = np.empty((1, outputs.shape[0]), dtype=consts.dtype)
    run(code, args, consts, outputs, x.reshape((1, x.shape[0])), 0, out, v)
    return out[0]


@njit(cache=True, nogil=True, parallel=True)
def batch(code, args, consts, outputs, X, OUT):
    for r in prange(X.shape[0]):
        v = np.empty(code.shape[0], dtype=consts.dtype)
        run(code, args, consts, outputs, X, r, OUT, v)


@njit(cache=True, nogil=True)
def batch_serial(code, args, consts, outputs, X, OUT):
    v = np.empty(code.shape[0], dtype=consts.dtype)
    for r in range(X.shape[0]):
        run(code, args, consts, outputs, X, r, OUT, v)
