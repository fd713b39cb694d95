"""SymPy export of IR graphs, and SymPy's own derivatives as an oracle (`diffdsl diff`, `check`).

`to_sympy` turns outputs of a graph into SymPy expressions in one forward loop over the node
list (never a recursion over the graph). An input element is `IndexedBase(name)[i, j]` with the
indices of the declared shape, a scalar input a plain `Symbol(name)`; both are declared real, as
every value of the language is, so that SymPy differentiates `Abs(x)` to `sign(x)` and not to
an expression in `re` and `im`. Pass `real=False` for symbols without assumptions.

How the ops are written (the row's `sympy` field names the entry of `SYMPY_FUNCS`):
    select(c, a, b)      Piecewise((a, Ne(c, 0)), (b, True)); where `c` is a comparison or a
                         logical combination of comparisons, its relation is the condition:
                         Piecewise((a, x > 0), (b, True))
    lt, le, ..., and     Piecewise((1, x < y), (0, True))
    min(a, b), max       Piecewise((a, a <= b), (b, True)): the first argument on a tie, as the
                         language has it (SymPy's Min and Max are symmetric)
    log1p, expm1         log(1 + x), exp(x) - 1
    log2, log10          log(x, 2), log(x, 10)
    cbrt                 real_root(x, 3): the real cube root, also of negative numbers
    hypot                sqrt(x**2 + y**2)

Constants are exported exactly where the float is (within one unit in the last place) a simple
closed form: an integer, a short decimal (`0.1` is 1/10), a fraction with denominator up to
1000, or a small rational multiple of one of pi, E, log(2), log(10), sqrt(2), sqrt(3),
sqrt(pi), sqrt(2*pi) or of its reciprocal. Constant folding in float64 rounds (`1/3` folds to
0.333...33, `log2`'s derivative holds ln 2 as a float), and this recovers the exact value, so
formulas read as written and our derivatives can be proven equal to SymPy's. Any other
constant, and any of magnitude beyond 2**53 or below 1e-15, is an exact `Float` of 53 bits.

Graphs are hash-consed, so a subexpression used twice is one SymPy object used twice; the tree
that SymPy prints may still be exponentially larger than the graph (the determinant by minors
has n! terms).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import sys
import threading
from fractions import Fraction
from typing import Callable

import mpmath
import sympy as sp
from sympy.core.logic import fuzzy_and

from . import autodiff
from .errors import UsageError
from .ir import Graph
from .ops import OPS

# ---------------------------------------------------------------------------------------------
# Constants


def constant(value: float) -> sp.Expr:
    """The SymPy number for a float constant of the graph (see the module docstring)."""
    x = float(value)
    if math.isnan(x):
        return sp.nan
    if math.isinf(x):
        return sp.oo if x > 0 else -sp.oo
    if x < 0:
        return -constant(-x)
    if x == 0:
        return sp.Integer(0)
    for c in (x, math.nextafter(x, 0.0), math.nextafter(x, math.inf)):
        exact = _exact_form(c)
        if exact is not None:
            return exact
    return sp.Float(x)


def _exact_form(x: float) -> sp.Expr | None:
    if not 1e-15 <= x < 2.0**53:
        return None  # written as a Float: 1e300 as a SymPy Integer would print 301 digits
    if x.is_integer():
        return sp.Integer(int(x))
    text = repr(x)
    mantissa = text.split("e")[0].replace(".", "").strip("0")
    if len(mantissa) <= 12:
        return sp.Rational(text)  # a short decimal, as written: 0.1 is 1/10
    frac = Fraction(x).limit_denominator(1000)
    if float(frac) == x:
        return sp.Rational(frac.numerator, frac.denominator)
    known = _known_constants().get(x)
    if known is not None:
        q, base, inverse = known
        b = _BASES[base][0]
        return q / b if inverse else q * b
    return None


# Irrational constants that ops' rules and programs use; a float equal to a small rational
# multiple of one of them (or of its reciprocal) is exported as that closed form.
_BASES = (
    (sp.pi, lambda: mpmath.pi),
    (sp.E, lambda: mpmath.e),
    (sp.log(2), lambda: mpmath.log(2)),
    (sp.log(10), lambda: mpmath.log(10)),
    (sp.sqrt(2), lambda: mpmath.sqrt(2)),
    (sp.sqrt(3), lambda: mpmath.sqrt(3)),
    (sp.sqrt(sp.pi), lambda: mpmath.sqrt(mpmath.pi)),
    (sp.sqrt(2 * sp.pi), lambda: mpmath.sqrt(2 * mpmath.pi)),
)


@functools.lru_cache(maxsize=1)
def _known_constants() -> dict[float, tuple]:
    """float -> (rational q, base index, inverse?): the simplest form is entered first."""
    ratios = sorted({Fraction(n, d) for n in range(1, 13) for d in range(1, 13)},
                    key=lambda q: (q.numerator + q.denominator, q))
    table: dict[float, tuple] = {}
    with mpmath.workdps(40):
        for q in ratios:
            for base, (_, value) in enumerate(_BASES):
                for inverse in (False, True):
                    v = value()
                    if inverse:
                        exact = mpmath.mpf(q.numerator) / (v * q.denominator)
                    else:
                        exact = q.numerator * v / q.denominator
                    table.setdefault(float(exact), (sp.Rational(q.numerator, q.denominator),
                                                    base, inverse))
    return table


# ---------------------------------------------------------------------------------------------
# Ops


class _Arg:
    """An argument of an op as exported.

    `x` is its expression. `alt` is the same value written without Piecewise, for conditions
    to use: SymPy rewrites a condition that holds a Piecewise into ITE form, which doubles at
    every step of a max reduction or of a loop of dynamic ifs (and fails outright on some).
    In `alt`, min and max are SymPy's Min and Max (equal in value), and a select is `select`.
    `rel` is its relation when it is a comparison or a logical combination of them.
    """

    __slots__ = ("x", "alt", "rel")

    def __init__(self, x, alt, rel):
        self.x = x
        self.alt = alt
        self.rel = rel

    @property
    def cond(self):
        """The argument as a condition: nonzero is true."""
        return self.rel if self.rel is not None else sp.Ne(self.alt, 0)


class select(sp.Function):  # noqa: N801 - printed as the IR op it stands for
    """`select(c, a, b)`: `a` where the condition `c` holds, else `b`.

    The value of a select where it appears inside a condition (see `_Arg`); elsewhere a
    select is a Piecewise. It collapses to a branch as soon as `c` is decided, as when
    numbers are substituted.
    """

    def _eval_is_extended_real(self):
        return fuzzy_and(branch.is_extended_real for branch in self.args[1:])

    def _eval_is_finite(self):
        return fuzzy_and(branch.is_finite for branch in self.args[1:])

    @classmethod
    def eval(cls, c, a, b):
        if c == sp.true:
            return a
        if c == sp.false:
            return b
        if a == b:
            return a
        return None


def _apply(function, *args):
    """`function(*args)` unevaluated unless every argument is a number.

    SymPy's automatic evaluation of a function asks questions such as `is_number` of its
    argument that recurse to the bottom of it and are not cached, so building a chain of n
    nested calls costs n**2 (a 1600-deep chain of tanh took 30 s; Min and Max factor their
    arguments' differences: 2 s for a chain of 100). The evaluations skipped are cosmetic
    (`sin(-x)` to `-sin(x)`); the IR has folded constant arguments already.
    """
    if all(arg.is_Number for arg in args):
        return function(*args)
    return function(*args, evaluate=False)


def _first_on_tie(relation):
    return lambda a: sp.Piecewise((a[0].x, relation(a[0].alt, a[1].alt)), (a[1].x, True))


# Keyed by the `sympy` field of the op rows. A rule takes the list of `_Arg`s and returns an
# expression, or a SymPy Boolean for ops whose value is a condition (exported as 1 or 0).
SYMPY_FUNCS: dict[str, Callable] = {
    "neg": lambda a: -a[0].x,
    "exp": lambda a: _apply(sp.exp, a[0].x),
    "log": lambda a: _apply(sp.log, a[0].x),
    "log1p": lambda a: sp.log(1 + a[0].x),
    "expm1": lambda a: _apply(sp.exp, a[0].x) - 1,
    "log2": lambda a: sp.log(a[0].x, 2),
    "log10": lambda a: sp.log(a[0].x, 10),
    "sqrt": lambda a: sp.sqrt(a[0].x),
    "cbrt": lambda a: sp.real_root(a[0].x, 3),
    "sin": lambda a: _apply(sp.sin, a[0].x),
    "cos": lambda a: _apply(sp.cos, a[0].x),
    "tan": lambda a: _apply(sp.tan, a[0].x),
    "asin": lambda a: _apply(sp.asin, a[0].x),
    "acos": lambda a: _apply(sp.acos, a[0].x),
    "atan": lambda a: _apply(sp.atan, a[0].x),
    "sinh": lambda a: _apply(sp.sinh, a[0].x),
    "cosh": lambda a: _apply(sp.cosh, a[0].x),
    "tanh": lambda a: _apply(sp.tanh, a[0].x),
    "asinh": lambda a: _apply(sp.asinh, a[0].x),
    "acosh": lambda a: _apply(sp.acosh, a[0].x),
    "atanh": lambda a: _apply(sp.atanh, a[0].x),
    "Abs": lambda a: _apply(sp.Abs, a[0].x),
    "sign": lambda a: _apply(sp.sign, a[0].x),
    "floor": lambda a: _apply(sp.floor, a[0].x),
    "ceiling": lambda a: _apply(sp.ceiling, a[0].x),
    "erf": lambda a: _apply(sp.erf, a[0].x),
    # log|gamma(x)|, as libm's lgamma (SymPy's loggamma is complex for x < 0)
    "loggamma": lambda a: sp.log(sp.Abs(_apply(sp.gamma, a[0].x))),
    "Not": lambda a: sp.Not(a[0].cond),
    "Add": lambda a: a[0].x + a[1].x,
    "sub": lambda a: a[0].x - a[1].x,
    "Mul": lambda a: a[0].x * a[1].x,
    "div": lambda a: a[0].x / a[1].x,
    "Pow": lambda a: sp.Pow(a[0].x, a[1].x),
    "atan2": lambda a: _apply(sp.atan2, a[0].x, a[1].x),
    "hypot": lambda a: sp.sqrt(a[0].x ** 2 + a[1].x ** 2),
    "Min": _first_on_tie(sp.Le),
    "Max": _first_on_tie(sp.Ge),
    "lt": lambda a: sp.Lt(a[0].alt, a[1].alt),
    "le": lambda a: sp.Le(a[0].alt, a[1].alt),
    "gt": lambda a: sp.Gt(a[0].alt, a[1].alt),
    "ge": lambda a: sp.Ge(a[0].alt, a[1].alt),
    "eq": lambda a: sp.Eq(a[0].alt, a[1].alt),
    "ne": lambda a: sp.Ne(a[0].alt, a[1].alt),
    "And": lambda a: sp.And(a[0].cond, a[1].cond),
    "Or": lambda a: sp.Or(a[0].cond, a[1].cond),
    "Piecewise": lambda a: sp.Piecewise((a[1].x, a[0].cond), (a[2].x, True)),
}

# `alt` (see `_Arg`) of the ops whose expression is a Piecewise. Ops whose value is a
# condition have `select(rel, 1, 0)`.
_ALT_FUNCS: dict[str, Callable] = {
    "Min": lambda a: _apply(sp.Min, a[0].alt, a[1].alt),
    "Max": lambda a: _apply(sp.Max, a[0].alt, a[1].alt),
    "Piecewise": lambda a: select(a[0].cond, a[1].alt, a[2].alt),
}


# ---------------------------------------------------------------------------------------------
# Symbols


def unravel(k: int, shape: tuple) -> tuple[int, ...]:
    """The multi-index of flat (row-major) position `k` in `shape`."""
    index = []
    for dim in reversed(shape):
        index.append(k % dim)
        k //= dim
    return tuple(reversed(index))


def input_symbol(name: str, shape: tuple, k: int, real: bool = True) -> sp.Expr:
    """The SymPy atom `to_sympy` uses for element `k` (flat) of input `name` of `shape`."""
    if not shape:
        return sp.Symbol(name, real=True) if real else sp.Symbol(name)
    base = sp.IndexedBase(name, real=True) if real else sp.IndexedBase(name)
    return base[unravel(k, shape)]


def _plain_symbol(name: str, shape: tuple, k: int) -> sp.Symbol:
    """A real Symbol printed as the element is (`A[0, 1]`): SymPy differentiates with respect
    to a Symbol faster and more simply than with respect to an Indexed."""
    if not shape:
        return sp.Symbol(name, real=True)
    return sp.Symbol(f"{name}[{', '.join(map(str, unravel(k, shape)))}]", real=True)


class Symbols:
    """The atoms of a graph's inputs: plain real Symbols for computing, and the public ones."""

    def __init__(self, graph: Graph, real: bool = True):
        self.plain: dict[str, list] = {}
        self.public: dict[str, list] = {}
        for name, port in graph.inputs.items():
            self.plain[name] = [_plain_symbol(name, port.shape, k) for k in range(port.size)]
            self.public[name] = [input_symbol(name, port.shape, k, real)
                                 for k in range(port.size)]
        self.to_public = {p: q for name in self.plain
                          for p, q in zip(self.plain[name], self.public[name], strict=True)}

    def plain_atom(self, name: str, k: int):
        return self.plain[name][k]


# ---------------------------------------------------------------------------------------------
# Size and depth

DEEP = 150  # expression depth beyond which SymPy work runs on a thread with a large stack
# Expression depth beyond which export builds unevaluated SymPy objects (`evaluate(False)`):
# evaluating Add, Mul and Pow asks uncached questions that recurse to the bottom of their
# arguments (`is_polynomial`, `is_number`), so a chain of n evaluated ops costs n**2.
UNEVALUATED_DEPTH = 400


def expression_sizes(graph: Graph, cap: int) -> tuple[list[int], list[int]]:
    """For every node, the size of its expression written out as a tree (capped at `cap`) and
    its depth: what SymPy will face, measured on the graph in one forward loop."""
    sizes = [1] * len(graph.nodes)
    depths = [1] * len(graph.nodes)
    for i, node in enumerate(graph.nodes):
        if node.args:
            sizes[i] = min(cap, 1 + sum(sizes[a] for a in node.args))
            depths[i] = 1 + max(depths[a] for a in node.args)
    return sizes, depths


PRINT_TERMS = 1_000_000  # terms of a derivative written out beyond which `diff` prints nothing


def refuse_to_print(graph: Graph, of: str) -> None:
    """Refuse, before any SymPy work, derivatives too big to print written out as trees.

    A chain that reuses its values (a tower of 400 powers, a loop) has a graph of thousands of
    nodes whose derivative, written out, has tens of millions of terms: minutes of SymPy and
    a hundred megabytes of text. Naming the shared parts (`--cse`) prints the graph's size.
    """
    ids = [i for name, port in graph.outputs.items() if name.startswith("d:") for i in port.ids]
    sizes, depths = expression_sizes(graph, PRINT_TERMS + 1)
    if ids and max(sizes[i] for i in ids) > PRINT_TERMS:
        raise UsageError(f"the derivatives of '{of}' written out have more than "
                         f"{PRINT_TERMS:,} terms ({max(depths[i] for i in ids):,} operations "
                         "deep)", hint="print them with --cse, which names each shared "
                         "subexpression once, or draw the graph with `diffdsl graph --grad`")


def graph_depth(graph: Graph, ids) -> int:
    """The depth of the deepest expression among nodes `ids`."""
    ids = list(ids)
    if not ids:
        return 0
    _, depths = expression_sizes(graph, 1)
    return max(depths[i] for i in ids)


def deep_call(depth: int, fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)`, on a thread with a stack to match `depth` when it is large.

    Our loops never recurse, but SymPy recurses over an expression as it builds, prints or
    differentiates it, a few frames per level: a chain 10,000 operations deep exhausts
    Python's default limit of 1000. Past `DEEP` levels the work runs on a new thread whose
    stack and recursion limit are sized to the depth (the limit is restored afterwards).
    """
    if depth <= DEEP:
        return fn(*args, **kwargs)
    result: dict = {}

    def work():
        try:
            result["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: B036 - re-raised on the calling thread
            result["error"] = exc

    old_limit = sys.getrecursionlimit()
    old_stack = threading.stack_size()
    sys.setrecursionlimit(max(old_limit, 60 * depth + 10_000))
    try:
        threading.stack_size(min(1 << 30, max(1 << 26, depth << 16)))
        try:
            thread = threading.Thread(target=work, name="diffdsl-sympy")
            thread.start()
        finally:
            threading.stack_size(old_stack)
        thread.join()
    finally:
        sys.setrecursionlimit(old_limit)
    if "error" in result:
        raise result["error"]
    return result["value"]


# ---------------------------------------------------------------------------------------------
# Export


def export_nodes(graph: Graph, ids, atom: Callable) -> dict[int, sp.Expr]:
    """SymPy expressions of the nodes `ids`, in one forward loop over what they reach.

    `atom(name, k)` gives the symbol of element `k` of input `name`. Expressions deeper than
    `UNEVALUATED_DEPTH` are built unevaluated: the tree of the graph as it is, `x*x` not `x**2`.
    """
    if graph_depth(graph, ids) > UNEVALUATED_DEPTH:
        with sp.evaluate(False):
            return _export_nodes(graph, ids, atom)
    return _export_nodes(graph, ids, atom)


def _export_nodes(graph: Graph, ids, atom: Callable) -> dict[int, sp.Expr]:
    nodes = graph.nodes
    live = bytearray(len(nodes))
    for i in ids:
        live[i] = 1
    for i in range(len(nodes) - 1, -1, -1):
        if live[i]:
            for a in nodes[i].args:
                live[a] = 1
    exprs: list = [None] * len(nodes)
    alts: list = [None] * len(nodes)  # None: the same as exprs[i]
    rels: dict[int, object] = {}
    for i, node in enumerate(nodes):
        if not live[i]:
            continue
        if node.op == "const":
            exprs[i] = constant(node.attr)
            continue
        if node.op == "input":
            exprs[i] = atom(*node.attr)
            continue
        name = OPS[node.op].sympy
        args = [_Arg(exprs[a], exprs[a] if alts[a] is None else alts[a], rels.get(a))
                for a in node.args]
        result = SYMPY_FUNCS[name](args)
        # A Symbol is a Boolean too in SymPy; a condition is a Boolean that is no Expr.
        if isinstance(result, sp.logic.boolalg.Boolean) and not isinstance(result, sp.Expr):
            rels[i] = result
            exprs[i] = sp.Piecewise((sp.Integer(1), result), (sp.Integer(0), True))
            if isinstance(exprs[i], sp.Piecewise):
                alts[i] = select(result, sp.Integer(1), sp.Integer(0))
            continue
        exprs[i] = result
        if name in _ALT_FUNCS:
            if isinstance(result, sp.Piecewise) or any(alts[a] is not None for a in node.args):
                alts[i] = _ALT_FUNCS[name](args)
        elif any(alts[a] is not None for a in node.args):
            alts[i] = SYMPY_FUNCS[name]([_Arg(g.alt, g.alt, g.rel) for g in args])
    return {i: exprs[i] for i in ids}


def shaped(flat: list, shape: tuple):
    """An expression for shape (), else a `sympy.Array` of `shape` (row-major `flat`)."""
    if not shape:
        return flat[0]
    return sp.Array(flat, shape)


def _output_names(graph: Graph, names) -> list[str]:
    if names is None:
        return list(graph.outputs)
    names = [names] if isinstance(names, str) else list(names)
    for name in names:
        if name not in graph.outputs:
            raise UsageError(f"'{name}' is not an output of this program",
                             hint=f"the outputs are: {', '.join(graph.outputs)}")
    return names


def to_sympy(graph: Graph, names=None, real: bool = True) -> dict:
    """Outputs (all, or those in `names`) as SymPy: an expression, or a `sympy.Array`."""
    names = _output_names(graph, names)
    syms = Symbols(graph, real)
    ids = [i for name in names for i in graph.outputs[name].ids]
    exprs = deep_call(graph_depth(graph, ids), export_nodes, graph, ids,
                      lambda name, k: syms.public[name][k])
    return {name: shaped([exprs[i] for i in graph.outputs[name].ids], graph.outputs[name].shape)
            for name in names}


# ---------------------------------------------------------------------------------------------
# Derivatives


class Derivatives(dict):
    """input name -> derivative of output `of` (shape S + T), remembering `of` and S.
    Jupyter shows it as LaTeX, one line an input: `\\frac{\\partial d}{\\partial A} = [...]`."""

    LATEX_TERMS = 20_000  # written-out size above which it shows as plain text

    def __init__(self, of: str, out_shape: tuple, items=()):
        super().__init__(items)
        self.of = of
        self.out_shape = tuple(out_shape)

    def _repr_latex_(self) -> str | None:
        exprs = [e for value in self.values() for e in _flat(value)]
        stack, terms = list(exprs), 0  # counted without recursion: trees can be deep
        while stack and terms <= self.LATEX_TERMS:
            terms += 1
            stack.extend(getattr(stack.pop(), "args", ()))
        if not exprs or terms > self.LATEX_TERMS:
            return None
        return _deep_print(_latex_lines, self)


def _latex_lines(derivs: Derivatives) -> str:
    of = sp.latex(sp.Symbol(derivs.of))
    lines = [f"\\frac{{\\partial {of}}}{{\\partial {sp.latex(sp.Symbol(name))}}} &= "
             f"{sp.latex(value)}" for name, value in derivs.items()]
    return "$\\begin{aligned}" + " \\\\ ".join(lines) + "\\end{aligned}$"


_NONSMOOTH = (sp.floor, sp.ceiling, sp.sign)


def oracle_diff(expr: sp.Expr, symbol: sp.Symbol) -> sp.Expr:
    """`sympy.diff`, with the language's conventions for functions that are not smooth.

    SymPy gives `sign'` as `2*DiracDelta(x)` and leaves `floor'` unevaluated; the language
    says these derivatives are 0 (they are, away from the jumps), so they are replaced by 0.
    A derivative SymPy still cannot evaluate is left in the result (see `has_unevaluated`).
    """
    d = sp.diff(expr, symbol)
    if d.has(sp.DiracDelta):
        d = d.replace(sp.DiracDelta, lambda *args: sp.Integer(0))
    if d.has(sp.Derivative):
        # floor(3*x)' comes back as 3*Subs(Derivative(floor(_xi), _xi), _xi, 3*x).
        d = d.replace(lambda e: isinstance(e, sp.Derivative) and isinstance(e.expr, _NONSMOOTH),
                      lambda e: sp.Integer(0))
        if d.has(sp.Subs):
            d = d.replace(lambda e: isinstance(e, sp.Subs), lambda e: e.doit())
    return d


def has_unevaluated(expr: sp.Expr) -> bool:
    return expr.has(sp.Derivative)


def function_exprs(graph: Graph, of: str, atom: Callable) -> list:
    """The elements of output `of`, flat."""
    ids = graph.outputs[of].ids
    exprs = export_nodes(graph, ids, atom)
    return [exprs[i] for i in ids]


def jacobian_exprs(jac: Graph, wrt: list[str], atom: Callable) -> dict[str, list]:
    """The "d:NAME" outputs of a jacobian graph, flat, by input name."""
    ids = [i for name in wrt for i in jac.outputs[autodiff.d_name(name)].ids]
    exprs = export_nodes(jac, ids, atom)
    return {name: [exprs[i] for i in jac.outputs[autodiff.d_name(name)].ids] for name in wrt}


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


# ---------------------------------------------------------------------------------------------
# Printing


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


def sympy_depth(exprs) -> int:
    """The depth of the deepest of the SymPy expressions `exprs`, found without recursion."""
    depth: dict[int, int] = {}  # id of a subexpression -> its depth; `exprs` keeps them alive
    deepest = 0
    for root in exprs:
        stack = [(root, False)]
        while stack:
            expr, ready = stack.pop()
            args = getattr(expr, "args", ())
            if ready:
                depth[id(expr)] = 1 + max((depth[id(a)] for a in args), default=0)
            elif id(expr) not in depth:
                stack.append((expr, True))
                stack.extend((a, False) for a in args if id(a) not in depth)
        deepest = max(deepest, depth[id(root)])
    return deepest


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
        shape = _shape(value)
        for k, expr in enumerate(_flat(value)):
            index = unravel(k, shape)
            labels.append((_label(of, index[:len(out_shape)], latex),
                           _label(name, index[len(out_shape):], latex)))
            exprs.append(sp.sympify(expr))
    show = sp.latex if latex else str
    lines = []
    if cse:
        replacements, exprs = sp.cse(exprs, symbols=sp.numbered_symbols(_cse_prefix(exprs)))
        for sym, sub in replacements:
            lines.append(f"{show(sym)} = {show(sub)}")
    for (out_label, in_label), expr in zip(labels, exprs, strict=True):
        if latex:
            lines.append(f"\\frac{{\\partial {out_label}}}{{\\partial {in_label}}} = "
                         f"{show(expr)}")
        else:
            lines.append(f"d {out_label} / d {in_label} = {show(expr)}")
    return "\n".join(lines)


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
        strings = [str(e) for e in _flat(value)]
        result[name] = _nest(strings, shape)
    return result


def _nest(flat: list, shape: tuple):
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0]
    return [_nest(flat[r * step:(r + 1) * step], shape[1:]) for r in range(shape[0])]
