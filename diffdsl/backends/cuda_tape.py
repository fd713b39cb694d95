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
from .tape import CODE, OPCODES, Tape

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


def _tape_run(code, args, dest, consts, V, count, one, zero, third):
    """Thread t runs the tape for column t of the scratch `V`; ops as in backends/tape.run."""
    t = cuda.grid(1)
    if t >= count:
        return
    for i in range(code.shape[0]):
        op = code[i]
        if op == 0:
            continue  # inputs are loaded into their slots before the run
        a = V[args[i, 0], t]
        b = V[args[i, 1], t]
        if op == 2:
            x = a * b
        elif op == 3:
            x = a + b
        elif op == 4:
            x = a - b
        elif op == 5:
            x = -a
        elif op == 6:
            x = b if a != 0 else V[args[i, 2], t]
        elif op == 7:
            x = a / b
        elif op == 1:
            x = consts[i]
        elif op == 8:
            x = one if a <= b else zero
        elif op == 9:
            x = one if a >= b else zero
        elif op == 10:
            x = one if a < b else zero
        elif op == 11:
            x = one if a > b else zero
        elif op == 12:
            x = one if a == b else zero
        elif op == 13:
            x = one if a != b else zero
        elif op == 14:
            x = a ** b
        elif op == 15:
            x = _math.exp(a)
        elif op == 16:
            x = _math.log(a)
        elif op == 17:
            x = _math.sqrt(a)
        elif op == 18:
            x = _math.sin(a)
        elif op == 19:
            x = _math.cos(a)
        elif op == 20:
            x = _math.tan(a)
        elif op == 21:
            x = abs(a)
        elif op == 22:
            x = one if a > 0 else (-one if a < 0 else a)
        elif op == 23:
            x = _math.tanh(a)
        elif op == 24:
            x = _math.sinh(a)
        elif op == 25:
            x = _math.cosh(a)
        elif op == 26:
            x = _math.asin(a)
        elif op == 27:
            x = _math.acos(a)
        elif op == 28:
            x = _math.atan(a)
        elif op == 29:
            x = _math.asinh(a)
        elif op == 30:
            x = _math.acosh(a)
        elif op == 31:
            x = _math.atanh(a)
        elif op == 32:
            x = _math.log1p(a)
        elif op == 33:
            x = _math.expm1(a)
        elif op == 34:
            x = _math.log2(a)
        elif op == 35:
            x = _math.log10(a)
        elif op == 36:
            x = _math.copysign(abs(a) ** third, a)
        elif op == 37:
            x = _math.floor(a)
        elif op == 38:
            x = _math.ceil(a)
        elif op == 39:
            x = _math.erf(a)
        elif op == 40:
            x = one if a == 0 else zero
        elif op == 41:
            x = one if (a != 0 and b != 0) else zero
        elif op == 42:
            x = one if (a != 0 or b != 0) else zero
        elif op == 43:
            x = a if a <= b else b
        elif op == 44:
            x = a if a >= b else b
        elif op == 45:
            x = _math.atan2(a, b)
        else:
            x = _math.hypot(a, b)
        V[dest[i], t] = x


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


# The opcode numbers `_tape_run` branches on: the order of backends/tape.OPCODES.
INTERPRETED = (
    "input", "const", "mul", "add", "sub", "neg", "select", "div", "le", "ge", "lt", "gt",
    "eq", "ne", "pow", "exp", "log", "sqrt", "sin", "cos", "tan", "abs", "sign", "tanh",
    "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "log1p", "expm1",
    "log2", "log10", "cbrt", "floor", "ceil", "erf", "not", "and", "or", "min", "max",
    "atan2", "hypot",
)

_TAPE_KERNELS = None


def kernels(cuda_module, math_module):
    """The interpreter, load and store kernels, compiled on first use (cached by Numba).

    `cuda_module` is numba.cuda (or its simulator) and `math_module` the `math` the kernels
    call (IEEE versions under the simulator): both are bound here, as the kernels' globals,
    so importing this module needs neither numba.cuda nor a GPU."""
    global _TAPE_KERNELS, cuda, _math
    if _TAPE_KERNELS is None:
        if tuple(OPCODES) != INTERPRETED:  # a new op needs a branch in `_tape_run`
            raise RuntimeError("the CUDA tape interpreter is out of step with tape.OPCODES")
        cuda, _math = cuda_module, math_module
        _TAPE_KERNELS = tuple(_jit(cuda_module, fn)
                              for fn in (_tape_run, _tape_load, _tape_store))
    return _TAPE_KERNELS


def _jit(c, fn):
    try:
        return c.jit(cache=True)(fn)
    except TypeError:  # a simulator without the `cache` option
        return c.jit(fn)
