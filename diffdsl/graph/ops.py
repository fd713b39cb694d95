"""The op table: one row per scalar operation of the IR, one field per job.

Every fact about an op is a field of its row, and every consumer reads the rows, keyed by the
op's name: constant folding (`fold`), the NumPy interpreter and the static folding of lowering
(`numpy`), the CUDA kernels and the tape interpreters (`numba`), the LLVM emitter (`ll`), SymPy
export (`sympy`, `sympy_alt`), drawings (`symbol`) and differentiation (`pullback`, `tangent`,
`routes`, `copies`). Opcodes are positions in `OPS`. A test checks that every consuming table
covers every row, so a new elementwise op is one row plus its tests.

A pullback is `pullback(g, args, out, ct) -> (ct_for_arg0, ...)`: it builds IR nodes through the
builder `g` (`ir.Builder`) and never computes numbers, so derivatives are graphs too. An entry
of `None` means the argument receives no cotangent (derivative zero). The tangent rule of
forward mode is derived from it: the pullback of a scalar op is linear in `ct`, so the tangent
of the output is the sum over arguments of the pullback with `ct` set to that argument's
tangent. Ops whose tangent reads better written out give `tangent` themselves.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Callable

from .special import digamma_graph, py_lgamma

LN2 = math.log(2.0)
LN10 = math.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

__all__ = ["OPS", "Op", "UNARY_BUILTINS", "BINARY_BUILTINS", "COMPARISONS", "ARITHMETIC",
           "digamma_graph", "py_lgamma"]


@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    # Python on floats, for constant folding; it may raise (then the node is left to run time).
    # A row without a `numpy` spelling needs a fold that never raises: it is mapped over arrays.
    fold: Callable | None = None
    # A NumPy expression of arrays {0}, {1}, {2} (module `np`, and `c_power`: np.power as C's
    # pow, see ufuncs.py); "" maps `fold` over the elements.
    numpy: str = ""
    # Python that Numba compiles, for the CUDA kernels and the tapes: operands {0}, {1}, {2},
    # `{one}` and `{zero}` the constants of the kernel's dtype, `math` (IEEE under the CUDA
    # simulator), and the helpers every target defines: `dd_cbrt(x)`, `dd_round(x, up, one)`.
    numba: str = ""
    # LLVM IR (backends/llvm.py): instructions defining `{r}` from operands {0}, {1}, {2};
    # `{t}` is the float type, `{s}` its intrinsic suffix (f64), `{f}` its libm suffix ("", "f").
    # Temporaries are named `{r}.x`. No fast-math flags: they would merge 0.0 and -0.0, which
    # the IR keeps apart, and change libm results.
    ll: str = ""
    # SymPy (symbolic.py): the name of a SymPy function applied to the arguments, or an
    # expression in `sp`, `apply(f, *args)` (unevaluated unless every argument is a number)
    # and `select`, where {0} is an argument's expression, {0.cond} it as a condition and
    # {0.alt} it written without Piecewise. An op whose value is a condition gives a Boolean.
    sympy: str = ""
    sympy_alt: str = ""  # for an op exported as a Piecewise: its value without one
    symbol: str = ""  # its label in drawings (dot.py); the name when not given
    builtin: bool = False  # a builtin function of the language under the op's name
    pullback: Callable | None = None  # None: the op has derivative zero everywhere
    tangent: Callable | None = None
    commutative: bool = False
    # On static integers the value is an integer, kept as one (`range(max(0, i - 2), n)`).
    keeps_integers: bool = False
    # The pullback sends the cotangent to one argument with a select (LANGUAGE.md: a select
    # sends the derivative to the branch taken, min and max to the argument chosen).
    routes: bool = False
    # The pullback only copies or negates the cotangent: a zero cotangent gives exactly zero
    # parts. Every other pullback multiplies by partial derivatives, which may be infinite or
    # NaN where the node's value is not used (`sqrt'(-1)`), and 0 * nan is nan.
    copies: bool = False
    # How the op passes dependence on to second derivatives (sparsity.py's Hessian patterns):
    # "linear" (no second derivative), "route" (a select: its branches, not its condition),
    # "bilinear" (mul: pairs across its factors), "quotient" (div: linear in the numerator),
    # "nonlinear" (every pair of arguments; the safe guess). Ignored without a pullback.
    curvature: str = "nonlinear"


OPS: dict[str, Op] = {}


def _row(name: str, arity: int, **fields) -> None:
    fields.setdefault("symbol", name)
    OPS[name] = Op(name, arity, **fields)


def _b(x: bool) -> float:
    return 1.0 if x else 0.0


def _z(g, t):
    """A tangent that may be absent (None: zero) as a node."""
    return g.const(0.0) if t is None else t


def _py_sign(x):
    return 1.0 if x > 0 else (-1.0 if x < 0 else x + 0.0)  # +0.0 for -0.0, as NumPy; nan


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


def _math(name, pullback, ll, np_name=None, **more):
    """A unary row whose function has one name in `math`, NumPy (unless `np_name`) and SymPy."""
    _row(name, 1, fold=getattr(math, name), numpy=f"np.{np_name or name}({{0}})",
         numba=f"math.{name}({{0}})", sympy=name, ll=ll, pullback=pullback, builtin=True, **more)


def _recip_sqrt(g, x, one_minus: bool):
    """1 / sqrt(1 - x^2) (or 1 / sqrt(x^2 - 1)) as nodes: asin, acos, acosh."""
    sq = g.mul(x, x)
    return g.op("sqrt", g.sub(g.const(1.0), sq) if one_minus else g.sub(sq, g.const(1.0)))


# sign(0) is 0 (LANGUAGE.md), +0.0 for -0.0 as in NumPy, and sign(nan) is nan: `x + 0.0`
# where neither test holds.
_LL_SIGN = ("{r}.p = fcmp ogt {t} {0}, 0.0\n{r}.n = fcmp olt {t} {0}, 0.0\n"
            "{r}.z = fadd {t} {0}, 0.0\n"
            "{r}.m = select i1 {r}.n, {t} -1.0, {t} {r}.z\n"
            "{r} = select i1 {r}.p, {t} 1.0, {t} {r}.m")


# Leaves. `input` and `const` have no arguments; evaluators read their attributes.
_row("input", 0)
_row("const", 0)

# Unary ops ---------------------------------------------------------------------------------
_row("neg", 1, curvature="linear",
     fold=operator.neg, numpy="-({0})", numba="-({0})", sympy="-{0}", symbol="-x",
     ll="{r} = fneg {t} {0}", copies=True,
     pullback=lambda g, a, out, ct: (g.neg(ct),))
_math("exp", lambda g, a, out, ct: (g.mul(ct, out),), _intrinsic("exp"))
_math("log", lambda g, a, out, ct: (g.div(ct, a[0]),), _intrinsic("log"))
_row("log1p", 1, builtin=True, fold=math.log1p, numpy="np.log1p({0})", numba="math.log1p({0})",
     sympy="sp.log(1 + {0})", ll=_libm("log1p"),
     pullback=lambda g, a, out, ct: (g.div(ct, g.add(g.const(1.0), a[0])),))
_row("expm1", 1, builtin=True, fold=math.expm1, numpy="np.expm1({0})", numba="math.expm1({0})",
     sympy="apply(sp.exp, {0}) - 1", ll=_libm("expm1"),
     pullback=lambda g, a, out, ct: (g.mul(ct, g.add(out, g.const(1.0))),))
_row("log2", 1, builtin=True, fold=math.log2, numpy="np.log2({0})", numba="math.log2({0})",
     sympy="sp.log({0}, 2)", ll=_intrinsic("log2"),
     pullback=lambda g, a, out, ct: (g.div(ct, g.mul(a[0], g.const(LN2))),))
_row("log10", 1, builtin=True, fold=math.log10, numpy="np.log10({0})", numba="math.log10({0})",
     sympy="sp.log({0}, 10)", ll=_intrinsic("log10"),
     pullback=lambda g, a, out, ct: (g.div(ct, g.mul(a[0], g.const(LN10))),))
_row("sqrt", 1, builtin=True, fold=math.sqrt, numpy="np.sqrt({0})", numba="math.sqrt({0})",
     sympy="sp.sqrt({0})", ll=_intrinsic("sqrt"),
     pullback=lambda g, a, out, ct: (g.div(ct, g.mul(g.const(2.0), out)),))
# The real cube root, also of negative numbers; libdevice's on the GPU (x ** (1/3) is 60 ulps
# off at 1e300), NumPy's on the CPU tape.
_row("cbrt", 1, builtin=True,
     fold=getattr(math, "cbrt", lambda x: math.copysign(abs(x) ** (1.0 / 3.0), x)),
     numpy="np.cbrt({0})", numba="dd_cbrt({0})", sympy="sp.real_root({0}, 3)", ll=_libm("cbrt"),
     pullback=lambda g, a, out, ct: (g.div(ct, g.mul(g.const(3.0), g.mul(out, out))),))
_math("sin", lambda g, a, out, ct: (g.mul(ct, g.op("cos", a[0])),), _intrinsic("sin"))
_math("cos", lambda g, a, out, ct: (g.neg(g.mul(ct, g.op("sin", a[0]))),), _intrinsic("cos"))
_math("tan", lambda g, a, out, ct: (g.mul(ct, g.add(g.const(1.0), g.mul(out, out))),),
      _libm("tan"))
_math("asin", lambda g, a, out, ct: (g.div(ct, _recip_sqrt(g, a[0], True)),), _libm("asin"),
      np_name="arcsin")
_math("acos", lambda g, a, out, ct: (g.neg(g.div(ct, _recip_sqrt(g, a[0], True))),),
      _libm("acos"), np_name="arccos")
_math("atan", lambda g, a, out, ct: (g.div(ct, g.add(g.const(1.0), g.mul(a[0], a[0]))),),
      _libm("atan"), np_name="arctan")
_math("sinh", lambda g, a, out, ct: (g.mul(ct, g.op("cosh", a[0])),), _libm("sinh"))
_math("cosh", lambda g, a, out, ct: (g.mul(ct, g.op("sinh", a[0])),), _libm("cosh"))
_math("tanh", lambda g, a, out, ct: (g.mul(ct, g.sub(g.const(1.0), g.mul(out, out))),),
      _libm("tanh"))
_math("asinh", lambda g, a, out, ct: (
          g.div(ct, g.op("sqrt", g.add(g.mul(a[0], a[0]), g.const(1.0)))),),
      _libm("asinh"), np_name="arcsinh")
_math("acosh", lambda g, a, out, ct: (g.div(ct, _recip_sqrt(g, a[0], False)),), _libm("acosh"),
      np_name="arccosh")
_math("atanh", lambda g, a, out, ct: (g.div(ct, g.sub(g.const(1.0), g.mul(a[0], a[0]))),),
      _libm("atanh"), np_name="arctanh")
# abs'(0) = 0 (LANGUAGE.md): sign(0) is 0.
_row("abs", 1, curvature="linear",
     builtin=True, fold=abs, numpy="np.abs({0})", numba="abs({0})", sympy="Abs",
     ll=_intrinsic("fabs"), keeps_integers=True,
     pullback=lambda g, a, out, ct: (g.mul(ct, g.op("sign", a[0])),))
_row("sign", 1, builtin=True, fold=_py_sign, numpy="np.sign({0})",
     numba="({one} if {0} > 0 else (-{one} if {0} < 0 else {0} + {zero}))", sympy="sign",
     ll=_LL_SIGN, keeps_integers=True)
# floor and ceil as floats (Numba's math.floor gives an integer, wrong for nan and inf).
_row("floor", 1, builtin=True, fold=math.floor, numpy="np.floor({0})",
     numba="dd_round({0}, False, {one})", sympy="floor", ll=_intrinsic("floor"),
     keeps_integers=True)
_row("ceil", 1, builtin=True, fold=math.ceil, numpy="np.ceil({0})",
     numba="dd_round({0}, True, {one})", sympy="ceiling", ll=_intrinsic("ceil"),
     keeps_integers=True)
_row("erf", 1, builtin=True, fold=math.erf, numba="math.erf({0})", sympy="erf", ll=_libm("erf"),
     pullback=lambda g, a, out, ct: (
         g.mul(ct, g.mul(g.const(TWO_OVER_SQRT_PI), g.op("exp", g.neg(g.mul(a[0], a[0]))))),))
# lgamma is log|gamma(x)| (libm's lgamma: +inf at the poles 0, -1, -2, ...; SymPy's loggamma
# is complex for x < 0). Its derivative, digamma, is not in libm: `digamma_graph` builds it
# from other ops, so lgamma's derivatives of every order come from differentiating that graph.
_row("lgamma", 1, builtin=True, fold=py_lgamma, numba="math.lgamma({0})",
     sympy="sp.log(sp.Abs(apply(sp.gamma, {0})))", ll=_libm("lgamma"),
     pullback=lambda g, a, out, ct: (g.mul(ct, digamma_graph(g, a[0])),))
_row("not", 1, fold=lambda x: _b(x == 0), numpy="np.where({0} == 0, 1.0, 0.0)",
     numba="({one} if {0} == 0 else {zero})", sympy="sp.Not({0.cond})",
     ll=_truth("{r}.c = fcmp oeq {t} {0}, 0.0"))

# Binary ops --------------------------------------------------------------------------------
_row("add", 2, curvature="linear",
     fold=operator.add, numpy="({0} + {1})", numba="({0} + {1})", sympy="{0} + {1}",
     symbol="+", ll="{r} = fadd {t} {0}, {1}", commutative=True, copies=True,
     pullback=lambda g, a, out, ct: (ct, ct))
_row("sub", 2, curvature="linear",
     fold=operator.sub, numpy="({0} - {1})", numba="({0} - {1})", sympy="{0} - {1}",
     symbol="-", ll="{r} = fsub {t} {0}, {1}", copies=True,
     pullback=lambda g, a, out, ct: (ct, g.neg(ct)))
_row("mul", 2, curvature="bilinear",
     fold=operator.mul, numpy="({0} * {1})", numba="({0} * {1})", sympy="{0} * {1}",
     symbol="*", ll="{r} = fmul {t} {0}, {1}", commutative=True,
     pullback=lambda g, a, out, ct: (g.mul(ct, a[1]), g.mul(ct, a[0])))
_row("div", 2, curvature="quotient",
     fold=operator.truediv, numpy="({0} / {1})", numba="({0} / {1})",
     sympy="{0} / {1}", symbol="/", ll="{r} = fdiv {t} {0}, {1}",
     pullback=lambda g, a, out, ct: (g.div(ct, a[1]), g.neg(g.div(g.mul(ct, out), a[1]))))
# pow(x, y) of a negative x is, for an integer y, -pow(|x|, y) where y is odd and pow(|x|, y)
# where it is even, and otherwise NaN (x finite) or pow(|x|, y) (x = -0.0 or -inf): bit for
# bit, as C's pow computes it. Written so, the vector pow a loop calls (libmvec) takes its
# fast path, where a negative x sends every lane to the scalar pow (llsq's t ** j, t in
# [-1, 1]: 10 times as long). The sign is the sign bit's, so pow(-0.0, 3) is -0.0.
_POW_LL = ("{r}.a = call {t} @llvm.fabs.{s}({t} {0})\n"  # m = pow(|x|, y)
           "{r}.m = call {t} @llvm.pow.{s}({t} {r}.a, {t} {1})\n"
           "{r}.t = call {t} @llvm.trunc.{s}({t} {1})\n"  # i: y is an integer
           "{r}.i = fcmp oeq {t} {r}.t, {1}\n"
           "{r}.h = fmul {t} {1}, 0.5\n"  # o: y is odd
           "{r}.u = call {t} @llvm.trunc.{s}({t} {r}.h)\n"
           "{r}.o = fcmp une {t} {r}.u, {r}.h\n"
           "{r}.n = fneg {t} {r}.m\n"
           "{r}.s = select i1 {r}.o, {t} {r}.n, {t} {r}.m\n"
           "{r}.f = fcmp one {t} {r}.a, 0x7FF0000000000000\n"  # e: x finite, not 0
           "{r}.z = fcmp one {t} {0}, 0.0\n"
           "{r}.e = and i1 {r}.f, {r}.z\n"
           "{r}.r = select i1 {r}.e, {t} 0x7FF8000000000000, {t} {r}.m\n"
           "{r}.j = select i1 {r}.i, {t} {r}.s, {t} {r}.r\n"
           "{r}.g = call {t} @llvm.copysign.{s}({t} 1.0, {t} {0})\n"  # x: its sign bit
           "{r}.x = fcmp olt {t} {r}.g, 0.0\n"
           "{r} = select i1 {r}.x, {t} {r}.j, {t} {r}.m")

# A constant exponent (`x ** 2`, everywhere in a GMM) keeps the plain intrinsic: LLVM's
# optimiser turns it into products, and a graph too big to optimise (O0) would otherwise
# carry the 17 instructions above per power (GMM at d = 64, k = 50: past 60 s to compile).
POW_CONST_LL = _intrinsic("pow", 2)

def _pow_pullback(g, a, out, ct):
    dx = g.mul(ct, g.mul(a[1], g.pow(a[0], g.sub(a[1], g.const(1.0)))))  # y x**(y - 1)
    if g.is_const(a[1]):
        return dx, None
    zero = g.const(0.0)
    # A dynamic exponent (`a ** j` in a loop kept as a loop): d/dx is 0 where y = 0 (x**0 is
    # 1 at every x), not 0 * inf at x = 0; d/dy = x**y log x is 0 at x = 0 (its limit for
    # y > 0), not 0 * -inf.
    return (g.select(g.op("eq", a[1], zero), zero, dx),
            g.select(g.op("eq", a[0], zero), zero, g.mul(ct, g.mul(g.op("log", a[0]), out))))


_row("pow", 2, builtin=True, fold=math.pow, numpy="c_power({0}, {1})", numba="({0} ** {1})",
     sympy="sp.Pow({0}, {1})", symbol="**", ll=_POW_LL,
     pullback=lambda g, a, out, ct: _pow_pullback(g, a, out, ct))


def _atan2_pullback(g, a, out, ct):
    r2 = g.add(g.mul(a[0], a[0]), g.mul(a[1], a[1]))
    return g.div(g.mul(ct, a[1]), r2), g.neg(g.div(g.mul(ct, a[0]), r2))


_row("atan2", 2, builtin=True, fold=math.atan2, numpy="np.arctan2({0}, {1})",
     numba="math.atan2({0}, {1})", sympy="atan2", ll=_libm("atan2", 2), pullback=_atan2_pullback)
_row("hypot", 2, builtin=True, fold=math.hypot, numpy="np.hypot({0}, {1})",
     numba="math.hypot({0}, {1})", sympy="sp.sqrt({0}**2 + {1}**2)", ll=_libm("hypot", 2),
     # At the origin, where the gradient x/r is 0/0, it is taken as 0, as abs'(0) is.
     pullback=lambda g, a, out, ct: tuple(
         g.select(g.op("eq", out, g.const(0.0)), g.const(0.0), g.div(g.mul(ct, x), out))
         for x in a))


def _py_logaddexp(x, y):
    d = 0.0 if x == y else x - y  # 0 where equal, so inf and inf give inf, not inf - inf
    return (x if d > 0 else y) + math.log1p(math.exp(-abs(d)))


def _softmax_weights(g, a, b):
    """exp(a - y) and exp(b - y) for y = logaddexp(a, b): 1 / (1 + e) for the larger argument
    and e / (1 + e) for the other, e = exp(-|a - b|) <= 1. Neither overflows nor is 1 minus the
    other, so their derivatives (the Hessian) keep their accuracy where one weight is tiny."""
    x = g.sub(a, b)
    ahead = g.op("ge", x, g.const(0.0))
    e = g.op("exp", g.select(ahead, g.neg(x), x))  # |x| as a select: its slope is 1 at 0 too
    big = g.div(g.const(1.0), g.add(g.const(1.0), e))
    small = g.div(e, g.add(g.const(1.0), e))
    return g.select(ahead, big, small), g.select(ahead, small, big)


# logaddexp(a, b) = log(exp(a) + exp(b)) without overflow, as NumPy computes it: the larger
# argument plus log1p(exp(-|a - b|)); a + ln 2 where a == b. Its partial derivatives are the
# softmax weights of its arguments.
_row("logaddexp", 2, builtin=True, fold=_py_logaddexp, numpy="np.logaddexp({0}, {1})",
     numba="(({0} if {0} - {1} > {zero} else {1})"
           " + math.log1p(math.exp(-abs({zero} if {0} == {1} else {0} - {1}))))",
     sympy="sp.log(apply(sp.exp, {0}) + apply(sp.exp, {1}))",
     ll="{r}.e = fcmp oeq {t} {0}, {1}\n{r}.d = fsub {t} {0}, {1}\n"
        "{r}.z = select i1 {r}.e, {t} 0.0, {t} {r}.d\n{r}.g = fcmp ogt {t} {r}.d, 0.0\n"
        "{r}.m = select i1 {r}.g, {t} {0}, {t} {1}\n"
        "{r}.a = call {t} @llvm.fabs.{s}({t} {r}.z)\n{r}.n = fneg {t} {r}.a\n"
        "{r}.x = call {t} @llvm.exp.{s}({t} {r}.n)\n{r}.l = call {t} @log1p{f}({t} {r}.x)\n"
        "{r} = fadd {t} {r}.m, {r}.l",
     pullback=lambda g, a, out, ct: tuple(g.mul(ct, w) for w in _softmax_weights(g, *a)))

# min and max send the whole derivative to the first argument on a tie (LANGUAGE.md); SymPy's
# Min and Max are symmetric, so they are exported as a Piecewise.
for _name, _test, _cmp, _cls, _fn in (("min", "<=", "ole", "Le", operator.le),
                                      ("max", ">=", "oge", "Ge", operator.ge)):
    _row(_name, 2, fold=lambda x, y, f=_fn: x if f(x, y) else y,
         numpy=f"np.where({{0}} {_test} {{1}}, {{0}}, {{1}})",
         numba=f"({{0}} if {{0}} {_test} {{1}} else {{1}})",
         sympy=f"sp.Piecewise(({{0}}, compare('{_cls}', {{0.alt}}, {{1.alt}})), ({{1}}, True))",
         sympy_alt=f"apply(sp.{_name.title()}, {{0.alt}}, {{1.alt}})", ll=_pick(_cmp),
         keeps_integers=True, routes=True, curvature="linear",
         pullback=lambda g, a, out, ct, test=_cmp[1:]: (
             g.select(g.op(test, a[0], a[1]), ct, g.const(0.0)),
             g.select(g.op(test, a[0], a[1]), g.const(0.0), ct)),
         tangent=lambda g, a, out, t, test=_cmp[1:]: g.select(
             g.op(test, a[0], a[1]), _z(g, t[0]), _z(g, t[1])))
# Comparisons and logic give 1.0 or 0.0; their derivative is zero.
# LLVM: ordered tests are false on NaN, as Python's are; `!=` is unordered (true on NaN).
for _name, _sym, _fn, _cond, _cls in (
    ("lt", "<", operator.lt, "olt", "Lt"), ("le", "<=", operator.le, "ole", "Le"),
    ("gt", ">", operator.gt, "ogt", "Gt"), ("ge", ">=", operator.ge, "oge", "Ge"),
    ("eq", "==", operator.eq, "oeq", "Eq"), ("ne", "!=", operator.ne, "une", "Ne"),
):
    _row(_name, 2, fold=lambda x, y, f=_fn: _b(f(x, y)),
         numpy=f"np.where({{0}} {_sym} {{1}}, 1.0, 0.0)",
         numba=f"({{one}} if {{0}} {_sym} {{1}} else {{zero}})",
         sympy=f"compare('{_cls}', {{0.alt}}, {{1.alt}})", symbol=_sym,
         ll=_truth(f"{{r}}.c = fcmp {_cond} {{t}} {{0}}, {{1}}"),
         commutative=_name in ("eq", "ne"))
for _name, _np_op, _fn in (("and", "&", lambda p, q: p and q), ("or", "|", lambda p, q: p or q)):
    _row(_name, 2, fold=lambda x, y, f=_fn: _b(f(x != 0, y != 0)),
         numpy=f"np.where(({{0}} != 0) {_np_op} ({{1}} != 0), 1.0, 0.0)",
         numba=f"({{one}} if ({{0}} != 0 {_name} {{1}} != 0) else {{zero}})",
         sympy=f"sp.{_name.title()}({{0.cond}}, {{1.cond}})", ll=_logic(_name),
         commutative=True)

# select(c, a, b) is `a` where c != 0, else `b`. Its pullback routes the cotangent with a
# select, so a NaN or infinite derivative in the branch not taken never reaches the result.
_row("select", 3, curvature="route",
     fold=lambda c, a, b: a if c != 0 else b, numpy="np.where({0} != 0, {1}, {2})",
     numba="({1} if {0} != 0 else {2})", sympy="sp.Piecewise(({1}, {0.cond}), ({2}, True))",
     sympy_alt="select({0.cond}, {1.alt}, {2.alt})",
     ll="{r}.c = fcmp une {t} {0}, 0.0\n{r} = select i1 {r}.c, {t} {1}, {t} {2}",
     routes=True,
     pullback=lambda g, a, out, ct: (None, g.select(a[0], ct, g.const(0.0)),
                                     g.select(a[0], g.const(0.0), ct)),
     tangent=lambda g, a, out, t: g.select(a[0], _z(g, t[1]), _z(g, t[2])))


# The builtins of the language that are one op of the table, by arity (builtins.py).
UNARY_BUILTINS = [name for name, row in OPS.items() if row.builtin and row.arity == 1]
BINARY_BUILTINS = [name for name, row in OPS.items() if row.builtin and row.arity == 2]
COMPARISONS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
ARITHMETIC = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow"}
