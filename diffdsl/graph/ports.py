"""The ports of derivative graphs: what their inputs and outputs are called, and which output
and inputs a derivative is taken of (checked, with a suggestion for a misspelled name)."""

from __future__ import annotations

import difflib

from ..errors import UsageError
from .ir import Graph

SEED = "@seed"


def tangent_name(name: str) -> str:
    return f"@t:{name}"


def d_name(*names: str) -> str:
    return "d:" + ":".join(names)


def g_name(name: str) -> str:
    """The gradient's output beside a Hessian's diagonal ("d:NAME") in one graph."""
    return "g:" + name


# choosing what to differentiate ----------------------------------------------------------
def pick_output(graph: Graph, of: str | None) -> str:
    if of is None:
        if len(graph.outputs) != 1:
            raise UsageError(f"the program has {len(graph.outputs)} outputs "
                             f"({', '.join(graph.outputs)}); pick one with of=NAME")
        return next(iter(graph.outputs))
    if of not in graph.outputs:
        raise UsageError(f"'{of}' is not an output of this program",
                         hint=_close(of, graph.outputs, "outputs"))
    return of


def pick_inputs(graph: Graph, wrt) -> list[str]:
    if wrt is None:
        return list(graph.inputs)
    names = [wrt] if isinstance(wrt, str) else list(wrt)
    for name in names:
        if name not in graph.inputs:
            raise UsageError(f"'{name}' is not an input of this program",
                             hint=_close(name, graph.inputs, "inputs"))
    if not names:
        raise UsageError("wrt names no input")
    return list(dict.fromkeys(names))


def _close(name, known, what) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    if close:
        return f"did you mean '{close[0]}'?"
    return f"the {what} are: {', '.join(known)}"


def require_scalar(graph: Graph, of: str, what: str) -> None:
    port = graph.outputs[of]
    if port.size != 1:
        raise UsageError(
            f"{what} needs an output with one element, but '{of}' has shape {list(port.shape)}",
            hint="use jacobian for every element, or vjp with a seed of the output's shape")
