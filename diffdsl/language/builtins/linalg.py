"""The linear-algebra builtins (docs/language.md, "Builtins"): `dot`, `transpose`, `trace`,
`minor`, and `det`, `inv`, `solve` and `cholesky`, composed of the op table's ops.

The composed ones are written out element by element in the value algebra, so their derivatives
of every order come from differentiating the composition. Pivoting is a select on magnitudes,
which routes derivatives exactly; `det` of a matrix up to 3x3 is the cofactor polynomial, exact
even where the matrix is singular.
"""

from __future__ import annotations

import numpy as np

from ...errors import IndexRangeError, ShapeError
from ..values import describe, is_array
from .common import Scalars, arity, static_int


def _need_matrix(value, call, what="a matrix"):
    if not is_array(value) or value.ndim != 2:
        raise ShapeError(f"{call.func}() needs {what}, got {describe(value)}", call.span)


def _need_vector(value, call):
    if not is_array(value) or value.ndim != 1:
        raise ShapeError(f"{call.func}() needs a vector, got {describe(value)}", call.span)


def _dot(v, args, call):
    arity(call, args, 2)
    u, w = args
    _need_vector(u, call)
    _need_vector(w, call)
    if u.shape != w.shape:
        raise ShapeError(f"dot() needs vectors of one length, got {list(u.shape)} and "
                         f"{list(w.shape)}", call.span)
    return v.dot_flat(list(u), list(w), call.span)


def _transpose(v, args, call):
    arity(call, args, 1)
    if not is_array(args[0]):
        raise ShapeError(f"transpose() needs an array, got {describe(args[0])}", call.span)
    return args[0].T.copy()


def _trace(v, args, call):
    arity(call, args, 1)
    a = args[0]
    _need_matrix(a, call, "a square matrix")
    if a.shape[0] != a.shape[1]:
        raise ShapeError(f"trace() needs a square matrix, got shape {list(a.shape)}", call.span)
    return v.reduce("sum", [a[i, i] for i in range(a.shape[0])], call.span)


def _minor(v, args, call):
    arity(call, args, 3)
    a = args[0]
    _need_matrix(a, call)
    i = static_int(args[1], call, 1)
    j = static_int(args[2], call, 2)
    rows, cols = a.shape
    for value, dim, k in ((i, rows, 1), (j, cols, 2)):
        if not -dim <= value < dim:
            raise IndexRangeError(f"minor() index {value} is out of range for size {dim}",
                                  call.args[k].span)
    if rows < 2 or cols < 2:
        raise ShapeError(f"minor() needs at least a 2x2 matrix, got shape {list(a.shape)}",
                         call.span)
    return np.delete(np.delete(a, i % rows, axis=0), j % cols, axis=1)


def _square(call, args, what="a square matrix"):
    A = args[0]
    if not is_array(A) or A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ShapeError(f"{call.func}() needs {what}, got {describe(A)}", call.span)
    return A.shape[0]


def _one_square(v, args, call, n_cubed: int):
    """The start of det, inv and cholesky: one argument, a square n x n matrix, whose
    elimination is charged as `n_cubed` * n**3 + 1 steps of unrolled work. Returns n and scalar
    arithmetic at the call."""
    arity(call, args, 1)
    n = _square(call, args)
    v.budget.charge(n_cubed * n ** 3 + 1, call.span, f"{call.func}()")
    return n, Scalars(v, call.span)


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
    n, a = _one_square(v, args, call, n_cubed=1)
    A = args[0]
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
    n, a = _one_square(v, args, call, n_cubed=2)
    M = [list(row) + [1.0 if i == j else 0.0 for j in range(n)]
         for i, row in enumerate(args[0])]
    X = _gauss_jordan(a, M, n)
    out = np.empty((n, n), dtype=object)
    for i in range(n):
        for j in range(n):
            out[i, j] = X[i][j]
    return out


def _solve(v, args, call):
    arity(call, args, 2)
    n = _square(call, args, "a square matrix as its first argument")
    b = args[1]
    if not is_array(b) or b.ndim not in (1, 2) or b.shape[0] != n:
        raise ShapeError(f"solve(A, b) needs b of shape [{n}] or [{n}, k] for A of shape "
                         f"[{n}, {n}], got {describe(b)}", call.span)
    a = Scalars(v, call.span)
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
    n, a = _one_square(v, args, call, n_cubed=1)
    A = args[0]
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


LINEAR_ALGEBRA = {
    "dot": _dot,
    "transpose": _transpose,
    "trace": _trace,
    "minor": _minor,
    "det": _det,
    "inv": _inv,
    "solve": _solve,
    "cholesky": _cholesky,
}
