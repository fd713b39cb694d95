"""Formulas printed: derivatives as SymPy gives them, written as text, JSON or LaTeX.

`diffdsl diff` prints one line per element (`format_derivatives`) or a JSON object of
expression strings (`derivatives_json`); Jupyter shows a program's outputs and its symbolic
derivatives as LaTeX (`outputs_latex`, `derivatives_latex`). Nothing here computes a
derivative: the expressions come from `Program.symbolic_jacobian` and `Program.to_sympy`.

SymPy's printers recurse over an expression, a few frames per level, so deep expressions print
on a thread with a stack to match (`symbolic.deep_call`).
"""

from __future__ import annotations

import itertools
import math
import re
from functools import partial
from typing import Callable

import sympy as sp

from ..errors import UsageError
from ..graph.ir import Graph
from .atoms import Symbols, unravel
from .export import deep_call, export_shared, expression_sizes, sympy_depth
from .lines import derivative_lines, kept, loop_sizes
from .sums import listed

PRINT_TERMS = 1_000_000  # terms of a derivative written out beyond which `diff` prints nothing
# Terms beyond which `diff --cse` names the graph's shared nodes instead of calling sympy.cse,
# whose time grows with the trees written out (0.03 s at 76,000 terms, 8 s at 4 million).
CSE_TERMS = 100_000
# SymPy's printers order a sum's terms by their monomials over all its symbols, a cost that
# grows as the square of their number (tens of seconds a print at 10,000): a formula of more
# symbols than this prints its terms in the order SymPy keeps them (`order="none"`), in
# seconds.
ORDERED_SYMBOLS = 1000


def printed(expr, latex: bool = False) -> str:
    """`expr` as text (`str`'s) or as LaTeX, its terms ordered as SymPy's printers do unless
    it has more than ORDERED_SYMBOLS symbols."""
    many = isinstance(expr, sp.Basic) and len(expr.free_symbols) > ORDERED_SYMBOLS
    order = {"order": "none"} if many else {}
    return sp.latex(expr, **order) if latex else sp.sstr(expr, **order)


def refuse_to_print(graph: Graph, of: str) -> None:
    """Refuse, before any SymPy work, derivatives too big to print written out as trees.

    A chain that reuses its values (a tower of 400 powers, a loop) has a graph of thousands of
    nodes whose derivative, written out, has tens of millions of terms: minutes of SymPy and
    a hundred megabytes of text. Naming the shared parts (`--cse`) prints the graph's size.
    """
    sizes, depths = expression_sizes(graph, PRINT_TERMS + 1)
    ids = _derivative_ids(graph)
    if ids and max(sizes[i] for i in ids) > PRINT_TERMS:
        raise UsageError(f"the derivatives of '{of}' written out have more than "
                         f"{PRINT_TERMS:,} terms ({max(depths[i] for i in ids):,} operations "
                         "deep)", hint="print them with --cse, which names each shared "
                         "subexpression once, or draw the graph with `diffdsl graph --grad`")


def keeps_loops(jac: Graph) -> bool:
    """Whether `diff` prints `jac` with its loops kept (`format_loops`): it has loops, and
    none that the export would write out whole (a scan)."""
    return kept(jac)


def format_loops(jac: Graph, of: str, out_shape: tuple, latex: bool = False,
                 cse: bool = False, simplify: bool = False) -> str:
    """`diff` of a derivative graph with loops kept (symbolic/sums.py): a sum is a SymPy
    `Sum`, and the elements that share one formula in an index print as one line,
    `d d / d x[i] = 2*x[i]    (i = 0 .. 999)` (symbolic/lines.py)."""
    jac = listed(jac)
    sizes = loop_sizes(jac, PRINT_TERMS + 1)
    ids = _derivative_ids(jac)
    if ids and max(sizes[i] for i in ids) > PRINT_TERMS:
        raise UsageError(f"the derivatives of '{of}' have more than {PRINT_TERMS:,} terms "
                         "with their loops kept", hint="draw the graph with `diffdsl graph "
                         "--grad`")
    wrt = [name for name in jac.outputs if name.startswith("d:")]
    lines = derivative_lines(jac, wrt)
    exprs = [sp.simplify(line.expr) if simplify else line.expr for line in lines]
    depth = sympy_depth(exprs)
    return deep_call(depth, _print_loops, lines, exprs, of, tuple(out_shape), latex, cse)


def _print_loops(lines: list, exprs: list, of: str, out_shape: tuple, latex: bool,
                 cse: bool) -> str:
    replacements = []
    if cse:
        replacements, exprs = sp.cse(exprs, symbols=sp.numbered_symbols(_cse_prefix(exprs)))
    show = partial(printed, latex=latex)
    text = [f"{show(sym)} = {show(sub)}" for sym, sub in replacements]
    for line, expr in zip(lines, exprs, strict=True):
        out_label = _label(of, line.index[:len(out_shape)], latex)
        in_label = _label(line.name[2:], line.index[len(out_shape):], latex)
        if latex:
            row = f"\\frac{{\\partial {out_label}}}{{\\partial {in_label}}} = {show(expr)}"
        else:
            row = f"d {out_label} / d {in_label} = {show(expr)}"
        if line.span is not None:
            first, last = line.span
            row += f" \\quad ({show(line.symbol)} = {first}, \\ldots, {last})" if latex \
                else f"    ({line.symbol} = {first} .. {last})"
        text.append(row)
    return "\n".join(text)


def _derivative_ids(graph: Graph) -> list[int]:
    return [i for name, port in graph.outputs.items() if name.startswith("d:") for i in port.ids]


def _flat(value) -> list:
    if isinstance(value, sp.NDimArray):
        return [value[index] for index in itertools.product(*map(range, value.shape))]
    return [value]


def _shape(value) -> tuple:
    return tuple(value.shape) if isinstance(value, sp.NDimArray) else ()


def _label(name: str, index: tuple, latex: bool) -> str:
    if not index:
        return sp.latex(sp.Symbol(name)) if latex else name
    if latex:
        return sp.latex(sp.IndexedBase(name)[index])
    return f"{name}[{', '.join(map(str, index))}]"


def _deep_print(fn: Callable, derivs: dict, *args, **kwargs):
    """Printing recurses over an expression as SymPy builds the text: deep ones (a chain of
    300 functions) print on a thread with a stack to match."""
    exprs = [e for value in derivs.values() for e in _flat(value)]
    return deep_call(sympy_depth(exprs), fn, derivs, *args, **kwargs)


def format_derivatives(derivs: dict, of: str | None = None, latex: bool = False,
                       cse: bool = False, out_shape: tuple | None = None) -> str:
    """One line per element, `d d / d A[0, 1] = -A[1, 0]`, for `diffdsl diff`.

    `derivs` maps input name -> array of shape S + T (as `our_derivatives` returns). S, the
    output's shape, is taken from `out_shape`, else from `derivs.out_shape`, else ().
    `latex` prints with `sympy.latex`; `cse` first prints the subexpressions that the elements
    share (`x0 = ...`), found by `sympy.cse` over all of them, then the elements in terms of them.
    """
    return _deep_print(_format_derivatives, derivs, of, latex, cse, out_shape)


def _format_derivatives(derivs: dict, of, latex: bool, cse: bool, out_shape) -> str:
    if of is None:
        of = getattr(derivs, "of", "out")
    if out_shape is None:
        out_shape = getattr(derivs, "out_shape", ())
    out_shape = tuple(out_shape)
    labels, exprs = [], []
    for name, value in derivs.items():
        labels += _labels(of, name, out_shape, _shape(value), latex)
        exprs += [sp.sympify(expr) for expr in _flat(value)]
    replacements = []
    if cse:
        replacements, exprs = sp.cse(exprs, symbols=sp.numbered_symbols(_cse_prefix(exprs)))
    return _lines(labels, exprs, replacements, latex)


def _labels(of: str, name: str, out_shape: tuple, shape: tuple, latex: bool) -> list:
    """(output element, input element) labels of a derivative of shape `shape`."""
    result = []
    for k in range(math.prod(shape)):
        index = unravel(k, shape)
        result.append((_label(of, index[:len(out_shape)], latex),
                       _label(name, index[len(out_shape):], latex)))
    return result


def _lines(labels: list, exprs: list, replacements: list, latex: bool) -> str:
    show = partial(printed, latex=latex)
    lines = [f"{show(sym)} = {show(sub)}" for sym, sub in replacements]
    for (out_label, in_label), expr in zip(labels, exprs, strict=True):
        if latex:
            lines.append(f"\\frac{{\\partial {out_label}}}{{\\partial {in_label}}} = "
                         f"{show(expr)}")
        else:
            lines.append(f"d {out_label} / d {in_label} = {show(expr)}")
    return "\n".join(lines)


def needs_graph_cse(jac: Graph) -> bool:
    """Whether `diff --cse` must name the graph's shared nodes itself: `sympy.cse` walks the
    trees written out, which a loop's derivative makes astronomically big."""
    sizes, _ = expression_sizes(jac, CSE_TERMS + 1)
    ids = _derivative_ids(jac)
    return bool(ids) and max(sizes[i] for i in ids) > CSE_TERMS


def format_graph_cse(jac: Graph, of: str, out_shape: tuple, latex: bool = False,
                     simplify: bool = False) -> str:
    """`diff --cse` for a derivative graph whose trees are too big for `sympy.cse`: every node
    that two others use is named once (`x0 = ...`), in the graph's order, and the elements
    are written in terms of those names. Linear in the graph's size."""
    syms = Symbols(jac)
    wrt = [name for name in jac.outputs if name.startswith("d:")]
    atoms = [a for values in syms.public.values() for a in values]
    names = sp.numbered_symbols(_cse_prefix(atoms))
    ids = _derivative_ids(jac)
    replacements, exprs = export_shared(jac, ids, lambda name, k: syms.public[name][k], names)
    labels = []
    for name in wrt:
        labels += _labels(of, name[2:], tuple(out_shape), jac.outputs[name].shape, latex)
    flat = [exprs[i] for i in ids]
    depth = sympy_depth([sub for _, sub in replacements] + flat)
    return deep_call(depth, _print_named, labels, flat, replacements, latex, simplify)


def _print_named(labels: list, exprs: list, replacements: list, latex: bool,
                 simplify: bool) -> str:
    if simplify:  # each part on its own: the whole is what could not be written out
        replacements = [(sym, sp.simplify(sub)) for sym, sub in replacements]
        exprs = [sp.simplify(e) for e in exprs]
    return _lines(labels, exprs, replacements, latex)


def _cse_prefix(exprs) -> str:
    """A letter for the CSE symbols (x0, x1, ...) that no input's name could be read as, in
    text or in LaTeX (where x0 and x_0 both print as x_{0})."""
    taken = {str(getattr(s, "base", s)) for e in exprs for s in e.free_symbols}
    for prefix in ("x", "t", "u", "w", "s", "c"):
        if not any(re.fullmatch(rf"{prefix}_?\d+", name) for name in taken):
            return prefix
    return "cse"


def derivatives_json(derivs: dict) -> dict:
    """input -> nested list (of the array's shape) of expression strings in SymPy syntax."""
    return _deep_print(_derivatives_json, derivs)


def _derivatives_json(derivs: dict) -> dict:
    result = {}
    for name, value in derivs.items():
        shape = _shape(value)
        strings = [printed(e) for e in _flat(value)]
        result[name] = _nest(strings, shape)
    return result


def _nest(flat: list, shape: tuple):
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0]
    return [_nest(flat[r * step:(r + 1) * step], shape[1:]) for r in range(shape[0])]


# LaTeX for Jupyter ---------------------------------------------------------------------------


def derivatives_latex(derivs: dict, of: str, terms_limit: int) -> str | None:
    """`$\\begin{aligned}\\frac{\\partial d}{\\partial A} &= ...\\end{aligned}$`, one line an
    input; None (Jupyter then shows the text) when the formulas written out have more than
    `terms_limit` terms, or there are none."""
    exprs = [e for value in derivs.values() for e in
             (sp.flatten(value.tolist()) if isinstance(value, sp.NDimArray) else [value])]
    stack, terms = list(exprs), 0  # counted without recursion: trees can be deep
    while stack and terms <= terms_limit:
        terms += 1
        stack.extend(getattr(stack.pop(), "args", ()))
    if not exprs or terms > terms_limit:
        return None
    return deep_call(sympy_depth(exprs), _latex_lines, derivs, of)  # the printer recurses


def _latex_lines(derivs: dict, of: str) -> str:
    top = sp.latex(sp.Symbol(of))
    lines = [f"\\frac{{\\partial {top}}}{{\\partial {sp.latex(sp.Symbol(name))}}} &= "
             f"{printed(value, latex=True)}" for name, value in derivs.items()]
    return "$\\begin{aligned}" + " \\\\ ".join(lines) + "\\end{aligned}$"


def outputs_latex(outputs: dict) -> str:
    """`{name: SymPy expression}` as one aligned block, `d = ...`, for a program's display."""
    lines = [f"{sp.latex(sp.Symbol(n))} = {printed(e, latex=True)}" for n, e in outputs.items()]
    return "$\\begin{aligned}" + r" \\ ".join(lines) + "\\end{aligned}$"
