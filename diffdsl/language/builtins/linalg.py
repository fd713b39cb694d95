"""The linear-algebra builtins (docs/language.md, "Builtins"): `dot`, `transpose`, `trace`,
`minor`, `diag`, `outer`, and `det`, `logabsdet`, `signdet`, `logdet`, `inv`, `solve`,
`solve_triangular`, `solve_triangular_upper` and `cholesky`, composed of the op table's ops
(the eigenproblem is in eigen.py, the matrix exponential in expm.py).

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


def _two_vectors(call, args):
    arity(call, args, 2)
    for x in args:
        _need_vector(x, call)
    return args


def _dot(v, args, call):
    u, w = _two_vectors(call, args)
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
    return _without(a, i % rows, j % cols)


def _without(a, i: int, j: int):
    """`a` without row i and column j, as `np.delete` twice gives it but in a third of its
    time: the determinant by minors takes n·2ⁿ⁻¹ minors."""
    rest = np.concatenate((a[:i], a[i + 1:]))
    return np.concatenate((rest[:, :j], rest[:, j + 1:]), axis=1)


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


def _lu_pivots(a, A):
    """LU with partial pivoting by selects on magnitudes: the sign of the row permutation and
    the pivots, whose product is det(A). A zero pivot (the whole column below is zero) gives
    multipliers 0, so the rest stays finite and the product is 0, not NaN."""
    n = len(A)
    M = [list(row) for row in A]
    sign = 1.0
    pivots = []
    for k in range(n):
        sign = _pivot(a, M, k, k, sign)
        p = M[k][k]
        pivots.append(p)
        zero = a.cmp("==", p, 0)
        for i in range(k + 1, n):
            f = a.sel(zero, 0.0, a.div(M[i][k], p))
            for j in range(k + 1, n):
                M[i][j] = a.sub(M[i][j], a.mul(f, M[k][j]))
    return sign, pivots


def _det(v, args, call):
    n, a = _one_square(v, args, call, n_cubed=1)
    A = args[0]
    if n == 0:
        return 1
    if n <= 3:  # cofactor expansion: a polynomial, exact derivatives even at singular A
        return _det_small(a, [list(row) for row in A])
    sign, pivots = _lu_pivots(a, A)
    det = 1.0
    for p in pivots:
        det = a.mul(det, p)
    return a.mul(sign, det)


def _logabsdet(v, args, call):
    """log |det A| as the sum of log |pivot|: no product is formed, so nothing over- or
    underflows; a singular A gives -inf."""
    n, a = _one_square(v, args, call, n_cubed=1)
    total = 0.0
    for p in _lu_pivots(a, args[0])[1]:
        total = a.add(total, a.f("log", a.f("abs", p)))
    return total


def _signdet(v, args, call):
    """The sign of det A (1, -1, or 0 where A is singular) from the same pivots as logabsdet,
    so that signdet(A) * exp(logabsdet(A)) is det(A) where det itself would overflow."""
    n, a = _one_square(v, args, call, n_cubed=1)
    sign, pivots = _lu_pivots(a, args[0])
    for p in pivots:
        sign = a.mul(sign, a.f("sign", p))
    return sign


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
    return _columns(_gauss_jordan(a, M, n), (n, n))


def _rhs(v, args, call, cost):
    """The n x n matrix and the right-hand side b (a vector or an n x k matrix) of a solve,
    with b as n x k; charges `cost(n, k)` steps."""
    arity(call, args, 2)
    n = _square(call, args, "a square matrix as its first argument")
    b = args[1]
    if not is_array(b) or b.ndim not in (1, 2) or b.shape[0] != n:
        raise ShapeError(f"{call.func}(A, b) needs b of shape [{n}] or [{n}, k] for A of shape "
                         f"[{n}, {n}], got {describe(b)}", call.span)
    B = b.reshape(n, -1)
    v.budget.charge(cost(n, B.shape[1]) + 1, call.span, f"{call.func}()")
    return n, B, Scalars(v, call.span)


def _columns(X, shape):
    out = np.empty((len(X), len(X[0]) if X else 0), dtype=object)
    for i, row in enumerate(X):
        for j, x in enumerate(row):
            out[i, j] = x
    return out.reshape(shape)


def _solve(v, args, call):
    n, B, a = _rhs(v, args, call, lambda n, k: n * n * (n + k))
    M = [list(args[0][i]) + list(B[i]) for i in range(n)]
    return _columns(_gauss_jordan(a, M, n), args[1].shape)


def _substitute(a, T, B, order):
    """Solve T X = B by substitution over the rows in `order` (forward for a lower triangular
    T, backward for an upper one), reading only the triangle that `order` reaches: each row i
    uses the entries of T at the rows solved before it."""
    X = [None] * len(order)
    for at, i in enumerate(order):
        row = []
        for j in range(B.shape[1]):
            s = B[i, j]
            for r in order[:at]:
                s = a.sub(s, a.mul(T[i, r], X[r][j]))
            row.append(a.div(s, T[i, i]))
        X[i] = row
    return X


def _solve_triangular(upper):
    def fn(v, args, call):
        n, B, a = _rhs(v, args, call, lambda n, k: n * n * k)
        order = list(range(n - 1, -1, -1)) if upper else list(range(n))
        return _columns(_substitute(a, args[0], B, order), args[1].shape)
    return fn


def _cholesky_factor(a, A, n):
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


def _cholesky(v, args, call):
    n, a = _one_square(v, args, call, n_cubed=1)
    return _cholesky_factor(a, args[0], n)


def _logdet(v, args, call):
    """log det A of a positive definite A: twice the sum of the logs of its Cholesky factor's
    diagonal (NaN where A is not positive definite, as cholesky is)."""
    n, a = _one_square(v, args, call, n_cubed=1)
    L = _cholesky_factor(a, args[0], n)
    total = 0.0
    for i in range(n):
        total = a.add(total, a.f("log", L[i, i]))
    return a.mul(2.0, total)


def _diag(v, args, call):
    """As NumPy's diag: a vector gives the square matrix with it on the diagonal, a matrix
    gives its diagonal (of min(rows, cols) elements)."""
    arity(call, args, 1)
    x = args[0]
    if is_array(x) and x.ndim == 1:
        n = x.shape[0]
        v.check_size(n * n, call.span, "diag()")
        out = np.empty((n, n), dtype=object)
        out.fill(0.0)
        for i in range(n):
            out[i, i] = x[i]
        return out
    if is_array(x) and x.ndim == 2:
        return np.diagonal(x).copy()
    raise ShapeError(f"diag() needs a vector or a matrix, got {describe(x)}", call.span)


def _outer(v, args, call):
    u, w = _two_vectors(call, args)
    v.check_size(u.size * w.size, call.span, "outer()")
    v.budget.charge(u.size * w.size, call.span, "outer()")
    a = Scalars(v, call.span)
    out = np.empty((u.size, w.size), dtype=object)
    for i in range(u.size):
        for j in range(w.size):
            out[i, j] = a.mul(u[i], w[j])
    return out


LINEAR_ALGEBRA = {
    "dot": _dot,
    "transpose": _transpose,
    "trace": _trace,
    "minor": _minor,
    "det": _det,
    "logabsdet": _logabsdet,
    "signdet": _signdet,
    "logdet": _logdet,
    "inv": _inv,
    "solve": _solve,
    "solve_triangular": _solve_triangular(upper=False),
    "solve_triangular_upper": _solve_triangular(upper=True),
    "cholesky": _cholesky,
    "diag": _diag,
    "outer": _outer,
}
