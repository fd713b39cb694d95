"""`Program`: a `.dd` file compiled once and evaluated many times; the kernel cache."""

from __future__ import annotations

from pathlib import Path

from . import limits as limits_
from .cache import cache_clear, cache_info
from .errors import UsageError
from .graph import autodiff, sparsity
from .graph.ir import Graph, prune
from .graph.loops import expand
from .runtime import calls, chunked, engine
from .runtime.engine import BACKENDS, DTYPES, Engine, Once, Stats
from .runtime.inputs import a_or_an

__all__ = ["BACKENDS", "DTYPES", "Program", "cache_clear", "cache_info", "compile", "load"]


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
            dtype: str = "float64", cache: bool = True, limits: dict | None = None) -> Program:
    """Compile `.dd` source text into a `Program`.

    `backend` is where evaluations run: "cpu" (machine code), "numpy" (the reference
    interpreter) or "auto". `cache=False` keeps kernels out of the on-disk cache.
    `limits` raises (or lowers) limits on the work of compiling, for this program and the
    derivatives built from it later: `limits={"nodes": 5_000_000}` (see `diffdsl.limits`)."""
    if not isinstance(source, str):
        what = "bytes" if isinstance(source, bytes) else "None" if source is None else \
            a_or_an(type(source).__name__)
        raise UsageError(f"compile takes the program's source text (a str), not {what}",
                         hint="decode bytes first (source.decode('utf-8')), or read a file "
                              "with diffdsl.load(path)")
    limits = dict(limits or {})
    with limits_.using(**limits):
        return _compile(source, filename, backend, dtype, cache, limits)


def _compile(source, filename, backend, dtype, cache, limits) -> Program:
    plans = None
    if cache:
        from .runtime.plans import PlanStore
        plans = PlanStore(source, filename)
        graph = plans.graph("program")
        if graph is not None:  # a warm start: no parsing, lowering or autodiff
            return Program(graph, filename=filename, backend=backend, dtype=dtype, cache=cache,
                           plans=plans, built=False, limits=limits, source=source)
    from .language.lower import lower  # Lark loads here, not at `import diffdsl`
    from .language.parse import parse
    graph = lower(parse(source, filename, cache=cache))
    if plans is not None:
        plans.remember("program", graph)
    return Program(graph, filename=filename, backend=backend, dtype=dtype, cache=cache,
                   plans=plans, limits=limits, source=source)


class Program:
    """A compiled `.dd` program. Every method re-evaluates from the inputs it is given."""

    def __init__(self, graph: Graph, filename: str = "<string>", backend: str = "auto",
                 dtype: str = "float64", cache: bool = True, plans=None, built: bool = True,
                 limits: dict | None = None, source: str | None = None):
        self.graph = graph
        self.source = source  # what Dask workers compile (chunked.Recipe); None: the graph
        self.limits = dict(limits or {})  # applied again when derivatives are built
        self.filename = filename
        self.stats = Stats()
        self.stats.graphs_built += built
        self._plan_store = plans  # the source-keyed plan entry, when the cache is on
        self.backend = engine.check_backend(backend)
        self.dtype = engine.check_dtype(dtype)
        self.cache = cache
        self.engine = Engine(self.stats, cache)
        # Graphs and plans are made once however many threads ask first (`engine.Once`).
        self._derived = Once()  # request text -> derivative graph
        self._requests = Once()  # (kind, of, wrt, mode) -> derivative graph
        self._fast = calls.FastCalls()  # the value's and gradients' single-point calls
        self.sparse_plans = Once()  # sparse.py's patterns and plans, by request

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
        def slow():
            out = self.evaluate(self._given(values, inputs, "prog"), backend, dtype)
            return next(iter(out.values())) if len(out) == 1 else out
        return self._fast.call(self, "value", slow, values, backend, dtype, inputs)

    def evaluate(self, inputs: dict, backend: str | None = None, dtype: str | None = None):
        """Every output by name, each of shape batch + declared shape."""
        return self._run(self.graph, self._given(inputs, {}, "evaluate"), backend, dtype)

    # derivatives ---------------------------------------------------------------------------
    def grad(self, values: dict | None = None, /, *, of: str | None = None, wrt=None,
             reduce: str | None = None, backend: str | None = None, dtype: str | None = None,
             **inputs) -> dict:
        """Gradient of a one-element output: `{input: array of the input's shape}`.

        For a batch, `reduce="sum"` (or `"mean"`) gives the gradient of the sum (or mean) of
        the rows' values: an input shared by every row gets one gradient of its declared
        shape, a batched input the gradient of its rows (divided by the row count for mean).
        """
        calls.check_mapping(self.graph, values, "grad")  # here, so that an error names grad
        if reduce is not None:
            return self.value_and_grad(values, of=of, wrt=wrt, reduce=reduce, backend=backend,
                                       dtype=dtype, **inputs)[1]
        return self._fast.call(self, ("grad", of, _request_key(wrt)), lambda: self.value_and(
            "grad", self._given(values, inputs, "grad"), of=of, wrt=wrt, backend=backend,
            dtype=dtype, value=False)[1], values, backend, dtype, inputs, of, wrt)

    def value_and_grad(self, values: dict | None = None, /, *, of: str | None = None,
                       wrt=None, reduce: str | None = None, backend: str | None = None,
                       dtype: str | None = None, **inputs) -> tuple:
        """`(value, {input: gradient})` from one evaluation; `reduce` as for `grad`, the value
        then the sum (or mean) over the batch."""
        given = self._given(values, inputs, "value_and_grad")
        value, grads = self.value_and("grad", given, of=of, wrt=wrt, backend=backend,
                                      dtype=dtype)
        if reduce is None:
            return value, grads
        return calls.reduce_value(value, reduce), \
            calls.reduce_grads(self.graph, grads, given, reduce)

    def jacobian(self, values: dict | None = None, /, *, of: str | None = None, wrt=None,
                 mode: str = "auto", sparse: bool = False, backend: str | None = None,
                 dtype: str | None = None, **inputs):
        """`{input: array of shape output + input}`; `mode` auto, forward or reverse. With
        `sparse=True`, one `scipy.sparse.csr_matrix`: rows the output's elements, columns the
        `wrt` inputs' elements (flattened, concatenated in order), by graph colouring."""
        return self.value_and("jacobian", self._given(values, inputs, "jacobian"), of=of,
                              wrt=wrt, mode=mode, sparse=sparse, backend=backend,
                              dtype=dtype)[1]

    def hessian(self, values: dict | None = None, /, *, of: str | None = None, wrt=None,
                diagonal: bool = False, sparse: bool = False, backend: str | None = None,
                dtype: str | None = None, **inputs):
        """`{input: {input: array of shape input + input}}` for a one-element output; with
        `diagonal=True`, `{input: array of the input's shape}`: d²f/dx² element by element;
        with `sparse=True`, one `scipy.sparse.csr_matrix` over the `wrt` inputs' elements."""
        if diagonal and sparse:
            raise UsageError("hessian takes diagonal=True or sparse=True, not both")
        key = ("hessian_diagonal", of, _request_key(wrt)) if diagonal else None  # a fast path
        return self._fast.call(self, key, lambda: self.value_and(
            key[0] if diagonal else "hessian", self._given(values, inputs, "hessian"), of=of,
            wrt=wrt, sparse=sparse, backend=backend, dtype=dtype, value=False)[1],
            values, backend, dtype, inputs, of, wrt)

    def grad_and_hessian_diagonal(self, values: dict | None = None, /, *, of: str | None = None,
                                  wrt=None, backend: str | None = None,
                                  dtype: str | None = None, **inputs) -> tuple:
        """`(gradient, diagonal)`, each `{input: array of the input's shape}`, as `grad` and
        `hessian(diagonal=True)` give them, from one evaluation: a Newton step with the
        Hessian's diagonal (k-means) costs one pass over the data, not two."""
        key = (calls.PAIRED, of, _request_key(wrt))
        return self._fast.call(self, key, lambda: self.value_and(
            calls.PAIRED, self._given(values, inputs, calls.PAIRED), of=of, wrt=wrt,
            backend=backend, dtype=dtype, value=False)[1], values, backend, dtype, inputs, of, wrt)

    def sparsity(self, *, of: str | None = None, wrt=None, hessian: bool = False):
        """The pattern of the Jacobian of `of` (or, `hessian=True`, of its Hessian) from the
        graph: a boolean `scipy.sparse.csr_matrix` shaped as `jacobian(..., sparse=True)`."""
        from .runtime import sparse
        return sparse.pattern_matrix(self, of, wrt, hessian)

    def hvp(self, tangents: dict, values: dict | None = None, /, *, of: str | None = None,
            wrt=None, backend: str | None = None, dtype: str | None = None, **inputs) -> dict:
        """The Hessian times the vector `tangents` (a dict by input name; missing ones are
        zero), without forming the Hessian: `{input: array of the input's shape}`."""
        return self.value_and("hvp", self._given(values, inputs, "hvp"), of=of, wrt=wrt,
                              tangents=tangents, backend=backend, dtype=dtype)[1]

    def vjp(self, seed, values: dict | None = None, /, *, of: str | None = None, wrt=None,
            backend: str | None = None, dtype: str | None = None, **inputs) -> dict:
        """Seed (of the output's shape, PyTorch's grad_output) times the Jacobian."""
        return self.value_and("vjp", self._given(values, inputs, "vjp"), of=of, wrt=wrt, seed=seed,
                              backend=backend, dtype=dtype)[1]

    def jvp(self, tangents: dict, values: dict | None = None, /, *, of: str | None = None,
            backend: str | None = None, dtype: str | None = None, **inputs):
        """The Jacobian times the tangents (a dict by input name; missing ones are zero)."""
        return self.value_and("jvp", self._given(values, inputs, "jvp"), of=of, tangents=tangents,
                              backend=backend, dtype=dtype)[1]

    def value_and(self, kind: str, inputs: dict, *, of: str | None = None, wrt=None,
                  mode: str = "auto", seed=None, tangents: dict | None = None,
                  sparse: bool = False, backend: str | None = None,
                  dtype: str | None = None, value: bool = True) -> tuple:
        """The output's value and one derivative from a single evaluation.

        `kind` is grad, jacobian, hessian, hessian_diagonal, vjp (give `seed`), jvp, hvp
        (give `tangents`) or grad_and_hessian_diagonal. Returns `(value, result)` with
        `result` shaped as the method of the same name (`sparse=True`: a CSR matrix, a list
        of them for a batch); with
        `value=False`, `(None, result)`, computed without what only the value needs."""
        inputs = self._given(inputs, {}, "value_and")
        if sparse:
            from .runtime import sparse as sparse_
            return sparse_.value_and(self, kind, inputs, of=of, wrt=wrt, mode=mode,
                                     backend=backend, dtype=dtype)
        given, wrt = calls.derivative_inputs(self.graph, kind, inputs, wrt, seed, tangents)
        graph = self.derivative(kind, of, wrt, mode if kind == "jacobian" else "auto", value=value)
        return calls.split_outputs(kind, self._run(graph, given, backend, dtype))

    def objective(self, values: dict | None = None, /, *, wrt=None, of: str | None = None,
                  sparse: bool | None = None, **inputs):
        """This program as a function of one flat float64 vector, for `scipy.optimize`:
        `o.fun`, `o.jac`, `o.hess`, `o.hessp`, `o.x0` (the values given for the `wrt` inputs,
        each required), `o.unravel(v)`; for an output of several elements,
        `o.residuals` and `o.jac` (a matrix) for `least_squares`. The other inputs are fixed
        at the values given. `o.hess` is a CSR matrix with `sparse=True`, an array with
        `sparse=False`, and by default CSR where the Hessian is large and sparse (see
        `objective.SPARSE_ROWS`, `objective.SPARSE_DENSITY`)."""
        from .runtime.objective import Objective
        out = autodiff.pick_output(self.graph, of)
        wrt = autodiff.pick_inputs(self.graph, wrt)
        return Objective(self, out, wrt, self._given(values, inputs, "objective"), sparse)

    def __repr__(self) -> str:
        def ports(table):
            return ", ".join(f"{n}{list(s) if s else ''}" for n, s in table.items())
        return (f"<diffdsl.Program {self.filename}: inputs {ports(self.inputs) or 'none'}; "
                f"outputs {ports(self.outputs)}; {len(self.graph.nodes):,} nodes>")

    def _repr_markdown_(self) -> str:
        rows = [f"| input | `{n}` | {list(s)} |" for n, s in self.inputs.items()]
        rows += [f"| output | `{n}` | {list(s)} |" for n, s in self.outputs.items()]
        return (f"**diffdsl program** `{self.filename}`, {len(self.graph.nodes):,} nodes\n\n"
                "| | name | shape |\n|---|---|---|\n" + "\n".join(rows))

    def _repr_latex_(self) -> str | None:
        """The outputs as formulas (Jupyter shows them), for programs small enough to print."""
        if len(self.graph.nodes) > 200:
            return None
        from .symbolic.formulas import outputs_latex
        return outputs_latex(self.to_sympy())

    def __reduce__(self):
        """A program pickles as its source text and options (`chunked.Recipe`), never its
        graphs or kernels: where it is unpickled it is compiled once per process (from the
        disk cache when it is there), so that Dask and multiprocessing can send it."""
        return chunked.program_for, (chunked.Recipe.of(self, compile),)

    def output_name(self, of: str | None = None) -> str:
        """The name of output `of`, checked; with `of=None`, that of the only output."""
        return autodiff.pick_output(self.graph, of)

    def check(self, points=3, *, domain: dict | None = None, seed: int = 0) -> dict:
        """Every derivative against `sympy.diff` and central finite differences, as `diffdsl
        check` does: a JSON-ready dict `{"ok", "status", "checked", "unchecked", "symbolic",
        "numeric"}`. `status` is "ok", "mismatch", or "unchecked" where some derivative was
        compared nowhere (`unchecked` lists its `[output, input]`); `ok` is status "ok".

        `points` is a number of random points, or the points themselves: a dict of every
        input's value, leading dimensions beyond its declared shape a batch (a point a row),
        as `evaluate` takes them. `.ranges` says where random points were drawn from.
        `domain={"x": (low, high)}` draws input x's elements from [low, high); the others
        from ranges inside the domains of the program's functions."""
        from collections.abc import Mapping

        import numpy as np

        from .runtime.inputs import prepare_inputs
        from .symbolic import check
        if isinstance(points, Mapping):
            batch, arrays = prepare_inputs(self.graph, dict(points))
            rows = int(np.prod(batch)) if batch else 1
            if rows == 0:
                raise UsageError("points= holds no point: its batch is empty")
            values = {name: np.broadcast_to(arr, (rows, arr.shape[-1]))
                      if arr.ndim == 1 else arr for name, arr in arrays.items()}
            return check.check(expand(self.graph), seed=seed, domain=domain, values=values)
        if isinstance(points, bool) or not isinstance(points, (int, np.integer)):
            raise UsageError(f"check's points= is a number of random points or a dict of "
                             f"input values, not {type(points).__name__}")
        if points < 1:
            raise UsageError(f"check needs points >= 1, got {points}")
        return check.check(expand(self.graph), points=int(points), seed=seed, domain=domain)

    def to_dot(self, of: str | None = None, grad: bool = False) -> str:
        """The graph as Graphviz DOT text: every output's, or output `of`'s alone; with
        `grad=True`, the graph of `of`'s value and gradient."""
        from .graph.dot import to_dot
        if grad:
            graph = self.derivative("grad", of)
        elif of is not None:
            name = autodiff.pick_output(self.graph, of)
            graph = prune(self.graph.nodes, self.graph.inputs, {name: self.graph.outputs[name]})
        else:
            graph = self.graph
        return to_dot(graph, Path(self.filename).name)

    def symbolic_grad(self, of: str | None = None, wrt=None, simplify: bool = False) -> dict:
        """`{input: SymPy expression or Array of the input's shape}`: the gradient of a
        one-element output as formulas (`simplify=True`: each simplified by SymPy)."""
        out = autodiff.pick_output(self.graph, of)
        shape = self.graph.outputs[out].shape
        if self.graph.outputs[out].size != 1:
            raise UsageError(f"symbolic_grad needs an output with one element, but '{out}' has "
                             f"shape {list(shape)}", hint="symbolic_jacobian gives the "
                             "derivatives of every element")
        result = self.symbolic_jacobian(of, wrt, simplify)
        if shape:  # an output of shape (1, 1): drop its axes, as grad does
            result = type(result)(out, (), {
                name: expr.reshape(*expr.shape[len(shape):]) if expr.shape[len(shape):]
                else expr[(0,) * len(shape)] for name, expr in result.items()})
        return result

    def symbolic_jacobian(self, of: str | None = None, wrt=None,
                          simplify: bool = False, unrolled: bool = False) -> dict:
        """`{input: SymPy Array of shape output + input}` (an expression where that shape
        is empty): the Jacobian of an output as formulas, each simplified by SymPy with
        `simplify=True` (which can be slow). A dict that Jupyter shows as LaTeX
        (`oracle.Derivatives`). A loop kept as a loop is a SymPy `Sum` (`unrolled=True`:
        written out, every term)."""
        from .symbolic import oracle, sums
        out = autodiff.pick_output(self.graph, of)
        graph = self.derivative("jacobian", of, wrt, written_out=unrolled)
        exprs = calls.by_input(sums.to_sympy(graph))
        if simplify:
            import sympy
            exprs = {name: e.applyfunc(sympy.simplify) if hasattr(e, "applyfunc")
                     else sympy.simplify(e) for name, e in exprs.items()}
        return oracle.Derivatives(out, self.graph.outputs[out].shape, exprs)

    def to_sympy(self, unrolled: bool = False) -> dict:
        """`{output: SymPy expression or Array}`; a loop kept as a loop is a SymPy `Sum` over
        the inputs' `IndexedBase`s (`unrolled=True`: written out, every term)."""
        from .symbolic import sums
        return sums.to_sympy(expand(self.graph) if unrolled else self.graph)

    def derivative(self, kind: str, of=None, wrt=None, mode: str = "auto",
                   value: bool = True, written_out: bool = False) -> Graph:
        """The derivative graph of `kind`, built once per program and request; with
        `written_out`, its loops unrolled (for formulas, which write every term); without
        `value`, no "value" output, nor what only it needs."""
        if written_out:
            return expand(self.derivative(kind, of, wrt, mode))
        request = (kind, of, _request_key(wrt), mode, value)
        return self._requests.get(request, lambda: self._derive(kind, of, wrt, mode, value))

    def _derive(self, kind: str, of, wrt, mode: str, value: bool = True) -> Graph:
        of = autodiff.pick_output(self.graph, of)
        wrt = autodiff.pick_inputs(self.graph, wrt)
        request = f"{kind} of {of} wrt {','.join(wrt)} mode {mode}"
        def build() -> Graph:
            if kind == "jacobian":
                return autodiff.jacobian(self.graph, of, wrt, mode)
            if kind in ("hessian_diagonal", calls.PAIRED):  # a sweep per colour, not element
                return sparsity.hessian_diagonal(self.graph, of, wrt, kind == calls.PAIRED)
            return getattr(autodiff, kind)(self.graph, of, wrt)
        if value:
            return self.derived(request, build)  # else pruned from a whole one, not kept
        return self.derived(request + " alone", lambda: calls.without_value(build()))

    def derived(self, request: str, build) -> Graph:
        """The graph `build()` makes from this program's, once per `request` (a text naming
        it, built by one thread while others asking wait): kept here and, with the cache on,
        in the program's plan on disk."""
        return self._derived.get(request, lambda: self._build(request, build))

    def _build(self, request: str, build) -> Graph:
        graph = None if self._plan_store is None else self._plan_store.graph(request)
        if graph is None:
            with limits_.using(**self.limits):
                graph = build()
            self.stats.count("graphs_built")
            if self._plan_store is not None:
                self._plan_store.remember(request, graph)
        return graph

    def _run(self, graph: Graph, inputs: dict, backend, dtype) -> dict:
        dtype = self.dtype if dtype is None else engine.check_dtype(dtype)
        backend = self.backend if backend is None else backend
        if chunked.has_dask(inputs):  # Dask arrays in: Dask arrays out, a kernel call a chunk
            request = None if graph is self.graph else \
                next(r for r, g in self._requests.items() if g is graph)
            return chunked.run(self, compile, request, graph, inputs, backend, dtype)
        return self.engine.run(graph, inputs, backend, dtype)

    def kernel(self, graph: Graph, dtype: str = "float64"):
        """The compiled CPU kernel of `graph` (made once, from the disk cache when there)."""
        return self.engine.kernel(graph, dtype)

    def cuda_kernel(self, graph: Graph, dtype: str = "float64"):
        """The compiled CUDA kernel of `graph`."""
        return self.engine.cuda_kernel(graph, dtype)

    def _given(self, values, inputs: dict, call: str) -> dict:
        return calls.given_inputs(self.graph, values, inputs, call)


def _request_key(wrt):
    return wrt if wrt is None or isinstance(wrt, str) else tuple(wrt)
