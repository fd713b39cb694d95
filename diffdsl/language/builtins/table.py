"""The builtin functions of the language (LANGUAGE.md, "Builtins"): the table `BUILTINS`.

Each entry takes the value algebra, the evaluated arguments and the call node (for spans),
and returns a value. Here: the elementwise builtins, which map over arrays (the op table's own
and those composed of its ops), the reductions, which take one array or, through `GenCall`, a
generator, and the builtins that make arrays or read their shapes. The linear-algebra builtins
are in linalg.py, what both share in common.py.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ArityError, ShapeError, TypeMismatchError
from ...graph.ops import BINARY_BUILTINS, UNARY_BUILTINS, digamma_graph
from ..values import Dyn, describe, is_array
from .common import Scalars, arity, static_int
from .eigen import EIGEN
from .expm import EXPM
from .linalg import LINEAR_ALGEBRA


def _unary(name):
    def fn(v, args, call):
        arity(call, args, 1)
        return v.apply(name, args, call.span)
    return fn


def _binary(name):
    def fn(v, args, call):
        arity(call, args, 2)
        return v.apply(name, args, call.span)
    return fn


def _reduction(name):
    def fn(v, args, call):
        if len(args) == 1:
            value = args[0]
            items = list(value.flat) if is_array(value) else [value]
            return v.reduce(name, items, call.span)
        if name in ("min", "max") and len(args) >= 2:
            return v.reduce(name, args, call.span)
        raise ArityError(f"{name}() takes 1 argument (an array or a generator)"
                         + (" or several scalars" if name in ("min", "max") else "")
                         + f", got {len(args)}", call.span)
    return fn


def _filled(fill):
    def fn(v, args, call):
        if not args:
            raise ArityError(f"{call.func}() takes at least 1 dimension", call.span)
        dims = [static_int(a, call, k) for k, a in enumerate(args)]
        for k, d in enumerate(dims):
            if d < 0:
                raise ShapeError(f"{call.func}() dimensions cannot be negative, got {d}",
                                 call.args[k].span)
        v.check_rank(len(dims), call.span, f"{call.func}()")
        v.check_size(math.prod(dims), call.span, f"{call.func}()")
        out = np.empty(dims, dtype=object)
        out.fill(fill)
        return out
    return fn


def _eye(v, args, call):
    arity(call, args, 1)
    n = static_int(args[0], call, 0)
    if n < 0:
        raise ShapeError(f"eye() size cannot be negative, got {n}", call.args[0].span)
    v.check_size(n * n, call.span, "eye()")
    out = np.empty((n, n), dtype=object)
    out.fill(0.0)
    for i in range(n):
        out[i, i] = 1.0
    return out


def _dim(axis, what):
    def fn(v, args, call):
        arity(call, args, 1)
        a = args[0]
        if not is_array(a) or a.ndim <= axis:
            raise ShapeError(f"{call.func}() needs {what}, got {describe(a)}", call.span)
        return int(a.shape[axis])
    return fn


def _size(v, args, call):
    arity(call, args, 1)
    return int(args[0].size) if is_array(args[0]) else 1


# ---------------------------------------------------------------------------------------------
# Builtins composed of the op table's ops (docs/language.md, "Builtins"): their derivatives of
# every order come from differentiating the composition, which selects route exactly.


def _elementwise(fn):
    """A builtin of scalars mapped over arrays of one shape (scalars broadcast)."""
    def builtin(v, args, call):
        arity(call, args, fn.__code__.co_argcount - 1)
        alg = Scalars(v, call.span)
        return v.elementwise(lambda *xs: fn(alg, *xs), args, call.span, f"{call.func}()")
    return builtin


def _sigmoid(a, x):
    # e = exp(-|x|) never overflows; min(-x, x) is -|x| with the derivative of -x at 0, the
    # side the select takes there.
    e = a.f("exp", a.f("min", a.neg(x), x))
    return a.sel(a.cmp(">=", x, 0), a.div(1.0, a.add(1.0, e)), a.div(e, a.add(1.0, e)))


def _softplus(a, x):
    # max(x, 0) + log1p(exp(-|x|)); on a tie at 0 both max and min(-x, x) follow the x >= 0
    # side, where the formula is x + log1p(exp(-x)) exactly.
    return a.add(a.f("max", x, 0), a.f("log1p", a.f("exp", a.f("min", a.neg(x), x))))


def _digamma(a, x):
    v = a.v
    return v.dyn(digamma_graph(v.b, v.node(x)))


def _where(a, c, x, y):
    return a.sel(c, x, y)  # a condition per element: nonzero is true, as in `if`


def _clip(a, x, lo, hi):
    return a.f("min", a.f("max", x, lo), hi)


def _items(v, args, call):
    """The elements a reduction works on: of one array (or scalar)."""
    if len(args) != 1:
        raise ArityError(f"{call.func}() takes 1 argument (an array or a generator), got "
                         f"{len(args)}", call.span)
    value = args[0]
    return list(value.flat) if is_array(value) else [value]


def reduce_items(v, name: str, items: list, span):
    """A reduction over a list of values (of an array or a generator)."""
    if name in ("sum", "prod", "min", "max"):
        return v.reduce(name, items, span)
    if not items:
        raise ShapeError(f"{name}() of an empty sequence", span)
    if name == "mean":
        return v.arith("/", v.reduce("sum", items, span), len(items), span)
    # logsumexp: shifted by the max rounded down (Scalars.shift)
    for item in items:
        if is_array(item):
            raise ShapeError(f"{name}() works on scalars, got {describe(item)}", span)
    a = Scalars(v, span)
    v.budget.charge(3 * len(items), span, f"{name}()")
    m = a.shift(v.reduce("max", items, span))
    total = 0
    for x in items:
        total = a.add(total, a.f("exp", a.sub(x, m)))
    return a.add(m, a.f("log", total))


def reduce_along(v, name: str, value, axis: int, span):
    """`name(value, axis=axis)` (axis from 0, in range): the array without that axis, each
    element the reduction of the elements along it, in order, as `name(row)` reduces a row."""
    moved = np.moveaxis(value, axis, -1)
    rest = moved.shape[:-1]
    out = np.empty(rest, dtype=object)
    for at in np.ndindex(*rest):
        out[at] = reduce_items(v, name, list(moved[at]), span)
    return out if rest else out[()]


def _reducer(name):
    def fn(v, args, call):
        return reduce_items(v, name, _items(v, args, call), call.span)
    return fn


def _softmax(v, args, call):
    arity(call, args, 1)
    x = args[0]
    if not is_array(x) or x.size == 0:
        raise ShapeError(f"softmax() needs a non-empty array, got {describe(x)}", call.span)
    a = Scalars(v, call.span)
    v.budget.charge(3 * x.size, call.span, "softmax()")
    m = a.shift(v.reduce("max", list(x.flat), call.span))
    e = [a.f("exp", a.sub(xi, m)) for xi in x.flat]
    total = 0
    for ei in e:
        total = a.add(total, ei)
    out = np.empty(x.size, dtype=object)
    for k, ei in enumerate(e):
        out[k] = a.div(ei, total)
    return out.reshape(x.shape)


def _norm(v, args, call):
    arity(call, args, 1, 2)
    x = args[0]
    items = list(x.flat) if is_array(x) else [x]
    p = 2 if len(args) == 1 else args[1]
    if isinstance(p, Dyn) or is_array(p) or isinstance(p, bool) or p not in (1, 2, math.inf):
        raise TypeMismatchError(f"norm(v, p) takes p = 1, 2 or inf, got {describe(p)}",
                                call.args[1].span if len(args) == 2 else call.span)
    a = Scalars(v, call.span)
    v.budget.charge(len(items), call.span, "norm()")
    if not items:
        return 0.0
    if p == 1:
        return v.reduce("sum", [a.f("abs", e) for e in items], call.span)
    if p == math.inf:
        return v.reduce("max", [a.f("abs", e) for e in items], call.span)
    # hypot(hypot(x0, x1), x2)...: no overflow or underflow of squares; the derivative at the
    # zero vector is 0, as hypot's is.
    total = a.f("abs", items[0])
    for e in items[1:]:
        total = a.f("hypot", total, e)
    return total


BUILTINS = {name: _unary(name) for name in UNARY_BUILTINS}
BUILTINS.update({name: _binary(name) for name in BINARY_BUILTINS})
BUILTINS.update({name: _reduction(name) for name in ("sum", "prod", "min", "max")})
BUILTINS.update(LINEAR_ALGEBRA)
BUILTINS.update(EIGEN)
BUILTINS.update(EXPM)
BUILTINS.update({
    "zeros": _filled(0.0),
    "ones": _filled(1.0),
    "eye": _eye,
    "len": _dim(0, "an array"),
    "rows": _dim(0, "an array"),
    "cols": _dim(1, "a matrix or an array of rank 2 or more"),
    "size": _size,
    "sigmoid": _elementwise(_sigmoid),
    "softplus": _elementwise(_softplus),
    "digamma": _elementwise(_digamma),
    "where": _elementwise(_where),
    "clip": _elementwise(_clip),
    "mean": _reducer("mean"),
    "logsumexp": _reducer("logsumexp"),
    "softmax": _softmax,
    "norm": _norm,
})

# Builtins applied element by element (over arrays broadcast to one shape).
ELEMENTWISE = frozenset(
    {name for name in UNARY_BUILTINS} | {name for name in BINARY_BUILTINS if name not in
                                         ("min", "max")}
    | {"sigmoid", "softplus", "digamma", "where", "clip"})

# Reductions that also take a generator: `mean(x[i] ** 2 for i in range(n))`.
GENERATOR_BUILTINS = ("sum", "prod", "min", "max", "mean", "logsumexp")
