"""`Program`: a `.dd` file compiled once and evaluated many times."""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path

import numpy as np

from . import autodiff
from .errors import InputError, UsageError
from .ir import Graph, Port

DTYPES = {"float64": np.float64, "float32": np.float32}
BACKENDS = ("auto", "numpy", "cpu", "cuda")
# Rows from which "auto" sends a batch to a GPU (set before any GPU measurement: README).
CUDA_AUTO_ROWS = 100_000
BACKEND_ENV = "DIFFDSL_BACKEND"  # what "auto" means when set: lets a test suite pick numpy


class Stats:
    """Counts of the expensive steps, so tests can watch that re-evaluation builds nothing."""

    def __init__(self):
        self.graphs_built = 0  # graphs lowered from source or derived by autodiff
        self.kernels_built = 0  # kernels generated and compiled by a backend

    @property
    def builds(self) -> int:
        return self.graphs_built + self.kernels_built


def load(path, **options) -> Program:
    """Read and compile a `.dd` file."""
    path = Path(path)
    try:
        source = path.read_text(encoding="utf-8-sig")  # a byte order mark is not code
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    return compile(source, filename=str(path), **options)


def compile(source: str, filename: str = "<string>", backend: str = "auto",
            dtype: str = "float64", cache: bool = True) -> Program:
    """Compile `.dd` source text into a `Program`.

    `backend` is where evaluations run: "cpu" (Numba kernels), "numpy" (the reference
    interpreter) or "auto". `cache=False` keeps kernels out of the on-disk cache.
    """
    from .lower import lower  # Lark loads here, not at `import diffdsl`
    from .parse import parse
    graph = lower(parse(source, filename))
    return Program(graph, filename=filename, backend=backend, dtype=dtype, cache=cache)


class Program:
    """A compiled `.dd` program. Every method re-evaluates from the inputs it is given."""

    def __init__(self, graph: Graph, filename: str = "<string>", backend: str = "auto",
                 dtype: str = "float64", cache: bool = True):
        self.graph = graph
        self.filename = filename
        self.stats = Stats()
        self.stats.graphs_built += 1
        self.backend = _check_backend(backend)
        self.dtype = _check_dtype(dtype)
        self._derived: dict = {}
        self._kernels: dict = {}
        self._plans: dict = {}
        self._requests: dict = {}
        self._fast_grad: dict = {}
        self.cache = cache

    @property
    def inputs(self) -> dict[str, tuple]:
        return {name: port.shape for name, port in self.graph.inputs.items()}

    @property
    def outputs(self) -> dict[str, tuple]:
        return {name: port.shape for name, port in self.graph.outputs.items()}

    @property
    def builds(self) -> int:
        return self.stats.builds

    def __call__(self, values: dict | None = None, /, *, backend: str | None = None,
                 dtype: str | None = None, **inputs):
        """The value of the output, or a dict of them by name when there are several."""
        results = self.evaluate(_merge(values, inputs), backend=backend, dtype=dtype)
        if len(results) == 1:
            return next(iter(results.values()))
        return results

    def evaluate(self, inputs: dict, backend: str | None = None, dtype: str | None = None):
        """Every output by name, each of shape batch + declared shape."""
        return self._run(self.graph, inputs, backend, dtype)

    # derivatives ---------------------------------------------------------------------------
    def grad(self, values: dict | None = None, /, *, of: str | None = None, wrt=None,
             backend: str | None = None, dtype: str | None = None, **inputs) -> dict:
        """Gradient of a one-element output: `{input: array of the input's shape}`."""
        if values is None and backend is None and dtype is None:
            # The call people make in a loop: once a first call has compiled the gradient,
            # arrays of the declared shapes go straight to the kernel.
            fast = self._fast_grad.get((of, _request_key(wrt)))
            if fast is not None:
                result = fast(inputs)
                if result is not None:
                    return result
        value, grads = self.value_and_grad(values, of=of, wrt=wrt, backend=backend,
                                           dtype=dtype, **inputs)
        if values is None and backend is None and dtype is None:
            self._remember_fast_grad(of, wrt)
        return grads

    def value_and_grad(self, values: dict | None = None, /, *, of: str | None = None,
                       wrt=None, backend: str | None = None, dtype: str | None = None,
                       **inputs) -> tuple:
        """`(value, {input: gradient})` from one evaluation."""
        return self.value_and("grad", _merge(values, inputs), of=of, wrt=wrt, backend=backend,
                              dtype=dtype)

    def jacobian(self, values: dict | None = None, /, *, of: str | None = None, wrt=None,
                 mode: str = "auto", backend: str | None = None, dtype: str | None = None,
                 **inputs) -> dict:
        """`{input: array of shape output + input}`; `mode` auto, forward or reverse."""
        return self.value_and("jacobian", _merge(values, inputs), of=of, wrt=wrt, mode=mode,
                              backend=backend, dtype=dtype)[1]

    def hessian(self, values: dict | None = None, /, *, of: str | None = None, wrt=None,
                backend: str | None = None, dtype: str | None = None, **inputs) -> dict:
        """`{input: {input: array of shape input + input}}` for a one-element output."""
        return self.value_and("hessian", _merge(values, inputs), of=of, wrt=wrt,
                              backend=backend, dtype=dtype)[1]

    def vjp(self, seed, values: dict | None = None, /, *, of: str | None = None, wrt=None,
            backend: str | None = None, dtype: str | None = None, **inputs) -> dict:
        """Seed (of the output's shape, PyTorch's grad_output) times the Jacobian."""
        return self.value_and("vjp", _merge(values, inputs), of=of, wrt=wrt, seed=seed,
                              backend=backend, dtype=dtype)[1]

    def jvp(self, tangents: dict, values: dict | None = None, /, *, of: str | None = None,
            backend: str | None = None, dtype: str | None = None, **inputs):
        """The Jacobian times the tangents (a dict by input name; missing ones are zero)."""
        return self.value_and("jvp", _merge(values, inputs), of=of, tangents=tangents,
                              backend=backend, dtype=dtype)[1]

    def value_and(self, kind: str, inputs: dict, *, of: str | None = None, wrt=None,
                  mode: str = "auto", seed=None, tangents: dict | None = None,
                  backend: str | None = None, dtype: str | None = None) -> tuple:
        """The output's value and one derivative from a single evaluation.

        `kind` is grad, jacobian, hessian, vjp (give `seed`) or jvp (give `tangents`).
        Returns `(value, result)` with `result` shaped as the method of the same name.
        """
        given = dict(inputs)
        if kind == "jvp":
            if not isinstance(tangents, dict) or not tangents:
                raise UsageError("jvp needs tangents: a dict of input name -> array")
            wrt = tuple(tangents)
            for name, value in tangents.items():
                given[autodiff.tangent_name(name)] = value
        elif kind == "vjp":
            given[autodiff.SEED] = seed
        elif kind not in ("grad", "jacobian", "hessian"):
            raise UsageError(f"unknown derivative '{kind}'")
        graph = self.derivative(kind, of, wrt, mode if kind == "jacobian" else "auto")
        out = self._run(graph, given, backend, dtype)
        if kind == "jvp":
            return out["value"], out["jvp"]
        if kind == "hessian":
            result: dict = {}
            for key, value in out.items():
                if key.startswith("d:"):
                    a, b = key[2:].split(":")
                    result.setdefault(a, {})[b] = value
            return out["value"], result
        return out["value"], _by_input(out)

    def symbolic_grad(self, of: str | None = None, wrt=None) -> dict:
        """`{input: sympy.Array}`: the derivative of the output as formulas."""
        from . import symbolic
        graph = self.derivative("jacobian", of, wrt)
        return {name[2:]: expr for name, expr in symbolic.to_sympy(graph).items()
                if name.startswith("d:")}

    def to_sympy(self) -> dict:
        """`{output: SymPy expression or Array}`."""
        from . import symbolic
        return symbolic.to_sympy(self.graph)

    def derivative(self, kind: str, of=None, wrt=None, mode: str = "auto") -> Graph:
        """The derivative graph of `kind`, built once per program and request."""
        request = (kind, of, _request_key(wrt), mode)
        found = self._requests.get(request)
        if found is not None:
            return found
        graph = self._derive(kind, of, wrt, mode)
        self._requests[request] = graph
        return graph

    def _derive(self, kind: str, of, wrt, mode: str) -> Graph:
        of = autodiff.pick_output(self.graph, of)
        if kind == "jvp":
            wrt = autodiff.pick_inputs(self.graph, wrt)
        else:
            wrt = autodiff.pick_inputs(self.graph, wrt)
        key = (kind, of, tuple(wrt), mode)
        graph = self._derived.get(key)
        if graph is None:
            if kind == "jacobian":
                graph = autodiff.jacobian(self.graph, of, wrt, mode)
            else:
                graph = getattr(autodiff, kind)(self.graph, of, wrt)
            self._derived[key] = graph
            self.stats.graphs_built += 1
        return graph

    def _run(self, graph: Graph, inputs: dict, backend, dtype) -> dict:
        dtype = self.dtype if dtype is None else _check_dtype(dtype)
        backend = resolve_backend(self.backend if backend is None else backend)
        if backend in ("cpu", "auto"):
            fast = self._fast_point(graph, inputs, dtype)
            if fast is not None:
                return fast
        on_device = _device_inputs(inputs)
        if backend == "cuda" or (backend == "auto" and on_device):
            return self._run_cuda(graph, inputs, on_device, dtype)
        if on_device:  # GPU arrays given to a CPU backend: copied to the host once
            inputs = {k: (_to_host(v) if k in on_device else v) for k, v in inputs.items()}
        batch, arrays = prepare_inputs(graph, inputs)
        if backend == "auto":
            backend = "cuda" if _rows(batch) >= CUDA_AUTO_ROWS and gpu_present() else "cpu"
            if backend == "cuda":
                return self._run_cuda(graph, inputs, on_device, dtype)
        dt = DTYPES[dtype]
        if backend == "numpy":
            from .backends import numpy as reference
            flat = reference.evaluate(graph, arrays, dt)
        else:
            flat = self._run_kernel(graph, arrays, batch, dt)
        return unflatten(graph.outputs, flat, batch)

    def _run_cuda(self, graph: Graph, inputs: dict, on_device: set, dtype: str) -> dict:
        """Evaluate on the GPU. Device inputs are used in place, and then results stay there."""
        from .backends import cuda as gpu
        if not gpu.available():
            raise UsageError("backend 'cuda' needs an NVIDIA GPU with a working driver, and "
                             "none was found", hint="use --backend cpu, or install the "
                             "'cuda' extra (numba-cuda) on a machine with a GPU")
        # Shapes are checked as for host inputs; a zero-stride stand-in copies no data.
        standins = {k: (np.broadcast_to(np.float64(0), tuple(v.shape)) if k in on_device
                        else v) for k, v in inputs.items()}
        batch, arrays = prepare_inputs(graph, standins)
        rows = _rows(batch)
        kernel = self.cuda_kernel(graph, dtype)
        given = []
        for name, port in graph.inputs.items():
            if name in on_device:
                value = gpu.as_device(inputs[name])
                shape = (rows, port.size) if arrays[name].ndim == 2 else (1, port.size)
                given.append(value.reshape(shape))
            else:
                given.append(np.ascontiguousarray(arrays[name], dtype=DTYPES[dtype]))
        try:
            outs = kernel.run(given, rows)
        except TypeError as exc:  # a device array of the other dtype: not copied silently
            raise InputError(str(exc)) from None
        result = {}
        for (name, port), out in zip(graph.outputs.items(), outs, strict=True):
            shape = tuple(batch) + port.shape
            if isinstance(out, np.ndarray):
                value = out.reshape(shape)
                result[name] = value[()] if not shape else value
            else:
                result[name] = out.reshape(shape or (1,))
        return result

    def cuda_kernel(self, graph: Graph, dtype: str = "float64"):
        """The compiled CUDA kernel of `graph`, made once (cached on disk like the CPU's)."""
        found = self._kernels.get((id(graph), dtype, "cuda"))
        if found is not None:
            return found[1]
        from .backends import cuda as gpu
        from .cache import CacheUnavailable, KernelCache, kernel_key, warn_in_memory
        from .version import __version__
        module = None
        if not gpu.uses_tape(graph):
            key = kernel_key(graph.text(), "cuda", dtype)
            name = f"diffdsl_cuda_kernel_{key[:32]}"
            source = gpu.module_source(graph, dtype, key, __version__)
            module = sys.modules.get(name)
            if module is None and self.cache:
                try:
                    module = gpu.import_file(name, KernelCache().module_path(key, source))
                except CacheUnavailable as exc:
                    warn_in_memory(str(exc))
            if module is None:
                module = gpu.module_in_memory(name, source)
        kernel = gpu.Kernel(graph, dtype, module).warm()
        self.stats.kernels_built += 1
        self._kernels[(id(graph), dtype, "cuda")] = (graph, kernel)
        return kernel

    def _remember_fast_grad(self, of, wrt) -> None:
        if resolve_backend(self.backend) not in ("cpu", "auto"):
            return
        plan = self._plans.get((id(self.derivative("grad", of, wrt)), self.dtype))
        if plan is None:
            return

        grads = [(name[2:], s, shape) for name, s, shape in plan.outputs if name != "value"]
        self._fast_grad[(of, _request_key(wrt))] = lambda inputs: plan.try_point(inputs, grads)

    def _fast_point(self, graph: Graph, inputs: dict, dtype: str) -> dict | None:
        """One point given as arrays of the declared shapes: skip the general checks.

        This is the call people make in a loop; anything else (lists, batches, mistakes)
        returns None and takes the general path, which explains errors.
        """
        plan = self._plans.get((id(graph), dtype))
        return None if plan is None else plan.try_point(inputs)

    def _run_kernel(self, graph: Graph, arrays: dict, batch: tuple, dt) -> dict:
        kernel = self.kernel(graph, np.dtype(dt).name)
        if batch == ():
            parts = [arrays[name] for name in graph.inputs]
            x = parts[0] if len(parts) == 1 else np.concatenate(parts or [np.empty(0)])
            out = kernel.point(np.ascontiguousarray(x, dtype=dt))
            return split_outputs(graph, out)
        rows = int(np.prod(batch))
        X = np.empty((rows, kernel.n_in), dtype=dt)
        offset = 0
        for name, port in graph.inputs.items():
            X[:, offset:offset + port.size] = arrays[name]
            offset += port.size
        out = kernel.run(X)
        if kernel.new_compiles():  # a batch loop compiles on its first use
            self.stats.kernels_built += 1
        return split_outputs(graph, out)

    def kernel(self, graph: Graph, dtype: str = "float64"):
        """The compiled CPU kernel of `graph`: made once, from the disk cache when there."""
        found = self._kernels.get((id(graph), dtype))
        if found is not None:
            return found[1]
        from .backends import cpu
        if cpu.uses_tape(graph):
            kernel = _warm(cpu.Kernel(graph, dtype))
        else:
            kernel = self._module_kernel(graph, dtype)
        if kernel.new_compiles():
            self.stats.kernels_built += 1
        self._kernels[(id(graph), dtype)] = (graph, kernel)  # the graph keeps id() unique
        self._plans[(id(graph), dtype)] = _Plan(graph, kernel)
        return kernel

    def _module_kernel(self, graph: Graph, dtype: str):
        from .backends import cpu
        from .cache import CacheUnavailable, KernelCache, kernel_key, warn_in_memory
        from .version import __version__
        key = kernel_key(graph.text(), "cpu", dtype)
        name = f"diffdsl_kernel_{key[:32]}"
        source = cpu.module_source(graph, dtype, key, __version__)
        module = sys.modules.get(name)
        if module is not None:
            return _warm(cpu.Kernel(graph, dtype, module))
        if self.cache:
            store = KernelCache()
            for attempt in range(2):
                try:
                    module = cpu.import_file(name, store.module_path(key, source))
                    return _warm(cpu.Kernel(graph, dtype, module))
                except CacheUnavailable as exc:
                    warn_in_memory(str(exc))
                    break
                except Exception:
                    # A damaged entry (Numba's index or machine code): drop it, build afresh.
                    sys.modules.pop(name, None)
                    store.drop(key)
                    if attempt:
                        raise
        module = cpu.module_in_memory(name, source)
        return _warm(cpu.Kernel(graph, dtype, module))


class _Plan:
    """What a single-point call needs of a compiled graph, looked up once."""

    def __init__(self, graph: Graph, kernel):
        self.kernel = kernel
        self.dtype = kernel.dtype
        self.shapes = [(name, port.shape) for name, port in graph.inputs.items()]
        self.outputs = []
        offset = 0
        for name, port in graph.outputs.items():
            self.outputs.append((name, slice(offset, offset + port.size), port.shape))
            offset += port.size

    def try_point(self, inputs: dict, outputs: list | None = None) -> dict | None:
        """The outputs (all, or those listed as `(name, slice, shape)`) for arrays of exactly
        the declared shapes and dtype, else None."""
        if len(inputs) != len(self.shapes):
            return None
        parts = []
        for name, shape in self.shapes:
            value = inputs.get(name)
            if type(value) is not np.ndarray or value.shape != shape \
                    or value.dtype != self.dtype:
                return None
            parts.append(value.reshape(-1))
        out = self.kernel.point(parts[0] if len(parts) == 1 else np.concatenate(parts))
        return {name: out[s].reshape(shape) if shape else out[s.start]
                for name, s, shape in (self.outputs if outputs is None else outputs)}


def _warm(kernel):
    """Compile (or load) the single-point entry now, so the build is counted here.

    The batch loops compile on their first batch: a program used one point at a time never
    pays for them.
    """
    kernel.point(np.zeros(kernel.n_in, dtype=kernel.dtype))
    return kernel


def resolve_backend(name: str) -> str:
    """What "auto" means here: DIFFDSL_BACKEND when set, else "auto" (decided per call: the
    GPU for device inputs or large batches when one is present, else the CPU)."""
    name = _check_backend(name)
    if name == "auto":
        name = _check_backend(os.environ.get(BACKEND_ENV, "auto"))
    return name


def gpu_present() -> bool:
    """A real GPU (not Numba's simulator) that numba.cuda can use."""
    from .backends import cuda as gpu
    return gpu.available() and not gpu.simulated()


def _device_inputs(inputs: dict) -> set:
    if all(type(v) in (np.ndarray, float, int, list) for v in inputs.values()):
        return set()  # the common case, decided without importing the CUDA backend
    from .backends import cuda as gpu
    return {k for k, v in inputs.items() if gpu.is_device_array(v)}


def _to_host(value) -> np.ndarray:
    from .backends import cuda as gpu
    return gpu.as_device(value).copy_to_host()


def _rows(batch: tuple) -> int:
    return int(np.prod(batch)) if batch else 1


def split_outputs(graph: Graph, out: np.ndarray) -> dict:
    """Concatenated kernel results, (outputs,) or (rows, outputs), to one array per output."""
    flat = {}
    offset = 0
    for name, port in graph.outputs.items():
        flat[name] = out[..., offset:offset + port.size]
        offset += port.size
    return flat


def _request_key(wrt):
    return wrt if wrt is None or isinstance(wrt, str) else tuple(wrt)


def _by_input(out: dict) -> dict:
    return {key[2:]: value for key, value in out.items() if key.startswith("d:")}


def _merge(values, inputs) -> dict:
    merged = dict(values or {})
    merged.update(inputs)
    return merged


def _check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend '{name}'; choose one of {', '.join(BACKENDS)}")
    return name


def _check_dtype(name) -> str:
    if isinstance(name, type) or isinstance(name, np.dtype):
        name = np.dtype(name).name
    if name not in DTYPES:
        raise UsageError(f"unknown dtype '{name}'; choose float64 or float32")
    return name


def prepare_inputs(graph: Graph, given: dict) -> tuple[tuple, dict]:
    """Check the given values against the declared inputs; find the batch shape.

    Returns the batch shape `B` and, per input, an array of shape (rows, size) when batched or
    (size,) when shared by every row.
    """
    for name in given:
        if name not in graph.inputs:
            close = difflib.get_close_matches(name, list(graph.inputs), n=1)
            hint = f"did you mean '{close[0]}'?" if close else \
                f"the inputs are: {', '.join(graph.inputs) or 'none'}"
            raise InputError(f"'{name}' is not an input of this program", hint=hint)
    missing = [name for name in graph.inputs if name not in given]
    if missing:
        raise InputError(f"missing value for input{'s' * (len(missing) > 1)} "
                         f"{', '.join(repr(m) for m in missing)}",
                         graph.inputs[missing[0]].span,
                         hint="give every input, e.g. --inputs NAME=VALUE")
    batch = None
    batch_from = None
    arrays = {}
    shaped = {}
    for name, port in graph.inputs.items():
        arr = as_real_array(_label(name), given[name])
        declared = port.shape
        extra = arr.ndim - len(declared)
        if extra < 0 or arr.shape[extra:] != declared:
            raise InputError(
                f"{_label(name)} is declared with shape {list(declared)}, but the value given "
                f"has shape {list(arr.shape)}", port.span,
                hint="a batch adds leading dimensions: shape B + "
                     f"{list(declared)}" if declared else "a batch of scalars has any shape")
        if extra:
            b = arr.shape[:extra]
            if batch is not None and b != batch:
                raise InputError(
                    f"batch shapes do not agree: '{batch_from}' has batch {list(batch)} and "
                    f"'{name}' has batch {list(b)}", hint="every batched input needs the "
                    "same leading dimensions; give shared inputs at their declared shape")
            batch, batch_from = b, name
        shaped[name] = (arr, extra)
    rows = int(np.prod(batch)) if batch is not None else None
    for name, (arr, extra) in shaped.items():
        size = graph.inputs[name].size
        arrays[name] = arr.reshape(rows, size) if extra else arr.reshape(size)
    return (batch if batch is not None else ()), arrays


def _label(name: str) -> str:
    """How an input of a derivative graph is named in messages."""
    if name == autodiff.SEED:
        return "the seed"
    if name.startswith("@t:"):
        return f"the tangent of '{name[3:]}'"
    return f"input '{name}'"


def as_real_array(name: str, value) -> np.ndarray:
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiu":
            raise InputError(f"{name}: expected real numbers, got an array of "
                             f"{value.dtype}")
        return value if value.dtype == np.float64 else value.astype(np.float64)
    bad = _not_a_number(value)
    if bad is not None:
        raise InputError(f"{name}: expected numbers, got {bad}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (ValueError, TypeError):
        raise InputError(f"{name}: expected a number or a regular nested list of "
                         "numbers (every row the same length)") from None
    return arr


def _not_a_number(value) -> str | None:
    """What in a nested list is not a real number (None, booleans, text), or None if all are."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (bool, np.bool_)) or item is None or isinstance(item, (str, bytes)):
            return "null" if item is None else repr(item)
        elif not isinstance(item, (int, float, np.number)):
            return f"a {type(item).__name__}"
    return None


def unflatten(ports: dict[str, Port], flat: dict, batch: tuple) -> dict:
    out = {}
    for name, port in ports.items():
        arr = flat[name]
        out[name] = arr.reshape(tuple(batch) + port.shape)
        if not out[name].shape:
            out[name] = out[name][()]
    return out
