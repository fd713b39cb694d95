"""The builtin functions of the language (LANGUAGE.md, "Builtins").

Each entry takes the value algebra, the evaluated arguments and the call node (for spans),
and returns a value. Elementwise builtins map over arrays; the reductions take one array or,
through `GenCall`, a generator.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ArityError, ShapeError, StaticValueError, TypeMismatchError
from .ops import BINARY_BUILTINS, UNARY_BUILTINS, digamma_graph
from .values import Dyn, describe, is_array, memo_key


def _arity(call, args, *counts):
    if len(args) not in counts:
        want = " or ".join(str(c) for c in counts)
        plural = "" if counts == (1,) else "s"
        raise ArityError(f"{call.func}() takes {want} argument{plural}, got {len(args)}",
                         call.span)


def _unary(name):
    def fn(v, args, call):
        _arity(call, args, 1)
        return v.apply(name, args, call.span)
    return fn


def _binary(name):
    def fn(v, args, call):
        _arity(call, args, 2)
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


def _need_matrix(value, call, what="a matrix"):
    if not is_array(value) or value.ndim != 2:
        raise ShapeError(f"{call.func}() needs {what}, got {describe(value)}", call.span)


def _need_vector(value, call):
    if not is_array(value) or value.ndim != 1:
        raise ShapeError(f"{call.func}() needs a vector, got {describe(value)}", call.span)


def _static_int(value, call, k):
    if isinstance(value, Dyn):
        raise StaticValueError(f"argument {k + 1} of {call.func}() must be static",
                               call.args[k].span)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeMismatchError(f"argument {k + 1} of {call.func}() must be an integer, got "
                                f"{describe(value)}", call.args[k].span)
    return value


def _dot(v, args, call):
    _arity(call, args, 2)
    u, w = args
    _need_vector(u, call)
    _need_vector(w, call)
    if u.shape != w.shape:
        raise ShapeError(f"dot() needs vectors of one length, got {list(u.shape)} and "
                         f"{list(w.shape)}", call.span)
    return v.dot_flat(list(u), list(w), call.span)


def _transpose(v, args, call):
    _arity(call, args, 1)
    if not is_array(args[0]):
        raise ShapeError(f"transpose() needs an array, got {describe(args[0])}", call.span)
    return args[0].T.copy()


def _trace(v, args, call):
    _arity(call, args, 1)
    a = args[0]
    _need_matrix(a, call, "a square matrix")
    if a.shape[0] != a.shape[1]:
        raise ShapeError(f"trace() needs a square matrix, got shape {list(a.shape)}", call.span)
    return v.reduce("sum", [a[i, i] for i in range(a.shape[0])], call.span)


def _minor(v, args, call):
    _arity(call, args, 3)
    a = args[0]
    _need_matrix(a, call)
    i = _static_int(args[1], call, 1)
    j = _static_int(args[2], call, 2)
    rows, cols = a.shape
    for value, dim, k in ((i, rows, 1), (j, cols, 2)):
        if not -dim <= value < dim:
            from .errors import IndexRangeError
            raise IndexRangeError(f"minor() index {value} is out of range for size {dim}",
                                  call.args[k].span)
    if rows < 2 or cols < 2:
        raise ShapeError(f"minor() needs at least a 2x2 matrix, got shape {list(a.shape)}",
                         call.span)
    return np.delete(np.delete(a, i % rows, axis=0), j % cols, axis=1)


def _filled(fill):
    def fn(v, args, call):
        if not args:
            raise ArityError(f"{call.func}() takes at least 1 dimension", call.span)
        dims = [_static_int(a, call, k) for k, a in enumerate(args)]
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
    _arity(call, args, 1)
    n = _static_int(args[0], call, 0)
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
        _arity(call, args, 1)
        a = args[0]
        if not is_array(a) or a.ndim <= axis:
            raise ShapeError(f"{call.func}() needs {what}, got {describe(a)}", call.span)
        return int(a.shape[axis])
    return fn


def _size(v, args, call):
    _arity(call, args, 1)
    return int(args[0].size) if is_array(args[0]) else 1


# ---------------------------------------------------------------------------------------------
# Builtins composed of the op table's ops (docs/language.md, "Builtins"): their derivatives of
# every order come from differentiating the composition, which selects route exactly.


class _Alg:
    """Scalar arithmetic on static numbers and `Dyn`s: static operands fold."""

    def __init__(self, v, span):
        self.v, self.span = v, span

    def add(self, a, b):
        return self.v.scalar_arith("+", a, b, self.span)

    def sub(self, a, b):
        return self.v.scalar_arith("-", a, b, self.span)

    def mul(self, a, b):
        return self.v.scalar_arith("*", a, b, self.span)

    def div(self, a, b):
        return self.v.scalar_arith("/", a, b, self.span)

    def neg(self, a):
        return self.v.op("neg", a) if isinstance(a, Dyn) else -a

    def f(self, name, *xs):
        return self.v.apply(name, list(xs), self.span)

    def cmp(self, op, a, b):
        return self.v.compare(op, a, b, self.span)

    def sel(self, c, a, b):
        """`a` where `c` holds (nonzero), else `b`."""
        if not isinstance(c, Dyn):
            return a if c else b
        if not isinstance(a, Dyn) and not isinstance(b, Dyn) and type(a) is type(b) \
                and memo_key(a) == memo_key(b):
            return a
        return self.v.op("select", c, a, b)


def _elementwise(fn):
    """A builtin of scalars mapped over arrays of one shape (scalars broadcast)."""
    def builtin(v, args, call):
        _arity(call, args, fn.__code__.co_argcount - 1)
        alg = _Alg(v, call.span)
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
    # logsumexp: shifted by the max, so no exp overflows; a max of +-inf shifts by 0 instead
    # (all -inf gives -inf, any +inf gives +inf, not NaN).
    for item in items:
        if is_array(item):
            raise ShapeError(f"{name}() works on scalars, got {describe(item)}", span)
    a = _Alg(v, span)
    v.budget.charge(3 * len(items), span, f"{name}()")
    m = v.reduce("max", items, span)
    m = a.sel(a.cmp("<", a.f("abs", m), math.inf), m, 0.0)
    total = 0
    for x in items:
        total = a.add(total, a.f("exp", a.sub(x, m)))
    return a.add(m, a.f("log", total))


def _reducer(name):
    def fn(v, args, call):
        return reduce_items(v, name, _items(v, args, call), call.span)
    return fn


def _softmax(v, args, call):
    _arity(call, args, 1)
    x = args[0]
    if not is_array(x) or x.size == 0:
        raise ShapeError(f"softmax() needs a non-empty array, got {describe(x)}", call.span)
    a = _Alg(v, call.span)
    v.budget.charge(3 * x.size, call.span, "softmax()")
    m = v.reduce("max", list(x.flat), call.span)
    m = a.sel(a.cmp("<", a.f("abs", m), math.inf), m, 0.0)
    e = [a.f("exp", a.sub(xi, m)) for xi in x.flat]
    total = 0
    for ei in e:
        total = a.add(total, ei)
    out = np.empty(x.size, dtype=object)
    for k, ei in enumerate(e):
        out[k] = a.div(ei, total)
    return out.reshape(x.shape)


def _norm(v, args, call):
    _arity(call, args, 1, 2)
    x = args[0]
    items = list(x.flat) if is_array(x) else [x]
    p = 2 if len(args) == 1 else args[1]
    if isinstance(p, Dyn) or is_array(p) or isinstance(p, bool) or p not in (1, 2, math.inf):
        raise TypeMismatchError(f"norm(v, p) takes p = 1, 2 or inf, got {describe(p)}",
                                call.args[1].span if len(args) == 2 else call.span)
    a = _Alg(v, call.span)
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


def _square(call, args, what="a square matrix"):
    A = args[0]
    if not is_array(A) or A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ShapeError(f"{call.func}() needs {what}, got {describe(A)}", call.span)
    return A.shape[0]


def _pivot(a, M, k, first_col, sign=None):
    """Partial pivoting on column k: row k takes, by selects, the row r >= k whose entry in
    column k has the largest magnitude (the first such on a tie); `M` is a list of row lists,
    changed in place. Returns the sign of the permutation applied, flipped at each swap."""
    n = len(M)
    for r in range(k + 1, n):
        swap = a.cmp(">", a.f("abs", M[r][k]), a.f("abs", M[k][k]))
        if swap is False:
            continue
        for j in range(first_col, len(M[k])):
            top, low = M[k][j], M[r][j]
            M[k][j] = a.sel(swap, low, top)
            M[r][j] = a.sel(swap, top, low)
        if sign is not None:
            sign = a.sel(swap, a.neg(sign), sign)
    return sign


def _det(v, args, call):
    _arity(call, args, 1)
    n = _square(call, args)
    A = args[0]
    a = _Alg(v, call.span)
    v.budget.charge(n ** 3 + 1, call.span, "det()")
    if n == 0:
        return 1
    if n <= 3:  # cofactor expansion: a polynomial, exact derivatives even at singular A
        return _det_small(a, [list(row) for row in A])
    # LU with partial pivoting by selects on magnitudes: det = sign * prod(pivots). A zero
    # pivot (the whole column below is zero) gives multipliers 0, so det is 0, not NaN.
    M = [list(row) for row in A]
    sign = 1.0
    det = 1.0
    for k in range(n):
        sign = _pivot(a, M, k, k, sign)
        p = M[k][k]
        det = a.mul(det, p)
        zero = a.cmp("==", p, 0)
        for i in range(k + 1, n):
            f = a.sel(zero, 0.0, a.div(M[i][k], p))
            for j in range(k + 1, n):
                M[i][j] = a.sub(M[i][j], a.mul(f, M[k][j]))
    return a.mul(sign, det)


def _det_small(a, M):
    n = len(M)
    if n == 1:
        return M[0][0]
    if n == 2:
        return a.sub(a.mul(M[0][0], M[1][1]), a.mul(M[0][1], M[1][0]))
    total = 0
    for j in range(3):
        j1, j2 = (j + 1) % 3, (j + 2) % 3  # cyclic: the signs of the cofactors come out right
        cof = a.sub(a.mul(M[1][j1], M[2][j2]), a.mul(M[1][j2], M[2][j1]))
        total = a.add(total, a.mul(M[0][j], cof))
    return total


def _gauss_jordan(a, M, n):
    """Reduce the n x (n + m) rows `M` to [I | X] by Gauss-Jordan elimination with partial
    pivoting (selects on magnitudes); returns the last m columns, X = A^-1 B."""
    width = len(M[0])
    for k in range(n):
        _pivot(a, M, k, k)
        p = M[k][k]
        for j in range(k + 1, width):
            M[k][j] = a.div(M[k][j], p)
        for i in range(n):
            if i == k:
                continue
            f = M[i][k]
            for j in range(k + 1, width):
                M[i][j] = a.sub(M[i][j], a.mul(f, M[k][j]))
    return [row[n:] for row in M]


def _inv(v, args, call):
    _arity(call, args, 1)
    n = _square(call, args)
    a = _Alg(v, call.span)
    v.budget.charge(2 * n ** 3 + 1, call.span, "inv()")
    M = [list(row) + [1.0 if i == j else 0.0 for j in range(n)]
         for i, row in enumerate(args[0])]
    X = _gauss_jordan(a, M, n)
    out = np.empty((n, n), dtype=object)
    for i in range(n):
        for j in range(n):
            out[i, j] = X[i][j]
    return out


def _solve(v, args, call):
    _arity(call, args, 2)
    n = _square(call, args, "a square matrix as its first argument")
    b = args[1]
    if not is_array(b) or b.ndim not in (1, 2) or b.shape[0] != n:
        raise ShapeError(f"solve(A, b) needs b of shape [{n}] or [{n}, k] for A of shape "
                         f"[{n}, {n}], got {describe(b)}", call.span)
    a = _Alg(v, call.span)
    B = b.reshape(n, -1)
    v.budget.charge(n * n * (n + B.shape[1]) + 1, call.span, "solve()")
    M = [list(args[0][i]) + list(B[i]) for i in range(n)]
    X = _gauss_jordan(a, M, n)
    out = np.empty(B.shape, dtype=object)
    for i in range(n):
        for j in range(B.shape[1]):
            out[i, j] = X[i][j]
    return out.reshape(b.shape)


def _cholesky(v, args, call):
    _arity(call, args, 1)
    n = _square(call, args)
    A = args[0]
    a = _Alg(v, call.span)
    v.budget.charge(n ** 3 + 1, call.span, "cholesky()")
    L = np.empty((n, n), dtype=object)
    L.fill(0.0)
    for j in range(n):
        s = A[j, j]
        for k in range(j):
            s = a.sub(s, a.mul(L[j, k], L[j, k]))
        L[j, j] = a.f("sqrt", s)
        for i in range(j + 1, n):
            s = A[i, j]
            for k in range(j):
                s = a.sub(s, a.mul(L[i, k], L[j, k]))
            L[i, j] = a.div(s, L[j, j])
    return L


BUILTINS = {name: _unary(name) for name in UNARY_BUILTINS}
BUILTINS.update({name: _binary(name) for name in BINARY_BUILTINS})
BUILTINS.update({name: _reduction(name) for name in ("sum", "prod", "min", "max")})
BUILTINS.update({
    "dot": _dot,
    "transpose": _transpose,
    "trace": _trace,
    "minor": _minor,
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
    "det": _det,
    "inv": _inv,
    "solve": _solve,
    "cholesky": _cholesky,
})

# Reductions that also take a generator: `mean(x[i] ** 2 for i in range(n))`.
GENERATOR_BUILTINS = ("sum", "prod", "min", "max", "mean", "logsumexp")
