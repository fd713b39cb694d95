"""A program's output as an operation that other autodiff systems call (PyTorch, JAX).

An `Op` is a graph with inputs `x0, x1, ...` by position and one output `out`, flat: every
derivative a framework asks for is again an `Op`, so derivatives of any order come from the
same three rules. `op.jvp(D)` takes a tangent for each input numbered in `D` (added as
inputs after the others) and gives the output's tangent; `op.vjp(D)` takes a cotangent of
the output (one more input) and gives the cotangents of the inputs in `D`, concatenated
flat. The graphs come from `autodiff.jvp` and `autodiff.vjp` of the parent, renamed to
positions: the vjp of a vjp would otherwise meet two inputs named "@seed". Each graph is
built once per program and request (`Program.derived`, kept in the program's plan on disk)
and compiled once (the engine).

Inputs keep the engine's batch rule: leading dimensions beyond an input's declared shape are
a batch, the same for every batched input; an input at its declared shape is shared by every
row. The output of a batch is `batch + (size,)`; `cotangents` sums a shared input's rows.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError, UsageError
from ..graph import autodiff
from ..graph.ir import Graph, Node, Port, prune
from ..graph.loops import explicit
from .engine import Once

OUT = "out"


def renamed(graph: Graph, inputs: list[str], outputs: list[str]) -> Graph:
    """`graph` with `inputs` renamed x0, x1, ... in that order and `outputs` joined, flat,
    into the one output "out"; what no output needs is dropped."""
    graph = explicit(graph)  # ports element by element: inputs read whole listed
    names = {old: f"x{k}" for k, old in enumerate(inputs)}
    nodes = tuple(Node("input", n.args, (names[n.attr[0]], n.attr[1])) if n.op == "input"
                  else n for n in graph.nodes)
    ids = tuple(i for name in outputs for i in graph.outputs[name].ids)
    return prune(nodes, {names[old]: graph.inputs[old] for old in inputs},
                 {OUT: Port((len(ids),), ids)})


class Op:
    """A graph called by position. `active[k]`: whether input k may be differentiated by (the
    program's inputs outside `wrt` never are; every input a derivative adds is)."""

    def __init__(self, prog, build, shapes: list, size: int, active: tuple, request: str,
                 shape: tuple | None = None):
        """`build()` makes the graph, on first use: JAX's reverse mode transposes a jvp Op
        into its parent's vjp without evaluating it, so its graph is never needed."""
        self.prog = prog
        self._build = build
        self._graph = None
        self.shapes = [tuple(s) for s in shapes]  # the inputs' declared shapes
        self.size = size  # the output's elements
        self.active = tuple(active)
        self.request = request
        self.shape = (self.size,) if shape is None else tuple(shape)  # the output, unflattened
        self._derived = Once()  # ("jvp" or "vjp", D) -> Op
        self.origin = None  # (parent Op, "jvp" or "vjp", D) for a derivative
        # A name for this Op that means the same in every process (`derived_by`): the
        # program's graph key, backend, output and wrt, then each derivative step, "|vjp:0,1".
        self.path = request

    @property
    def graph(self) -> Graph:
        """The graph, built once per program and request (kept in the plan on disk)."""
        if self._graph is None:
            self._graph = self.prog.derived(self.request, self._build)
        return self._graph

    def __repr__(self) -> str:
        return f"<diffdsl bridge op {self.request}>"

    def jvp(self, which) -> Op:
        """The output's tangent from the tangents of inputs `which` (given after the inputs)."""
        return self._derive("jvp", tuple(which))

    def vjp(self, which) -> Op:
        """The cotangents of inputs `which`, flat and concatenated, from the output's
        cotangent (given after the inputs)."""
        return self._derive("vjp", tuple(which))

    def _derive(self, kind: str, which: tuple) -> Op:
        for k in which:
            if not self.active[k]:
                raise UsageError(f"input {k} of {self.request} is not differentiated by")
        return self._derived.get((kind, which), lambda: self._make(kind, which))

    def _make(self, kind: str, which: tuple) -> Op:
        request = f"bridge {kind}{list(which)} of ({self.request})"

        def build():
            names = list(self.graph.inputs)
            wrt = [names[k] for k in which]
            if kind == "jvp":
                g = autodiff.jvp(self.graph, OUT, wrt)
                return renamed(g, names + [autodiff.tangent_name(n) for n in wrt], ["jvp"])
            g = autodiff.vjp(self.graph, OUT, wrt)
            return renamed(g, names + [autodiff.SEED], [autodiff.d_name(n) for n in wrt])

        if kind == "jvp":
            op = Op(self.prog, build, self.shapes + [self.shapes[k] for k in which], self.size,
                    self.active + (True,) * len(which), request)
        else:
            op = Op(self.prog, build, self.shapes + [(self.size,)],
                    sum(math.prod(self.shapes[k]) for k in which), self.active + (True,),
                    request)
        op.origin = (self, kind, which)
        op.path = f"{self.path}|{kind}:{','.join(map(str, which))}"
        return op

    def derived_by(self, steps: str) -> Op:
        """The Op that `steps` ("vjp:0|jvp:0,1", as `path` ends) name from this one."""
        op = self
        for step in filter(None, steps.split("|")):
            kind, _, which = step.partition(":")
            if kind not in ("jvp", "vjp"):
                raise UsageError(f"'{step}' is not a derivative step")
            op = op._derive(kind, tuple(int(k) for k in filter(None, which.split(","))))
        return op

    # evaluation --------------------------------------------------------------------------------
    def batch(self, shapes: list) -> tuple:
        """The batch shape of inputs of `shapes` (checked against the declared ones)."""
        found = ()
        for k, (given, declared) in enumerate(zip(shapes, self.shapes, strict=True)):
            given = tuple(given)
            extra = len(given) - len(declared)
            if extra < 0 or given[extra:] != declared:
                raise InputError(f"input {self.label(k)} is declared with shape "
                                 f"{list(declared)}, but the value given has shape {list(given)}")
            if extra:
                if found and given[:extra] != found:
                    raise InputError(f"batch shapes do not agree: {list(found)} and "
                                     f"{list(given[:extra])} (input {self.label(k)})")
                found = given[:extra]
        return found

    def label(self, k: int) -> str:
        names = list(self.prog.graph.inputs)
        return f"'{names[k]}'" if k < len(names) else f"{k}"

    def out_shape(self, shapes: list, flat: bool = True) -> tuple:
        return self.batch(shapes) + ((self.size,) if flat else self.shape)

    def __call__(self, arrays: list, dtype: str = "float64") -> np.ndarray:
        """The output, `batch + (size,)`, from NumPy arrays (views are used, not copied,
        where they are C-contiguous in `dtype`)."""
        given = {f"x{k}": a for k, a in enumerate(arrays)}
        out = self.prog.engine.run(self.graph, given, self.prog.backend, dtype)[OUT]
        return out

    def cotangents(self, which, flat, shapes: list) -> list:
        """A vjp's flat result (`batch + (sum of sizes,)`) split into the inputs `which`,
        each of its declared shape with the batch in front, or summed over the batch where
        input k was given at its declared shape (`shapes`: the shapes given). `flat` is a
        NumPy, PyTorch or JAX array: the split is made of its own operations, which the
        framework differentiates in turn."""
        batch = tuple(flat.shape[:-1])
        pieces = []
        start = 0
        for k in which:
            declared = self.shapes[k]
            size = math.prod(declared)
            piece = flat[..., start:start + size].reshape(batch + declared)
            start += size
            if batch and len(shapes[k]) == len(declared):
                piece = piece.sum(axis=tuple(range(len(batch))))
            pieces.append(piece)
        return pieces


def program_op(prog, of: str | None, wrt) -> Op:
    """Output `of` of `prog` as an `Op` over all the program's inputs in order, of which
    those in `wrt` (all by default) are differentiated by."""
    of = prog.output_name(of)
    wrt = autodiff.pick_inputs(prog.graph, wrt)
    names = list(prog.graph.inputs)
    port = prog.graph.outputs[of]
    op = Op(prog, lambda: renamed(prog.graph, names, [of]),
            [p.shape for p in prog.graph.inputs.values()], port.size,
            tuple(n in wrt for n in names), f"bridge {of} wrt {','.join(wrt)}", port.shape)
    op.path = f"{prog.graph.key()} {prog.backend} {of} {','.join(wrt)}"
    _ = op.graph  # built now: a program's own graph is cheap to rename, and errors show here
    return op


def arrange(names: list, args: tuple, kwargs: dict, filename: str) -> list:
    """The values in the order of `names`, from positional and keyword arguments."""
    if len(args) > len(names):
        raise UsageError(f"{filename} has {len(names)} inputs ({', '.join(names)}), but "
                         f"{len(args)} values were given by position")
    given = dict(zip(names, args, strict=False))
    for name, value in kwargs.items():
        if name not in names:
            raise UsageError(f"'{name}' is not an input of {filename}",
                             hint=f"the inputs are: {', '.join(names) or 'none'}")
        if name in given:
            raise UsageError(f"input '{name}' is given twice (by position and by name)")
        given[name] = value
    missing = [name for name in names if name not in given]
    if missing:
        raise UsageError(f"missing value for {', '.join(missing)} ({filename})",
                         hint="give every input, by position or as NAME=VALUE")
    return [given[name] for name in names]

