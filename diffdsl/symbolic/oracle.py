"""The SymPy oracle of a program's derivatives: SymPy's own derivatives of the exported
program (`sympy.diff`, with the language's conventions for functions that are not smooth:
`oracle_diff`), and ours, exported from the derivative graph, in the same shape, so the two
can be compared element by element (`diffdsl check`, and the tests); and the evaluation of
both at points with 50-digit arithmetic (`evaluate`), where SymPy cannot show them equal."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import sympy as sp

from ..graph import autodiff
from ..graph.ir import Graph
from ..graph.ops import OPS
from .export import Symbols, deep_call, export_depth, function_exprs, jacobian_exprs, shaped
from .formulas import derivatives_latex

DIGITS = 50  # digits of the arithmetic that compares two formulas at a point

# The SymPy functions of the ops whose derivative the language takes as zero (sign, floor,
# ceil): those without a pullback whose spelling is a SymPy function.
_NONSMOOTH = tuple(getattr(sp, row.sympy) for row in OPS.values()
                   if row.arity and row.pullback is None and row.sympy.isidentifier())


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


class Derivatives(dict):
    """input name -> derivative of output `of` (shape S + T), remembering `of` and S.
    Jupyter shows it as LaTeX, one line an input: `\\frac{\\partial d}{\\partial A} = [...]`."""

    LATEX_TERMS = 20_000  # written-out size above which it shows as plain text

    def __init__(self, of: str, out_shape: tuple, items=()):
        super().__init__(items)
        self.of = of
        self.out_shape = tuple(out_shape)

    def _repr_latex_(self) -> str | None:
        return derivatives_latex(self, self.of, self.LATEX_TERMS)


def sympy_derivatives(graph: Graph, of: str | None = None, wrt=None,
                      real: bool = True) -> Derivatives:
    """The oracle: the exported output differentiated by `sympy.diff`, per input element."""
    of = autodiff.pick_output(graph, of)
    wrt = autodiff.pick_inputs(graph, wrt)
    return deep_call(export_depth(graph, graph.outputs[of].ids), _sympy_derivatives,
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
    flat = deep_call(export_depth(jac, ids), jacobian_exprs, jac, wrt,
                     lambda name, k: syms.public[name][k])
    out_shape = graph.outputs[of].shape
    return Derivatives(of, out_shape, {
        name: shaped(flat[name], out_shape + graph.inputs[name].shape) for name in wrt})


# 50-digit evaluation ----------------------------------------------------------------------


def _mp_select(c, a, b):
    return a if c else b


def evaluate(exprs: list, symbols: list, points: list) -> list[list]:
    """Every expression at every point (a list of floats, one per symbol), as mpmath numbers
    computed with `DIGITS` digits and more: `values[point][expr]`.

    One function made by `lambdify` with common subexpressions shared evaluates them all,
    in time that follows the graph rather than the tree SymPy would walk with `xreplace`. An
    expression it cannot evaluate (a division by zero in a branch not taken) falls back to
    substitution and `evalf`, one expression at a time.
    """
    together = _lambdified(symbols, exprs, points)
    if together is not None:
        return together
    rows: list[list] = [[None] * len(exprs) for _ in points]
    for j, expr in enumerate(exprs):
        alone = _lambdified(symbols, [expr], points)
        for p, pt in enumerate(points):
            if alone is not None:
                rows[p][j] = alone[p][0]
            else:
                subs = {s: sp.Float(x, DIGITS + 30) for s, x in zip(symbols, pt, strict=True)}
                rows[p][j] = _evalf(expr, subs)
    return rows


def _lambdified(symbols: list, exprs: list, points: list) -> list[list] | None:
    # The generated function's arguments are named after its symbols, in one namespace with
    # SymPy's printed constants and mpmath's functions: an input called `pi`, `E` or `mpf`
    # would be read as the constant. Dummies have names no input and no library can take.
    dummies = [sp.Dummy(f"in{i}", real=True) for i in range(len(symbols))]
    renamed = dict(zip(symbols, dummies, strict=True))
    exprs = [sp.sympify(e).xreplace(renamed) for e in exprs]
    try:
        fn = sp.lambdify(dummies, exprs, modules=[{"select": _mp_select}, "mpmath"], cse=True,
                         dummify=True)
        with mpmath.workdps(DIGITS + 10):
            return [[mpmath.mpmathify(v) for v in fn(*map(mpmath.mpf, pt))] for pt in points]
    except (ArithmeticError, TypeError, ValueError, NameError):
        return None


def _evalf(expr: sp.Expr, subs: dict):
    """One expression at one point: substituting Floats of extra precision evaluates as it
    builds, Piecewise conditions included (`evalf(subs=...)` is far slower on Piecewise)."""
    value = expr.xreplace(subs).evalf(DIGITS)
    if value.has(sp.nan):
        return mpmath.nan
    if value.has(sp.zoo, sp.oo, -sp.oo):
        return mpmath.inf
    re, im = value.as_real_imag()
    if not (hasattr(re, "_mpf_") or re == 0) or not (hasattr(im, "_mpf_") or im == 0):
        return None  # not a number: SymPy could not evaluate it
    return mpmath.mpc(mpmath.mpmathify(re), mpmath.mpmathify(im))


def relative_difference(a, b, scale: float) -> float:
    """|a - b| over max(|a|, |b|, scale); 0 where both are the same non-number."""
    if a is None or b is None:
        return math.inf
    nan_a, nan_b = mpmath.isnan(a), mpmath.isnan(b)
    if nan_a or nan_b:
        return 0.0 if nan_a and nan_b else math.inf
    if a == b:
        return 0.0
    if mpmath.isinf(a) or mpmath.isinf(b):
        return math.inf
    magnitude = max(abs(a), abs(b), mpmath.mpf(scale if math.isfinite(scale) else 0.0))
    if magnitude == 0:
        return math.inf
    return float(abs(a - b) / magnitude)


def relative_errors(fd: np.ndarray, jv: np.ndarray, f0: np.ndarray,
                    floor_share: float) -> np.ndarray:
    """|FD - Jv| over max(|FD|, |Jv|, floor), the floor `floor_share` of the largest value or
    derivative at the point; nan where the function itself is not finite."""
    with np.errstate(all="ignore"):
        finite_f = np.isfinite(f0)[:, None, :]  # (points, 1, S)
        scale_f = np.where(np.isfinite(f0), np.abs(f0), 0.0).max(axis=1)
        scale_j = np.where(np.isfinite(jv), np.abs(jv), 0.0).max(axis=(1, 2))
        floor = floor_share * np.maximum(scale_f, scale_j)[:, None, None]
        err = np.abs(fd - jv)
        denom = np.maximum(np.maximum(np.abs(fd), np.abs(jv)), floor)
        rel = np.where(err == 0, 0.0, err / np.where(denom > 0, denom, 1.0))
        rel = np.where(np.isfinite(fd) & np.isfinite(jv), rel, np.inf)
        # Where the function is not finite (outside its domain) nothing can be checked.
        return np.where(finite_f, rel, np.nan)


def short(expr, limit: int = 2000) -> str:
    """`expr` as text, cut at `limit` characters (a mismatch's report stays readable)."""
    text = str(expr)
    return text if len(text) <= limit else text[:limit] + " ..."
