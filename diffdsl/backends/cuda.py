"""The CUDA backend: one GPU thread per batch row, straight-line below a size, a tape above it.

Like the CPU backend (DESIGN.md, decisions 5 to 7), a graph becomes a generated module that the
kernel cache stores and imports, so Numba's `cache=True` keeps its machine code; graphs above
`TAPE_THRESHOLD` nodes run on one device interpreter over the tape's arrays instead, compiled
once for all graphs.

Unlike the CPU kernels, the inputs are not concatenated: each input is its own 2-D array of
shape (rows, size), or (1, size) when one value is shared by every row, and each output its
own (rows, size) array. Arrays already on the device (anything with `__cuda_array_interface__`:
Numba device arrays, CuPy, PyTorch CUDA tensors) are used where they lie, without a copy.

`numba.cuda` is imported when first needed, never at `import diffdsl.backends.cuda`, so this
module imports without a GPU, without the CUDA toolkit and without numba-cuda. Under Numba's
CUDA simulator (`NUMBA_ENABLE_CUDASIM=1`) kernels run as Python, where `math.sqrt(-1.0)` raises
instead of giving NaN; there the `math` that the kernels see is swapped for IEEE versions
(`cudasim.SIM_MATH`), so the simulator gives the values a GPU gives.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
import sys
import types
import warnings

import numpy as np

from .. import deepstack
from ..graph.ir import Graph, verify
from ..graph.loops import expand
from . import cuda_tape, numba_text
from .cudasim import SIM_MATH

# Graphs with more nodes than this run on the tape. Straight-line device code compiles in time
# that grows with the node count; measured for det gradients through Numba, NVVM and ptxas
# (sm_90, float64, no GPU needed): 415 nodes 1.0 s, 2455 nodes 3.6 s, 5673 nodes (det 8) 6.9 s,
# once, then Numba's disk cache. A GPU runs straight-line code from registers and the tape
# from memory, a bigger gap than on the CPU, so the CUDA threshold sits above the CPU's;
# bench/cuda_batch.py --paths straight tape measures both on a real GPU.
TAPE_THRESHOLD = 6000
# The recursion limit and stack that compiling a kernel gets (`Kernel.warm`).
COMPILE_FRAMES = 400_000
COMPILE_STACK_BYTES = 512 * 1024 * 1024
# One thread per row; 128 threads a block leaves every kernel its full 255 registers a thread.
THREADS_PER_BLOCK = 128
# The tape's scratch (live values x rows of a chunk) stays under this; big batches run in
# chunks of rows.
SCRATCH_BYTES = 256 * 2**20

_CUDA = None  # numba.cuda once imported; False when it cannot be


# ---------------------------------------------------------------------------------------------
# numba.cuda, imported lazily
# ---------------------------------------------------------------------------------------------

def _cuda():
    """`numba.cuda` (the built-in one or numba-cuda's), imported on first use."""
    global _CUDA
    if _CUDA is None:
        try:
            from numba import cuda as module
        except Exception as exc:  # no numba.cuda at all, or a broken install
            _CUDA = False
            raise ImportError(f"numba.cuda cannot be imported: {exc}") from exc
        _CUDA = module
    if _CUDA is False:
        raise ImportError("numba.cuda cannot be imported")
    return _CUDA


def _is_simulator(module) -> bool:
    return "simulator" in getattr(module.jit, "__module__", "") or \
        "simulator" in getattr(module.is_available, "__module__", "")


def simulated() -> bool:
    """Whether kernels run in Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)."""
    try:
        return _is_simulator(_cuda())
    except ImportError:
        return False


def available() -> bool:
    """Whether CUDA kernels can run here: a usable GPU, or the simulator. Never raises."""
    try:
        return bool(_cuda().is_available())
    except Exception:
        return False


@functools.cache  # asked by every large batch: the loader's search runs once a process
def driver_found() -> bool:
    """Whether the CUDA driver library loads where numba.cuda looks for it (NUMBA_CUDA_DRIVER,
    else libcuda by name, then in /usr/lib and /usr/lib64). Without it no real GPU can run:
    a large batch then picks the CPU without importing numba.cuda, half a second."""
    if os.environ.get("NUMBA_CUDA_DRIVER"):
        return True  # numba.cuda decides, with the user's path
    if sys.platform == "win32":
        names, loader = ["nvcuda.dll", "\\windows\\system32\\nvcuda.dll"], ctypes.WinDLL
    elif sys.platform == "darwin":
        names, loader = ["libcuda.dylib", "/usr/local/cuda/lib/libcuda.dylib"], ctypes.CDLL
    else:
        names = [f"{folder}libcuda.so{end}" for folder in ("", "/usr/lib/", "/usr/lib64/")
                 for end in ("", ".1")]
        loader = ctypes.CDLL
    for name in names:
        try:
            loader(name)
            return True
        except OSError:
            continue
    return False


def uses_tape(graph: Graph, threshold: int | None = None) -> bool:
    return len(graph.nodes) > (TAPE_THRESHOLD if threshold is None else threshold)


# ---------------------------------------------------------------------------------------------
# the generated module
# ---------------------------------------------------------------------------------------------

TEMPLATE = """\
# diffdsl cuda kernel for graph {key}
# dtype {dtype}; {nodes} nodes; generated by diffdsl {version}, do not edit
{ports}
import math

import numpy as np
from numba import cuda

T = np.{dtype}
INF = math.inf
NAN = math.nan
N_IN = {n_in}
N_OUT = {n_out}


@cuda.jit(device=True, cache=True)
def dd_cbrt(x):
    return cuda.cbrt(x)  # libdevice's (the simulator's is replaced on import)


@cuda.jit(device=True, cache=True)
{round}

@cuda.jit(device=True, cache=True)
def body({params}r):
{body}


@cuda.jit(cache=True)
def batch({params}rows):
    r = cuda.grid(1)
    if r < rows:
        body({params}r)
"""


def module_source(graph: Graph, dtype: str, key: str, version: str) -> str:
    """The module text: `body(x0.., y0.., r)` for one row and the kernel `batch(x0.., y0.., rows)`.

    `xK` is the K-th input (graph order) as a (rows or 1, size) array, `yK` the K-th output as
    (rows, size); the header names them. A malformed graph is refused here (`ir.verify`).
    """
    verify(graph)
    n_in, n_out = len(graph.inputs), len(graph.outputs)
    names = [f"x{k}" for k in range(n_in)] + [f"y{k}" for k in range(n_out)]
    params = "".join(f"{name}, " for name in names)
    ports = [f"# x{k} = {name}{list(port.shape)}" for k, (name, port)
             in enumerate(graph.inputs.items())]
    ports += [f"# y{k} = {name}{list(port.shape)}" for k, (name, port)
              in enumerate(graph.outputs.items())]
    lines = body_lines(graph)
    return TEMPLATE.format(key=key, dtype=dtype, nodes=len(graph.nodes), version=version,
                           ports="\n".join(ports), n_in=n_in, n_out=n_out, params=params,
                           round=numba_text.ROUND.format(integer="T(int(x))"),
                           body="\n".join("    " + line for line in lines))


def body_lines(graph: Graph) -> list[str]:
    """Straight-line code for row `r`: read the inputs' row, one line a node, store outputs."""
    lines = []
    where = {}
    for k, port in enumerate(graph.inputs.values()):
        lines.append(f"r{k} = r if x{k}.shape[0] > 1 else 0")
        for j, i in enumerate(port.ids):
            where[i] = f"x{k}[r{k}, {j}]"
    for i, node in enumerate(graph.nodes):
        if node.op == "input":
            lines.append(f"v{i} = {where[i]}")
        elif node.op == "const":
            lines.append(f"v{i} = {literal(node.attr)}")
        else:
            operands = [f"v{a}" for a in node.args]
            lines.append(f"v{i} = " + numba_text.expression(node.op, operands, "T(1.0)", "T(0.0)"))
    for k, port in enumerate(graph.outputs.values()):
        for j, i in enumerate(port.ids):
            lines.append(f"y{k}[r, {j}] = v{i}")
    if not lines:
        lines.append("pass")
    return lines


def literal(x: float) -> str:
    """A constant of the module's type T (numpy scalars under the simulator, too)."""
    if x != x:
        return "T(NAN)"
    if x in (math.inf, -math.inf):
        return "T(INF)" if x > 0 else "-T(INF)"
    return f"T({float(x)!r})"


def _adapt(module: types.ModuleType) -> types.ModuleType:
    """Under the simulator, give the module's kernels IEEE `math` (NaN, not ValueError)."""
    if simulated():
        module.__dict__["math"] = SIM_MATH
        module.__dict__["dd_cbrt"] = SIM_MATH.cbrt  # the simulator's cuda.cbrt fails for x < 0
    return module


# ---------------------------------------------------------------------------------------------
# the kernel
# ---------------------------------------------------------------------------------------------

def is_device_array(obj) -> bool:
    """Whether `obj` lies on the GPU: `__cuda_array_interface__`, or a Numba (or simulated)
    device array."""
    if isinstance(obj, np.ndarray):
        return False
    if getattr(type(obj), "__cuda_ndarray__", False):
        return True
    try:  # a CPU PyTorch tensor raises on the attribute
        return getattr(obj, "__cuda_array_interface__", None) is not None
    except Exception:
        return False


def as_device(obj):
    """A Numba device array viewing `obj`'s GPU memory (no copy)."""
    if getattr(type(obj), "__cuda_ndarray__", False):
        return obj
    return _cuda().as_cuda_array(obj)


class Kernel:
    """Compiled evaluation of one graph in one dtype on the GPU.

    `Kernel(graph, dtype, module=None)`: `module` is the imported `module_source` text; None
    runs the graph on the device tape, whose interpreter `cache=False` keeps off the disk.
    `run(inputs, rows)` evaluates rows; see there.
    """

    def __init__(self, graph: Graph, dtype, module=None, cache: bool = True):
        graph = expand(graph)  # CUDA runs loops written out (regions: DESIGN.md, decision 9)
        self.cache = cache
        self.dtype = np.dtype(dtype)
        self.nodes = len(graph.nodes)
        self.in_names = list(graph.inputs)
        self.out_names = list(graph.outputs)
        self.in_sizes = [port.size for port in graph.inputs.values()]
        self.out_sizes = [port.size for port in graph.outputs.values()]
        self.n_in = sum(self.in_sizes)
        self.n_out = sum(self.out_sizes)
        self.threads_per_block = THREADS_PER_BLOCK
        self.module = None if module is None else _adapt(module)
        self.tape = cuda_tape.DeviceTape(graph, self.dtype) if module is None else None

    def run(self, inputs: list, rows: int, host: bool | None = None) -> list:
        """Evaluate `rows` rows; returns one (rows, size) array per output, in graph order.

        `inputs[k]` is the k-th input (graph order): a host array (NumPy or anything
        `np.asarray` takes) or a device array (`__cuda_array_interface__`: Numba, CuPy, PyTorch
        CUDA), of shape (rows, size) or (1, size) for a value shared by all rows; a 1-D array
        of the input's size counts as (1, size). Host inputs are copied to the device once;
        device inputs must already have the kernel's dtype and are not copied. The outputs are
        Numba device arrays when every input was on the device, else NumPy arrays (copied back
        once); `host=True` or `False` chooses instead.
        """
        c = _cuda()
        rows = int(rows)
        if len(inputs) != len(self.in_sizes):
            raise ValueError(f"expected {len(self.in_sizes)} inputs, got {len(inputs)}")
        if rows < 0:
            raise ValueError(f"rows must be >= 0, got {rows}")
        on_device = [is_device_array(x) for x in inputs]
        arrays = [self._device_input(c, x, dev, name, size, rows) for x, dev, name, size
                  in zip(inputs, on_device, self.in_names, self.in_sizes, strict=True)]
        if host is None:
            host = not (inputs and all(on_device))
        outs = [c.device_array((rows, size), dtype=self.dtype) for size in self.out_sizes]
        if rows:
            with _quiet():
                if self.tape is not None:
                    self._run_tape(c, arrays, outs, rows)
                else:
                    tpb = min(self.threads_per_block, rows)
                    grid = (rows + tpb - 1) // tpb
                    self.module.batch[grid, tpb](*arrays, *outs, rows)
        if host:
            return [out.copy_to_host() for out in outs]
        return outs

    def _device_input(self, c, x, on_device, name, size, rows):
        if on_device:
            a = x if getattr(type(x), "__cuda_ndarray__", False) else c.as_cuda_array(x)
            if a.dtype != self.dtype:
                raise TypeError(f"input '{name}' is {a.dtype} on the device; the kernel is "
                                f"{self.dtype} (convert it there, or pass a host array)")
            if a.ndim == 1:
                a = a.reshape(1, a.shape[0])
        else:
            a = np.ascontiguousarray(x, dtype=self.dtype)
            if a.ndim == 1:
                a = a.reshape(1, -1)
        if a.ndim != 2 or a.shape[1] != size or a.shape[0] not in (1, rows):
            raise ValueError(f"input '{name}' has shape {tuple(a.shape)}; expected "
                             f"({rows}, {size}) or (1, {size})")
        return a if on_device else c.to_device(a)

    def _run_tape(self, c, arrays, outs, rows):
        run, load, store = cuda_tape.kernels(self.cache, _adapt)
        tape = self.tape
        d = tape.device_arrays(c)
        per_row = tape.n_slots * self.dtype.itemsize
        chunk = min(rows, max(1, SCRATCH_BYTES // per_row))
        tpb = min(self.threads_per_block, chunk)
        V = c.device_array((tape.n_slots, chunk), dtype=self.dtype)
        one, zero = self.dtype.type(1.0), self.dtype.type(0.0)
        for start in range(0, rows, chunk):
            count = min(chunk, rows - start)
            grid = (count + tpb - 1) // tpb
            for X, slots in zip(arrays, d["in"], strict=True):
                load[grid, tpb](X, V, slots, start, count)
            run[grid, tpb](d["code"], d["args"], d["dest"], d["consts"], V, count, one, zero)
            for Y, slots in zip(outs, d["out"], strict=True):
                store[grid, tpb](V, Y, slots, start, count)

    def warm(self) -> Kernel:
        """Compile (or load from Numba's cache) now, with a one-row launch. Numba's type
        inference walks the kernel's blocks recursively, one frame a block, and a graph of
        selects has thousands in a row (examples/gauss.dd: over 23,000, a RecursionError on a
        real GPU; the simulator compiles nothing), so it compiles on a deep stack."""
        deepstack.call(COMPILE_FRAMES, COMPILE_STACK_BYTES, self.run,
                       [np.zeros((1, size), dtype=self.dtype) for size in self.in_sizes], 1,
                       host=True)
        return self

    def compiled_now(self) -> int:
        """How many kernels Numba compiled (not loaded from its cache); 0 where it can't say."""
        fns = cuda_tape.kernels(self.cache, _adapt) if self.tape is not None else \
            [self.module.body, self.module.batch]
        total = 0
        for fn in fns:
            stats = getattr(fn, "stats", None)
            misses = getattr(stats, "cache_misses", None)
            if misses:
                total += sum(misses.values())
        return total


@contextlib.contextmanager
def _quiet():
    """Under the simulator, silence NumPy's warnings for 1/0 and the like: a GPU gives none.

    The simulator runs threads of its own, which `np.errstate` does not reach; the warning
    filters are the process's.
    """
    if not simulated():
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
