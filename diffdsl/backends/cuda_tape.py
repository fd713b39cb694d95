"""The CUDA backend's tape: graphs too big for straight-line device code, run by one device
interpreter compiled once for all graphs (backends/cuda.py uses it).

The values of a row live in scratch columns `V[slot, row]`, slots reused once a value is dead.
The interpreter is written from the op table as the CPU's is (backends/numba_text.py: opcodes
are positions in `ops.OPS`, each branch its row's `numba` spelling) and kept in the kernel
cache, where Numba keeps its machine code.
"""

from __future__ import annotations

import functools

import numpy as np

from ..graph.ir import Graph
from ..graph.ops import OPS
from . import emit, numba_text
from .tape import CODE, Tape


class DeviceTape:
    """The tape's arrays with values given slots: a slot is reused once its value is dead.

    The interpreter keeps the live values of each row in scratch `V[slot, row]` (slots first, so
    neighbouring threads touch neighbouring addresses). Reusing slots keeps the scratch a row
    needs near the graph's width rather than its length, so a chunk holds more rows.
    """

    def __init__(self, graph: Graph, dtype):
        tape = Tape(graph, dtype)
        n = len(tape.code)
        arity = np.array([row.arity for row in OPS.values()], dtype=np.int64)[tape.code]
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


TEMPLATE = '''\
# diffdsl CUDA tape interpreter, written from the op table by backends/cuda_tape.py; do not edit
import math

from numba import cuda


@cuda.jit(device=True, cache=True)
def dd_cbrt(x):
    return cuda.cbrt(x)  # libdevice's (the simulator's is replaced on import)


@cuda.jit(device=True, cache=True)
{round}

@cuda.jit(cache=True)
def tape_run(code, args, dest, consts, V, count, one, zero):
    """Thread t runs the tape for column t of the scratch `V`; `one` and `zero` of its dtype."""
    t = cuda.grid(1)
    if t >= count:
        return
    for i in range(code.shape[0]):
        op = code[i]
        if op == {input}:  # input: loaded into its slot before the run
            continue
        a = V[args[i, 0], t]
        b = V[args[i, 1], t]
{dispatch}
        V[dest[i], t] = x


@cuda.jit(cache=True)
def tape_load(X, V, slots, start, count):
    """Copy input rows start.. start+count (row 0 when shared) into their scratch slots."""
    t = cuda.grid(1)
    if t < count:
        r = start + t if X.shape[0] > 1 else 0
        for j in range(slots.shape[0]):
            V[slots[j], t] = X[r, j]


@cuda.jit(cache=True)
def tape_store(V, Y, slots, start, count):
    t = cuda.grid(1)
    if t < count:
        for j in range(slots.shape[0]):
            Y[start + t, j] = V[slots[j], t]
'''


@functools.cache
def source() -> str:
    """The interpreter's module text."""
    lines = numba_text.dispatch("x", ("a", "b", "V[args[i, 2], t]"), "one", "zero",
                                {"const": "consts[i]"}, " " * 8)
    return TEMPLATE.format(round=numba_text.ROUND.format(integer="one * int(x)"),
                           input=CODE["input"], dispatch="\n".join(lines))


def kernels(cache: bool, adapt):
    """The kernels `tape_run`, `tape_load` and `tape_store`, compiled on first use (kept in
    the kernel cache unless `cache` is False). `adapt(module)` fits the module to where it
    runs (IEEE `math` under the simulator); importing this module needs no numba.cuda."""
    module = adapt(emit.interpreter("cuda_tape", source(), cache))
    return module.tape_run, module.tape_load, module.tape_store
