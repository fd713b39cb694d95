"""What a derivative call adds to a program's inputs and makes of its outputs, for `Program`.

A derivative graph takes the program's inputs and, for `jvp` and `hvp`, a tangent per input
(`autodiff.tangent_name`), for `vjp` the seed (`autodiff.SEED`); it gives "value" and one
"d:NAME" output per input (a Hessian's "d:A:B"). `Program`'s methods hand back those outputs
by input name, and for a batch with `reduce=` the sum or mean over its rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ..errors import UsageError
from ..graph import autodiff
from ..graph.ir import Graph, prune
from .inputs import a_or_an, host_values

PAIRED = "grad_and_hessian_diagonal"  # outputs "g:NAME" and "d:NAME", handed back as a pair
KINDS = ("grad", "jacobian", "hessian", "hessian_diagonal", "vjp", "jvp", "hvp", PAIRED)
REDUCTIONS = ("sum", "mean")


class FastCalls:
    """The call people make in a loop, `prog(A=x)` or `prog.grad(A=x)`: once a first call has
    compiled its graph, a single point given as arrays of the declared shapes goes straight
    to the kernel (`engine._Plan.fast`), whatever `backend` says unless it names another
    backend than the program's. The value alone takes the same route as its gradient, so it
    is never the slower of the two (bench/value_paths.py)."""

    def __init__(self):
        # "value", or (kind, of, wrt) of a grad or a Hessian's diagonal -> the single-point
        # function (None: a call that takes the slow path always)
        self.made: dict = {}

    def call(self, prog, key, slow, values, backend, dtype, inputs: dict, of=None, wrt=None):
        """The fast function's result, else `slow()`, after which that function is made. The
        inputs are `values` (a dict, or None) and `inputs` (keyword arguments) together."""
        host = key is not None and (values is None or type(values) is dict or
                                    isinstance(values, Mapping)) and \
            (dtype is None or dtype == prog.dtype) and \
            (backend is None or backend == "cpu" or backend == prog.backend)
        fast = self.made.get(key) if host else None
        if fast is not None:
            # `fast` only reads the dict: a plain dict alone is passed as it is
            result = fast(values if not inputs and type(values) is dict else
                          {**values, **inputs} if values else inputs)
            if result is not None:
                return result
        result = slow()
        if host and fast is None:
            value, paired = key == "value", key[0] == PAIRED
            graph = prog.graph if value else prog.derivative(key[0], of, wrt, value=False)
            keep = (None, None) if value else (_paired, None) if paired else \
                (is_derivative, input_of)
            fast = prog.engine.fast_function(graph, prog.dtype, prog.backend, *keep,
                                             single=value and len(graph.outputs) == 1)
            if fast is not None:
                self.made[key] = _in_pairs(fast) if paired else fast
        return result


def given_inputs(graph: Graph, values, inputs: dict, call: str) -> dict:
    """The inputs of `Program` method `call` ("prog" for a call of the program itself), from
    its dict `values` and its keyword arguments: arrays of other libraries as NumPy arrays
    (`inputs.host_values`). Anything but a dict in `values`' place is refused, with what the
    call takes: `prog.grad(np.eye(3))` would otherwise meet NumPy's "truth value" error."""
    check_mapping(graph, values, call)
    return host_values({**(values or {}), **inputs})


def check_mapping(graph: Graph, values, call: str) -> None:
    """Refuse anything but a dict (or None) in `values`' place, naming the call."""
    if values is not None and type(values) is not dict and not isinstance(values, Mapping):
        example = next(iter(graph.inputs), "x")
        name = "prog" if call == "prog" else f"prog.{call}"
        raise UsageError(f"{name} takes the inputs by name or as a dict, not "
                         f"{a_or_an(type(values).__name__)}",
                         hint=f"e.g. {name}({example}=...) or {name}({{{example!r}: ...}})")


def derivative_inputs(graph: Graph, kind: str, inputs: dict, wrt, seed, tangents):
    """`(inputs of the derivative graph, wrt)`: the given inputs with the tangents or the seed
    that `kind` needs added under their graph names; `wrt` of a jvp is its tangents' names."""
    given = dict(inputs)
    if kind in ("jvp", "hvp"):
        if not isinstance(tangents, dict) or not tangents:
            raise UsageError(f"{kind} needs tangents: a dict of input name -> array")
        if kind == "jvp":
            wrt = tuple(tangents)
        else:
            wrt = autodiff.pick_inputs(graph, wrt)
            for name in tangents:
                if name not in wrt:
                    raise UsageError(f"a tangent is given for '{name}', which is not "
                                     f"among the inputs differentiated by: {', '.join(wrt)}")
        for name in wrt:  # hvp: a missing tangent is zero
            value = tangents.get(name, np.zeros(graph.inputs[name].shape))
            given[autodiff.tangent_name(name)] = value
    elif kind == "vjp":
        given[autodiff.SEED] = seed
    elif kind not in KINDS:
        raise UsageError(f"unknown derivative '{kind}'")
    return given, wrt


def split_outputs(kind: str, out: dict) -> tuple:
    """`(value, result)` from the derivative graph's outputs, `result` shaped as the method
    of the same name returns it: `{input: array}`, a Hessian's `{input: {input: array}}`."""
    if kind == "jvp":
        return out.get("value"), out["jvp"]
    if kind == PAIRED:
        return out.get("value"), pair(out)
    if kind == "hessian":
        result: dict = {}
        for key, value in out.items():
            if key.startswith("d:"):
                a, b = key[2:].split(":")
                result.setdefault(a, {})[b] = value
        return out.get("value"), result
    return out.get("value"), by_input(out)


def without_value(graph: Graph) -> Graph:
    """A derivative's graph without its "value" output, nor the nodes only that needs (the
    loop a Hessian's diagonal would run for the value alone)."""
    return prune(graph.nodes, graph.inputs, {name: port for name, port in
                                             graph.outputs.items() if name != "value"})


def pair(out: dict) -> tuple[dict, dict]:
    """`({input: gradient}, {input: Hessian diagonal})` from "g:NAME" and "d:NAME"."""
    return ({key[2:]: v for key, v in out.items() if key.startswith("g:")}, by_input(out))


def _paired(name: str) -> bool:
    return name.startswith(("g:", "d:"))


def _in_pairs(fast):
    def paired(values):
        out = fast(values)
        return None if out is None else pair(out)  # None: not a single point, the slow path
    return paired


def by_input(out: dict) -> dict:
    return {key[2:]: value for key, value in out.items() if is_derivative(key)}


def is_derivative(name: str) -> bool:
    return name.startswith("d:")


def input_of(name: str) -> str:
    return name[2:]


def check_reduce(reduce: str) -> None:
    if reduce not in REDUCTIONS:
        raise UsageError(f"unknown reduce={reduce!r}; use 'sum' or 'mean' (or None)")


def reduce_value(value, reduce: str):
    check_reduce(reduce)
    return np.sum(value) if reduce == "sum" else np.mean(value)


def reduce_grads(graph: Graph, grads: dict, given: dict, reduce: str) -> dict:
    """Per-row gradients to the gradient of the rows' sum or mean: an input shared by every
    row gets one gradient of its declared shape, a batched input keeps its rows' gradients
    (divided by the row count for the mean)."""
    check_reduce(reduce)
    rows = None
    out = {}
    for name, g in grads.items():
        extra = np.ndim(g) - len(graph.inputs[name].shape)
        if extra:  # every input's gradient carries the batch dimensions
            rows = math.prod(np.shape(g)[:extra])
        shared = np.ndim(given[name]) == len(graph.inputs[name].shape)
        out[name] = np.sum(g, axis=tuple(range(extra))) if shared and extra else g
    if reduce == "mean" and rows:
        out = {name: g / rows for name, g in out.items()}
    return out
