"""The op table: one row per scalar operation of the IR.

A row holds everything about its op: arity, how to fold it on constants, its NumPy, Numba and
LLVM IR spellings, its SymPy name, and its pullback. Tests parametrise over `OPS`, so a new op
cannot go untested.

A pullback is `vjp(g, args, out, ct) -> (ct_for_arg0, ...)`: it builds IR nodes through the
emitter `g` (see `ir.Emitter`) and never computes numbers, so derivatives are graphs too.
An entry of `None` means the argument receives no cotangent (derivative zero). The tangent
rule of forward mode is derived from it: the pullback of a scalar op is linear in `ct`, so
the tangent of the output is the sum over arguments of the pullback with `ct` set to that
argument's tangent. Ops whose tangent reads better written out give `jvp` themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

LN2 = math.log(2.0)
LN10 = math.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    py: Callable  # scalar function of floats, for constant folding
    np: str  # NumPy expression, arguments as {0}, {1}, {2}
    nb: str  # Numba/CUDA expression (module `math` is in scope), same placeholders
    sympy: str  # name in symbolic.SYMPY_FUNCS
    vjp: Callable | None  # None: the op has derivative zero everywhere
    jvp: Callable | None = None
    commutative: bool = False
    smooth: bool = True  # False for ops whose derivative is zero (comparisons, floor, ...)
    # LLVM IR (backends/llvm.py): instructions defining `{r}` from operands {0}, {1}, {2};
    # `{t}` is the float type, `{s}` its intrinsic suffix (f64), `{f}` its libm suffix ("", "f").
    # Temporaries are named `{r}.x`. No fast-math flags: they would merge 0.0 and -0.0, which
    # the IR keeps apart, and change libm results.
    ll: str = ""


def _b(x: bool) -> float:
    return 1.0 if x else 0.0


def _z(g, t):
    """A tangent that may be absent (None: zero) as a node."""
    return g.const(0.0) if t is None else t


def _py_sign(x):
    return 1.0 if x > 0 else (-1.0 if x < 0 else x + 0.0)  # +0.0 for -0.0, as NumPy; nan


OPS: dict[str, Op] = {}


def _row(name, arity, py, np_expr, nb_expr, sympy, vjp, jvp=None, commutative=False, smooth=True,
         ll=""):
    OPS[name] = Op(name, arity, py, np_expr, nb_expr, sympy, vjp, jvp, commutative, smooth, ll)


# LLVM spellings shared by several rows.
def _intrinsic(name, arity=1):
    args = ", ".join(f"{{t}} {{{k}}}" for k in range(arity))
    return f"{{r}} = call {{t}} @llvm.{name}.{{s}}({args})"


def _libm(name, arity=1):
    args = ", ".join(f"{{t}} {{{k}}}" for k in range(arity))
    return f"{{r}} = call {{t}} @{name}{{f}}({args})"


def _truth(test):
    """A test giving i1 `{r}.c`, then 1.0 or 0.0 as the op's value."""
    return test + "\n{r} = select i1 {r}.c, {t} 1.0, {t} 0.0"


def _pick(cond):  # min, max: the first argument on a tie (LANGUAGE.md)
    return "{r}.c = fcmp " + cond + " {t} {0}, {1}\n{r} = select i1 {r}.c, {t} {0}, {t} {1}"


def _logic(op):  # Python's truth: nonzero, NaN included, is true
    return _truth("{r}.a = fcmp une {t} {0}, 0.0\n{r}.b = fcmp une {t} {1}, 0.0\n"
                  "{r}.c = " + op + " i1 {r}.a, {r}.b")


# sign(0) is 0 (LANGUAGE.md), +0.0 for -0.0 as in NumPy, and sign(nan) is nan: `x + 0.0`
# where neither test holds.
_LL_SIGN = ("{r}.p = fcmp ogt {t} {0}, 0.0\n{r}.n = fcmp olt {t} {0}, 0.0\n"
            "{r}.z = fadd {t} {0}, 0.0\n"
            "{r}.m = select i1 {r}.n, {t} -1.0, {t} {r}.z\n"
            "{r} = select i1 {r}.p, {t} 1.0, {t} {r}.m")
_LL_NOT = _truth("{r}.c = fcmp oeq {t} {0}, 0.0")
_LL_SELECT = "{r}.c = fcmp une {t} {0}, 0.0\n{r} = select i1 {r}.c, {t} {1}, {t} {2}"


# Leaves. `input` and `const` have no arguments; evaluators read their attributes.
_row("input", 0, None, "", "", "", None)
_row("const", 0, None, "", "", "", None)

# Unary ops ---------------------------------------------------------------------------------
_row("neg", 1, lambda x: -x, "-({0})", "-({0})", "neg",
     lambda g, a, out, ct: (g.neg(ct),),
     ll="{r} = fneg {t} {0}")
_row("exp", 1, math.exp, "np.exp({0})", "math.exp({0})", "exp",
     lambda g, a, out, ct: (g.mul(ct, out),),
     ll=_intrinsic("exp"))
_row("log", 1, math.log, "np.log({0})", "math.log({0})", "log",
     lambda g, a, out, ct: (g.div(ct, a[0]),),
     ll=_intrinsic("log"))
_row("log1p", 1, math.log1p, "np.log1p({0})", "math.log1p({0})", "log1p",
     lambda g, a, out, ct: (g.div(ct, g.add(g.const(1.0), a[0])),),
     ll=_libm("log1p"))
_row("expm1", 1, math.expm1, "np.expm1({0})", "math.expm1({0})", "expm1",
     lambda g, a, out, ct: (g.mul(ct, g.add(out, g.const(1.0))),),
     ll=_libm("expm1"))
_row("log2", 1, math.log2, "np.log2({0})", "math.log2({0})", "log2",
     lambda g, a, out, ct: (g.div(ct, g.mul(a[0], g.const(LN2))),),
     ll=_intrinsic("log2"))
_row("log10", 1, math.log10, "np.log10({0})", "math.log10({0})", "log10",
     lambda g, a, out, ct: (g.div(ct, g.mul(a[0], g.const(LN10))),),
     ll=_intrinsic("log10"))
_row("sqrt", 1, math.sqrt, "np.sqrt({0})", "math.sqrt({0})", "sqrt",
     lambda g, a, out, ct: (g.div(ct, g.mul(g.const(2.0), out)),),
     ll=_intrinsic("sqrt"))
_row("cbrt", 1, getattr(math, "cbrt", lambda x: math.copysign(abs(x) ** (1.0 / 3.0), x)),
     "np.cbrt({0})", "np.cbrt({0})", "cbrt",
     lambda g, a, out, ct: (g.div(ct, g.mul(g.const(3.0), g.mul(out, out))),),
     ll=_libm("cbrt"))
_row("sin", 1, math.sin, "np.sin({0})", "math.sin({0})", "sin",
     lambda g, a, out, ct: (g.mul(ct, g.op("cos", a[0])),),
     ll=_intrinsic("sin"))
_row("cos", 1, math.cos, "np.cos({0})", "math.cos({0})", "cos",
     lambda g, a, out, ct: (g.neg(g.mul(ct, g.op("sin", a[0]))),),
     ll=_intrinsic("cos"))
_row("tan", 1, math.tan, "np.tan({0})", "math.tan({0})", "tan",
     lambda g, a, out, ct: (g.mul(ct, g.add(g.const(1.0), g.mul(out, out))),),
     ll=_libm("tan"))
_row("asin", 1, math.asin, "np.arcsin({0})", "math.asin({0})", "asin",
     lambda g, a, out, ct: (
         g.div(ct, g.op("sqrt", g.sub(g.const(1.0), g.mul(a[0], a[0])))),),
     ll=_libm("asin"))
_row("acos", 1, math.acos, "np.arccos({0})", "math.acos({0})", "acos",
     lambda g, a, out, ct: (
         g.neg(g.div(ct, g.op("sqrt", g.sub(g.const(1.0), g.mul(a[0], a[0]))))),),
     ll=_libm("acos"))
_row("atan", 1, math.atan, "np.arctan({0})", "math.atan({0})", "atan",
     lambda g, a, out, ct: (g.div(ct, g.add(g.const(1.0), g.mul(a[0], a[0]))),),
     ll=_libm("atan"))
_row("sinh", 1, math.sinh, "np.sinh({0})", "math.sinh({0})", "sinh",
     lambda g, a, out, ct: (g.mul(ct, g.op("cosh", a[0])),),
     ll=_libm("sinh"))
_row("cosh", 1, math.cosh, "np.cosh({0})", "math.cosh({0})", "cosh",
     lambda g, a, out, ct: (g.mul(ct, g.op("sinh", a[0])),),
     ll=_libm("cosh"))
_row("tanh", 1, math.tanh, "np.tanh({0})", "math.tanh({0})", "tanh",
     lambda g, a, out, ct: (g.mul(ct, g.sub(g.const(1.0), g.mul(out, out))),),
     ll=_libm("tanh"))
_row("asinh", 1, math.asinh, "np.arcsinh({0})", "math.asinh({0})", "asinh",
     lambda g, a, out, ct: (
         g.div(ct, g.op("sqrt", g.add(g.mul(a[0], a[0]), g.const(1.0)))),),
     ll=_libm("asinh"))
_row("acosh", 1, math.acosh, "np.arccosh({0})", "math.acosh({0})", "acosh",
     lambda g, a, out, ct: (
         g.div(ct, g.op("sqrt", g.sub(g.mul(a[0], a[0]), g.const(1.0)))),),
     ll=_libm("acosh"))
_row("atanh", 1, math.atanh, "np.arctanh({0})", "math.atanh({0})", "atanh",
     lambda g, a, out, ct: (g.div(ct, g.sub(g.const(1.0), g.mul(a[0], a[0]))),),
     ll=_libm("atanh"))
# abs'(0) = 0 (LANGUAGE.md): sign(0) is 0.
_row("abs", 1, abs, "np.abs({0})", "abs({0})", "Abs",
     lambda g, a, out, ct: (g.mul(ct, g.op("sign", a[0])),),
     ll=_intrinsic("fabs"))
_row("sign", 1, _py_sign, "np.sign({0})", "np.sign({0})", "sign", None, smooth=False,
     ll=_LL_SIGN)
_row("floor", 1, math.floor, "np.floor({0})", "math.floor({0})", "floor", None, smooth=False,
     ll=_intrinsic("floor"))
_row("ceil", 1, math.ceil, "np.ceil({0})", "math.ceil({0})", "ceiling", None, smooth=False,
     ll=_intrinsic("ceil"))
_row("erf", 1, math.erf, "_erf({0})", "math.erf({0})", "erf",
     lambda g, a, out, ct: (
         g.mul(ct, g.mul(g.const(TWO_OVER_SQRT_PI),
                         g.op("exp", g.neg(g.mul(a[0], a[0]))))),),
     ll=_libm("erf"))
# lgamma is log|gamma(x)| (libm's lgamma: +inf at the poles 0, -1, -2, ...). Its derivative,
# digamma, is not in libm: `digamma_graph` builds it from other ops, so lgamma's derivatives of
# every order come from differentiating that graph.
_row("lgamma", 1, lambda x: py_lgamma(x),
     "_lgamma({0})", "math.lgamma({0})",
     "loggamma",
     lambda g, a, out, ct: (g.mul(ct, digamma_graph(g, a[0])),),
     ll=_libm("lgamma"))
_row("not", 1, lambda x: _b(x == 0), "np.where({0} == 0, 1.0, 0.0)",
     "(1.0 if {0} == 0 else 0.0)", "Not", None, smooth=False,
     ll=_LL_NOT)

# Binary ops --------------------------------------------------------------------------------
_row("add", 2, lambda x, y: x + y, "({0} + {1})", "({0} + {1})", "Add",
     lambda g, a, out, ct: (ct, ct), commutative=True,
     ll="{r} = fadd {t} {0}, {1}")
_row("sub", 2, lambda x, y: x - y, "({0} - {1})", "({0} - {1})", "sub",
     lambda g, a, out, ct: (ct, g.neg(ct)),
     ll="{r} = fsub {t} {0}, {1}")
_row("mul", 2, lambda x, y: x * y, "({0} * {1})", "({0} * {1})", "Mul",
     lambda g, a, out, ct: (g.mul(ct, a[1]), g.mul(ct, a[0])), commutative=True,
     ll="{r} = fmul {t} {0}, {1}")
_row("div", 2, lambda x, y: x / y, "({0} / {1})", "({0} / {1})", "div",
     lambda g, a, out, ct: (g.div(ct, a[1]), g.neg(g.div(g.mul(ct, out), a[1]))),
     ll="{r} = fdiv {t} {0}, {1}")
_row("pow", 2, math.pow, "_power({0}, {1})", "({0} ** {1})", "Pow",
     lambda g, a, out, ct: (
         g.mul(ct, g.mul(a[1], g.pow(a[0], g.sub(a[1], g.const(1.0))))),
         # d/dy x**y = x**y log x, taken as 0 at x = 0 (its limit for y > 0), not 0 * -inf.
         None if g.is_const(a[1]) else
         g.select(g.op("eq", a[0], g.const(0.0)), g.const(0.0),
                  g.mul(ct, g.mul(g.op("log", a[0]), out)))),
     ll=_intrinsic("pow", 2))
_row("atan2", 2, math.atan2, "np.arctan2({0}, {1})", "math.atan2({0}, {1})", "atan2",
     lambda g, a, out, ct: (
         g.div(g.mul(ct, a[1]), g.add(g.mul(a[0], a[0]), g.mul(a[1], a[1]))),
         g.neg(g.div(g.mul(ct, a[0]), g.add(g.mul(a[0], a[0]), g.mul(a[1], a[1]))))),
     ll=_libm("atan2", 2))
_row("hypot", 2, math.hypot, "np.hypot({0}, {1})", "math.hypot({0}, {1})", "hypot",
     # At the origin, where the gradient x/r is 0/0, it is taken as 0, as abs'(0) is.
     lambda g, a, out, ct: tuple(
         g.select(g.op("eq", out, g.const(0.0)), g.const(0.0), g.div(g.mul(ct, x), out))
         for x in a),
     ll=_libm("hypot", 2))
# min and max send the whole derivative to the first argument on a tie (LANGUAGE.md).
_row("min", 2, lambda x, y: x if x <= y else y, "np.where({0} <= {1}, {0}, {1})",
     "({0} if {0} <= {1} else {1})",
     "Min",
     lambda g, a, out, ct: (
         g.select(g.op("le", a[0], a[1]), ct, g.const(0.0)),
         g.select(g.op("le", a[0], a[1]), g.const(0.0), ct)),
     jvp=lambda g, a, out, t: g.select(g.op("le", a[0], a[1]), _z(g, t[0]), _z(g, t[1])),
     ll=_pick("ole"))
_row("max", 2, lambda x, y: x if x >= y else y, "np.where({0} >= {1}, {0}, {1})",
     "({0} if {0} >= {1} else {1})",
     "Max",
     lambda g, a, out, ct: (
         g.select(g.op("ge", a[0], a[1]), ct, g.const(0.0)),
         g.select(g.op("ge", a[0], a[1]), g.const(0.0), ct)),
     jvp=lambda g, a, out, t: g.select(g.op("ge", a[0], a[1]), _z(g, t[0]), _z(g, t[1])),
     ll=_pick("oge"))
# Comparisons and logic give 1.0 or 0.0; their derivative is zero.
# LLVM: ordered tests are false on NaN, as Python's are; `!=` is unordered (true on NaN).
for _name, _sym, _fn, _cond in (
    ("lt", "<", lambda x, y: _b(x < y), "olt"), ("le", "<=", lambda x, y: _b(x <= y), "ole"),
    ("gt", ">", lambda x, y: _b(x > y), "ogt"), ("ge", ">=", lambda x, y: _b(x >= y), "oge"),
    ("eq", "==", lambda x, y: _b(x == y), "oeq"), ("ne", "!=", lambda x, y: _b(x != y), "une"),
):
    _row(_name, 2, _fn, f"np.where({{0}} {_sym} {{1}}, 1.0, 0.0)",
         f"(1.0 if {{0}} {_sym} {{1}} else 0.0)", _name, None,
         commutative=_name in ("eq", "ne"), smooth=False,
         ll=_truth(f"{{r}}.c = fcmp {_cond} {{t}} {{0}}, {{1}}"))
_row("and", 2, lambda x, y: _b(x != 0 and y != 0),
     "np.where(({0} != 0) & ({1} != 0), 1.0, 0.0)",
     "(1.0 if ({0} != 0 and {1} != 0) else 0.0)", "And", None, commutative=True, smooth=False,
     ll=_logic("and"))
_row("or", 2, lambda x, y: _b(x != 0 or y != 0),
     "np.where(({0} != 0) | ({1} != 0), 1.0, 0.0)",
     "(1.0 if ({0} != 0 or {1} != 0) else 0.0)", "Or", None, commutative=True, smooth=False,
     ll=_logic("or"))

# select(c, a, b) is `a` where c != 0, else `b`. Its pullback routes the cotangent with a
# select, so a NaN or infinite derivative in the branch not taken never reaches the result.
_row("select", 3, lambda c, a, b: a if c != 0 else b, "np.where({0} != 0, {1}, {2})",
     "({1} if {0} != 0 else {2})", "Piecewise",
     lambda g, a, out, ct: (None, g.select(a[0], ct, g.const(0.0)),
                            g.select(a[0], g.const(0.0), ct)),
     jvp=lambda g, a, out, t: g.select(a[0], _z(g, t[1]), _z(g, t[2])),
     ll=_LL_SELECT)

def _libm_lgamma():
    """The C library's lgamma, which the compiled code calls (Python's math.lgamma is its own,
    5e-9 off near x = 1 and 2, where lgamma is near zero)."""
    import ctypes
    import ctypes.util
    import sys
    names = ["ucrtbase"] if sys.platform == "win32" else [ctypes.util.find_library("m"), None]
    for name in names:
        try:
            fn = ctypes.CDLL(name).lgamma
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
        return fn
    return None


_LGAMMA = _libm_lgamma()


def np_power(a, b):
    """np.power, except where NumPy computes a scalar exponent 0.5 as sqrt: C's pow (which the
    folder and the compiled backends call) gives pow(-inf, 0.5) = inf and pow(-0.0, 0.5) = +0.0,
    where sqrt gives nan and -0.0."""
    out = np.power(a, b)
    half = np.equal(b, 0.5)
    if np.any(half):
        fixed = np.where(half & np.equal(a, -np.inf), np.inf, np.where(half, out + 0.0, out))
        out = fixed.astype(np.asarray(out).dtype, copy=False)
    return out


def py_lgamma(x: float) -> float:
    """libm's lgamma: +inf at the poles and for huge |x| (where Python's raises)."""
    if _LGAMMA is not None:
        return _LGAMMA(float(x))
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):
        return math.inf


# digamma(x) = d/dx lgamma(x), from ops already in the table, through the emitter `g`:
# reflection psi(x) = psi(1 - x) - pi / tan(pi x) for x < 0; the recurrence
# psi(y) = psi(y + 8) - sum_{k<8} 1 / (y + k); then the asymptotic series at z = y + 8 >= 8,
# psi(z) ~ log z - 1 / (2z) - sum_k B_2k / (2k z^2k), to z^-14 (the first term left out is
# below 2e-15 at z = 8). Derivatives of every order come by differentiating this graph.
DIGAMMA_SHIFT = 8
_DIGAMMA_SERIES = (1 / 12, 1 / 120, 1 / 252, 1 / 240, 1 / 132, 691 / 32760, 1 / 12)


def digamma_graph(g, x):
    c = g.const
    reflect = g.op("lt", x, c(0.0))
    y = g.select(reflect, g.sub(c(1.0), x), x)
    shift = c(0.0)
    for k in range(DIGAMMA_SHIFT):
        shift = g.add(shift, g.div(c(1.0), g.add(y, c(float(k)))))
    z = g.add(y, c(float(DIGAMMA_SHIFT)))
    w = g.div(c(1.0), g.mul(z, z))
    series = c(_DIGAMMA_SERIES[-1])
    for coef in reversed(_DIGAMMA_SERIES[:-1]):  # 1/12 - w (1/120 - w (1/252 - ...))
        series = g.sub(c(coef), g.mul(w, series))
    psi = g.sub(g.sub(g.sub(g.op("log", z), g.div(c(0.5), z)), g.mul(w, series)), shift)
    cot = g.div(c(math.pi), g.op("tan", g.mul(c(math.pi), x)))
    return g.select(reflect, g.sub(psi, cot), psi)


UNARY_BUILTINS = (
    "exp log log1p expm1 log2 log10 sqrt cbrt sin cos tan asin acos atan sinh cosh tanh "
    "asinh acosh atanh abs sign floor ceil erf lgamma"
).split()
COMPARISONS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
ARITHMETIC = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow"}
