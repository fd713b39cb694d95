"""The CUDA backend's tape: graphs too big for straight-line device code, run by one device
interpreter compiled once for all graphs (backends/cuda.py uses it).

The values of a row live in scratch columns `V[slot, row]`, slots reused once a value is dead;
the interpreter branches on the opcodes of backends/tape.py.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Graph
from ..ops import OPS
from .tape import CODE, OPCODES, Op, Tape

cuda = None  # numba.cuda, bound by `kernels()`: the name the kernels below use
_math = math  # the `math` the kernels use: IEEE versions under the simulator


class DeviceTape:
    """The tape's arrays with values given slots: a slot is reused once its value is dead.

    The interpreter keeps the live values of each row in scratch `V[slot, row]` (slots first, so
    neighbouring threads touch neighbouring addresses). Reusing slots keeps the scratch a row
    needs near the graph's width rather than its length, so a chunk holds more rows.
    """

    def __init__(self, graph: Graph, dtype):
        tape = Tape(graph, dtype)
        n = len(tape.code)
        arity = np.array([OPS[name].arity for name in OPCODES], dtype=np.int64)[tape.code]
        last = np.arange(n)
        for i in range(n):
            for k in range(arity[i]):
                last[tape.args[i, k]] = i
        is_input = tape.code == CODE["input"]
        keep = is_input.copy()  # inputs (loaded before the run) and outputs are never freed
        keep[tape.outputs] = True
        slot = np.empty(n, dtype=np.int32)
        # Inputs take the first slots, wherever they stand: the load kernels fill them before
        # the interpreter starts, so no node may hold their slots before them.
        n_slots = int(is_input.sum())
        slot[is_input] = np.arange(n_slots, dtype=np.int32)
        free: list[int] = []
        for i in range(n):
            if is_input[i]:
                continue
            # Arguments dying here free their slots first: the interpreter reads every
            # argument before it writes the result, so the result may take one of them.
            for k in range(arity[i]):
                a = tape.args[i, k]
                if last[a] == i and not keep[a] and (k == 0 or a not in tape.args[i, :k]):
                    free.append(int(slot[a]))
            if free:
                slot[i] = free.pop()
            else:
                slot[i] = n_slots
                n_slots += 1
            if last[i] == i and not keep[i]:
                free.append(int(slot[i]))
        args = np.zeros_like(tape.args)
        for k in range(3):
            used = arity > k
            args[used, k] = slot[tape.args[used, k]]
        self.code = tape.code
        self.args = args
        self.dest = slot
        self.consts = tape.consts
        self.n_slots = max(n_slots, 1)
        self.in_slots = [slot[np.array(port.ids, dtype=np.int64)].astype(np.int32)
                         for port in graph.inputs.values()]
        self.out_slots = [slot[np.array(port.ids, dtype=np.int64)].astype(np.int32)
                          for port in graph.outputs.values()]
        self._device = None

    def device_arrays(self, cuda_module):
        """The tape's arrays on the device, copied once."""
        if self._device is None:
            to = cuda_module.to_device
            self._device = {
                "code": to(self.code), "args": to(self.args), "dest": to(self.dest),
                "consts": to(self.consts),
                "in": [to(s) for s in self.in_slots], "out": [to(s) for s in self.out_slots],
            }
        return self._device


def _tape_run(code, args, dest, consts, V, count, one, zero):
    """Thread t runs the tape for column t of the scratch `V`; ops as in backends/tape.run."""
    t = cuda.grid(1)
    if t >= count:
        return
    for i in range(code.shape[0]):
        op = code[i]
        if op == Op.INPUT:
            continue  # inputs are loaded into their slots before the run
        a = V[args[i, 0], t]
        b = V[args[i, 1], t]
        if op == Op.MUL:
            x = a * b
        elif op == Op.ADD:
            x = a + b
        elif op == Op.SUB:
            x = a - b
        elif op == Op.NEG:
            x = -a
        elif op == Op.SELECT:
            x = b if a != 0 else V[args[i, 2], t]
        elif op == Op.DIV:
            x = a / b
        elif op == Op.CONST:
            x = consts[i]
        elif op == Op.LE:
            x = one if a <= b else zero
        elif op == Op.GE:
            x = one if a >= b else zero
        elif op == Op.LT:
            x = one if a < b else zero
        elif op == Op.GT:
            x = one if a > b else zero
        elif op == Op.EQ:
            x = one if a == b else zero
        elif op == Op.NE:
            x = one if a != b else zero
        elif op == Op.POW:
            x = a ** b
        elif op == Op.EXP:
            x = _math.exp(a)
        elif op == Op.LOG:
            x = _math.log(a)
        elif op == Op.SQRT:
            x = _math.sqrt(a)
        elif op == Op.SIN:
            x = _math.sin(a)
        elif op == Op.COS:
            x = _math.cos(a)
        elif op == Op.TAN:
            x = _math.tan(a)
        elif op == Op.ABS:
            x = abs(a)
        elif op == Op.SIGN:
            x = one if a > 0 else (-one if a < 0 else a + zero)  # +0.0 for -0.0, as NumPy
        elif op == Op.TANH:
            x = _math.tanh(a)
        elif op == Op.SINH:
            x = _math.sinh(a)
        elif op == Op.COSH:
            x = _math.cosh(a)
        elif op == Op.ASIN:
            x = _math.asin(a)
        elif op == Op.ACOS:
            x = _math.acos(a)
        elif op == Op.ATAN:
            x = _math.atan(a)
        elif op == Op.ASINH:
            x = _math.asinh(a)
        elif op == Op.ACOSH:
            x = _math.acosh(a)
        elif op == Op.ATANH:
            x = _math.atanh(a)
        elif op == Op.LOG1P:
            x = _math.log1p(a)
        elif op == Op.EXPM1:
            x = _math.expm1(a)
        elif op == Op.LOG2:
            x = _math.log2(a)
        elif op == Op.LOG10:
            x = _math.log10(a)
        elif op == Op.CBRT:
            x = _cbrt(a)
        elif op == Op.FLOOR:
            x = _round(a, False, one)
        elif op == Op.CEIL:
            x = _round(a, True, one)
        elif op == Op.ERF:
            x = _math.erf(a)
        elif op == Op.LGAMMA:
            x = _math.lgamma(a)
        elif op == Op.NOT:
            x = one if a == 0 else zero
        elif op == Op.AND:
            x = one if (a != 0 and b != 0) else zero
        elif op == Op.OR:
            x = one if (a != 0 or b != 0) else zero
        elif op == Op.MIN:
            x = a if a <= b else b
        elif op == Op.MAX:
            x = a if a >= b else b
        elif op == Op.ATAN2:
            x = _math.atan2(a, b)
        elif op == Op.HYPOT:
            x = _math.hypot(a, b)
        else:
            x = _math.nan  # not an opcode: test_engine checks every op has a branch
        V[dest[i], t] = x


def _round_py(x, up, one):
    """floor (up=False) or ceil as a float of x's type: see `dd_round` in backends/cuda.py."""
    if not abs(x) < one * 4503599627370496.0:
        return x
    t = one * int(x)
    if up and t < x:
        t += one
    elif not up and t > x:
        t -= one
    return _math.copysign(t, x)


def _cbrt_py(x):
    return cuda.cbrt(x)


_round = None  # `_round_py` as a device function, made by `kernels()`
_cbrt = None  # libdevice's cbrt (numba.cuda.cbrt), or NumPy's under the simulator


def _tape_load(X, V, slots, start, count):
    """Copy input rows start.. start+count (row 0 when shared) into their scratch slots."""
    t = cuda.grid(1)
    if t < count:
        r = start + t if X.shape[0] > 1 else 0
        for j in range(slots.shape[0]):
            V[slots[j], t] = X[r, j]


def _tape_store(V, Y, slots, start, count):
    t = cuda.grid(1)
    if t < count:
        for j in range(slots.shape[0]):
            Y[start + t, j] = V[slots[j], t]


_TAPE_KERNELS = None


def kernels(cuda_module, math_module):
    """The interpreter, load and store kernels, compiled on first use (cached by Numba).

    `cuda_module` is numba.cuda (or its simulator) and `math_module` the `math` the kernels
    call (IEEE versions under the simulator): both are bound here, as the kernels' globals,
    so importing this module needs neither numba.cuda nor a GPU."""
    global _TAPE_KERNELS, cuda, _math, _round, _cbrt
    if _TAPE_KERNELS is None:
        cuda, _math = cuda_module, math_module
        _cbrt = cuda_module.jit(device=True)(_cbrt_py) if math_module is math \
            else math_module.cbrt
        _round = cuda_module.jit(device=True)(_round_py)
        _TAPE_KERNELS = tuple(_jit(cuda_module, fn)
                              for fn in (_tape_run, _tape_load, _tape_store))
    return _TAPE_KERNELS


def _jit(c, fn):
    try:
        return c.jit(cache=True)(fn)
    except TypeError:  # a simulator without the `cache` option
        return c.jit(fn)
