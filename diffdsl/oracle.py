"""The SymPy oracle of a program's derivatives: SymPy's own derivatives of the exported
program (`sympy.diff`, with the language's conventions of `symbolic.oracle_diff`), and ours,
exported from the derivative graph, in the same shape, so the two can be compared element by
element (`diffdsl check`, and the tests)."""

from __future__ import annotations

import sympy as sp

from . import autodiff
from .ir import Graph
from .symbolic import (
    Symbols,
    deep_call,
    function_exprs,
    graph_depth,
    jacobian_exprs,
    oracle_diff,
    shaped,
    sympy_depth,
)


class Derivatives(dict):
    """input name -> derivative of output `of` (shape S + T), remembering `of` and S.
    Jupyter shows it as LaTeX, one line an input: `\\frac{\\partial d}{\\partial A} = [...]`."""

    LATEX_TERMS = 20_000  # written-out size above which it shows as plain text

    def __init__(self, of: str, out_shape: tuple, items=()):
        super().__init__(items)
        self.of = of
        self.out_shape = tuple(out_shape)

    def _repr_latex_(self) -> str | None:
        exprs = [e for value in self.values() for e in
                 (sp.flatten(value.tolist()) if isinstance(value, sp.NDimArray) else [value])]
        stack, terms = list(exprs), 0  # counted without recursion: trees can be deep
        while stack and terms <= self.LATEX_TERMS:
            terms += 1
            stack.extend(getattr(stack.pop(), "args", ()))
        if not exprs or terms > self.LATEX_TERMS:
            return None
        return deep_call(sympy_depth(exprs), _latex_lines, self)  # the printer recurses


def _latex_lines(derivs: Derivatives) -> str:
    of = sp.latex(sp.Symbol(derivs.of))
    lines = [f"\\frac{{\\partial {of}}}{{\\partial {sp.latex(sp.Symbol(name))}}} &= "
             f"{sp.latex(value)}" for name, value in derivs.items()]
    return "$\\begin{aligned}" + " \\\\ ".join(lines) + "\\end{aligned}$"



def sympy_derivatives(graph: Graph, of: str | None = None, wrt=None,
                      real: bool = True) -> Derivatives:
    """The oracle: the exported output differentiated by `sympy.diff`, per input element."""
    of = autodiff.pick_output(graph, of)
    wrt = autodiff.pick_inputs(graph, wrt)
    return deep_call(graph_depth(graph, graph.outputs[of].ids), _sympy_derivatives,
                     graph, of, wrt, real)


def _sympy_derivatives(graph: Graph, of: str, wrt: list[str], real: bool) -> Derivatives:
    syms = Symbols(graph, real)
    f = function_exprs(graph, of, syms.plain_atom)
    out_shape = graph.outputs[of].shape
    result = Derivatives(of, out_shape)
    for name in wrt:
        flat = [oracle_diff(e, s).xreplace(syms.to_public) for e in f for s in syms.plain[name]]
        result[name] = shaped(flat, out_shape + graph.inputs[name].shape)
    return result


def our_derivatives(graph: Graph, of: str | None = None, wrt=None,
                    real: bool = True) -> Derivatives:
    """Our derivative graph (`autodiff.jacobian`) exported: its "d:NAME" outputs."""
    of = autodiff.pick_output(graph, of)
    wrt = autodiff.pick_inputs(graph, wrt)
    jac = autodiff.jacobian(graph, of, wrt)
    syms = Symbols(graph, real)
    ids = [i for name in wrt for i in jac.outputs[autodiff.d_name(name)].ids]
    flat = deep_call(graph_depth(jac, ids), jacobian_exprs, jac, wrt,
                     lambda name, k: syms.public[name][k])
    out_shape = graph.outputs[of].shape
    return Derivatives(of, out_shape, {
        name: shaped(flat[name], out_shape + graph.inputs[name].shape) for name in wrt})
