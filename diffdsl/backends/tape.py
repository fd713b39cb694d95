"""The tape: a graph as opcode and operand arrays, run by one Numba interpreter.

The CPU backend's machine code grows with the graph (about 130 bytes of IR a node); past
`cpu.TAPE_THRESHOLD` nodes it runs the graph as a tape instead, whose arrays take 24 bytes a
node. The interpreter below is compiled once, for all graphs, and cached by Numba.

Opcodes are the positions of the ops in the op table (`Op.MUL`); the interpreter's branches are
ordered by how often the ops occur in derivative graphs.
"""

from __future__ import annotations

import math
import os
from enum import IntEnum

import numpy as np

# OpenMP's idle threads spin by default: on a small shared machine each parallel call then
# cost 7 to 11 ms whatever the work. Set before Numba starts its threads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from numba import njit, prange  # noqa: E402  (after the setting above)

from ..ir import Graph
from ..ops import OPS

# Opcodes are the positions of the ops in the table; the interpreters name them `Op.MUL` and so
# on (an IntEnum, which Numba compiles as constants).
OPCODES = tuple(OPS)
CODE = {name: k for k, name in enumerate(OPCODES)}
Op = IntEnum("Op", {name.upper(): k for k, name in enumerate(OPCODES)}, module=__name__)


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
        if op == Op.MUL:
            v[i] = a * b
        elif op == Op.ADD:
            v[i] = a + b
        elif op == Op.SUB:
            v[i] = a - b
        elif op == Op.NEG:
            v[i] = -a
        elif op == Op.SELECT:
            v[i] = b if a != 0 else v[args[i, 2]]
        elif op == Op.DIV:
            v[i] = a / b
        elif op == Op.INPUT:
            v[i] = X[r, args[i, 0]]
        elif op == Op.CONST:
            v[i] = consts[i]
        elif op == Op.LE:
            v[i] = 1.0 if a <= b else 0.0
        elif op == Op.GE:
            v[i] = 1.0 if a >= b else 0.0
        elif op == Op.LT:
            v[i] = 1.0 if a < b else 0.0
        elif op == Op.GT:
            v[i] = 1.0 if a > b else 0.0
        elif op == Op.EQ:
            v[i] = 1.0 if a == b else 0.0
        elif op == Op.NE:
            v[i] = 1.0 if a != b else 0.0
        elif op == Op.POW:
            v[i] = a ** b
        elif op == Op.EXP:
            v[i] = math.exp(a)
        elif op == Op.LOG:
            v[i] = math.log(a)
        elif op == Op.SQRT:
            v[i] = math.sqrt(a)
        elif op == Op.SIN:
            v[i] = math.sin(a)
        elif op == Op.COS:
            v[i] = math.cos(a)
        elif op == Op.TAN:
            v[i] = math.tan(a)
        elif op == Op.ABS:
            v[i] = abs(a)
        elif op == Op.SIGN:
            v[i] = np.sign(a) + 0.0  # +0.0 for -0.0, as NumPy's
        elif op == Op.TANH:
            v[i] = math.tanh(a)
        elif op == Op.SINH:
            v[i] = math.sinh(a)
        elif op == Op.COSH:
            v[i] = math.cosh(a)
        elif op == Op.ASIN:
            v[i] = math.asin(a)
        elif op == Op.ACOS:
            v[i] = math.acos(a)
        elif op == Op.ATAN:
            v[i] = math.atan(a)
        elif op == Op.ASINH:
            v[i] = math.asinh(a)
        elif op == Op.ACOSH:
            v[i] = math.acosh(a)
        elif op == Op.ATANH:
            v[i] = math.atanh(a)
        elif op == Op.LOG1P:
            v[i] = math.log1p(a)
        elif op == Op.EXPM1:
            v[i] = math.expm1(a)
        elif op == Op.LOG2:
            v[i] = math.log2(a)
        elif op == Op.LOG10:
            v[i] = math.log10(a)
        elif op == Op.CBRT:
            v[i] = np.cbrt(a)
        elif op == Op.FLOOR:
            v[i] = np.floor(a)  # a float: math.floor gives an integer
        elif op == Op.CEIL:
            v[i] = np.ceil(a)
        elif op == Op.ERF:
            v[i] = math.erf(a)
        elif op == Op.LGAMMA:
            v[i] = math.lgamma(a)
        elif op == Op.NOT:
            v[i] = 1.0 if a == 0 else 0.0
        elif op == Op.AND:
            v[i] = 1.0 if (a != 0 and b != 0) else 0.0
        elif op == Op.OR:
            v[i] = 1.0 if (a != 0 or b != 0) else 0.0
        elif op == Op.MIN:
            v[i] = a if a <= b else b
        elif op == Op.MAX:
            v[i] = a if a >= b else b
        elif op == Op.ATAN2:
            v[i] = math.atan2(a, b)
        elif op == Op.HYPOT:
            v[i] = math.hypot(a, b)
        else:
            v[i] = math.nan  # not an opcode: test_engine checks every op has a branch
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
