"""The symmetric eigenproblem: `eigvalsh(A)` (the eigenvalues, ascending) and `eigh(A)` (the
eigenvectors as columns, in the same order), by cyclic Jacobi sweeps written out.

Both read the lower triangle of A, as NumPy's `eigh` does. Each rotation zeroes one
off-diagonal entry exactly, with its angle from the stable formula
`t = 2 a_pq / (d + sign(d) hypot(d, 2 a_pq))`, `d = a_qq - a_pp`; only where both `a_pq` and
`d` are 0 (the angle is undefined there) is the rotation the identity, chosen by a select.
No rotation is skipped for being small: a small rotation's derivative is not small, and it is
what carries the eigenvectors' derivatives. The number of sweeps is fixed by n (`sweeps`): the
off-diagonal part falls quadratically, and the count leaves the eigenvalues at rounding level
two sweeps early (measured on random, graded, clustered and repeated spectra up to n = 20),
a margin the derivatives, which converge a sweep behind, use.

Then a sorting network (odd-even transposition, compare-exchange by selects) puts the
eigenvalues in ascending order, columns with them, and each column is signed so that its entry
of largest magnitude (the first on a tie) is positive.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..values import describe, is_array
from .common import Scalars, arity


def sweeps(n: int) -> int:
    """Jacobi sweeps written out for an n x n matrix: one rotation diagonalises a 2 x 2."""
    if n <= 1:
        return 0
    if n == 2:
        return 1
    return 3 + 2 * math.ceil(math.log2(n))


def _rotate(a, M, V, p, q):
    """One Jacobi rotation in the (p, q) plane of the symmetric rows `M` (changed in place),
    accumulated into the columns of `V` (None: eigenvalues only)."""
    n = len(M)
    apq, d = M[p][q], a.sub(M[q][q], M[p][p])
    h = a.f("hypot", d, a.mul(2.0, apq))
    den = a.sel(a.cmp(">=", d, 0), a.add(d, h), a.sub(d, h))
    still = a.cmp("==", den, 0)  # a_pq = 0 and d = 0: no angle; leave the pair as it is
    t = a.sel(still, 0.0, a.div(a.mul(2.0, apq), den))
    c = a.div(1.0, a.f("sqrt", a.add(1.0, a.mul(t, t))))
    s = a.mul(t, c)

    def turn(x, y):  # as LAPACK's drot: 6 operations a pair
        return a.sub(a.mul(c, x), a.mul(s, y)), a.add(a.mul(s, x), a.mul(c, y))

    for r in range(n):
        if r in (p, q):
            continue
        M[r][p], M[r][q] = turn(M[r][p], M[r][q])
        M[p][r], M[q][r] = M[r][p], M[r][q]
    M[p][p] = a.sub(M[p][p], a.mul(t, apq))
    M[q][q] = a.add(M[q][q], a.mul(t, apq))
    # zero as a function of A near here (the rotation was chosen to zero it), so its
    # derivative is 0 too; where no angle was chosen it keeps its own (zero) value and
    # derivative
    M[p][q] = M[q][p] = a.sel(still, apq, 0.0)
    if V is not None:
        for r in range(n):
            V[r][p], V[r][q] = turn(V[r][p], V[r][q])


def _sort(a, w, V):
    """Odd-even transposition sort of `w` ascending (a network of n rounds, so static), the
    columns of `V` moved with their eigenvalues; a tie keeps the order."""
    n = len(w)
    for rnd in range(n):
        for i in range(rnd % 2, n - 1, 2):
            swap = a.cmp(">", w[i], w[i + 1])
            if swap is False:
                continue
            w[i], w[i + 1] = a.sel(swap, w[i + 1], w[i]), a.sel(swap, w[i], w[i + 1])
            if V is not None:
                for row in V:
                    row[i], row[i + 1] = (a.sel(swap, row[i + 1], row[i]),
                                          a.sel(swap, row[i], row[i + 1]))


def _signed(a, V):
    """Each column times the sign of its entry of largest magnitude (the first on a tie)."""
    n = len(V)
    for j in range(n):
        big = V[0][j]
        for r in range(1, n):
            big = a.sel(a.cmp(">", a.f("abs", V[r][j]), a.f("abs", big)), V[r][j], big)
        flip = a.cmp("<", big, 0)
        for r in range(n):
            V[r][j] = a.sel(flip, a.neg(V[r][j]), V[r][j])


def _jacobi(v, args, call, vectors: bool):
    arity(call, args, 1)
    A = args[0]
    if not is_array(A) or A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ShapeError(f"{call.func}() needs a square (symmetric) matrix, got {describe(A)}",
                         call.span)
    n = A.shape[0]
    per_rotation = 8 * n * (2 if vectors else 1) + 20
    v.budget.charge(sweeps(n) * n * (n - 1) // 2 * per_rotation + n * n * n + 1, call.span,
                    f"{call.func}()")
    a = Scalars(v, call.span)
    M = [[A[max(i, j), min(i, j)] for j in range(n)] for i in range(n)]
    V = [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)] if vectors else None
    for _ in range(sweeps(n)):
        for p in range(n - 1):
            for q in range(p + 1, n):
                _rotate(a, M, V, p, q)
    w = [M[i][i] for i in range(n)]
    _sort(a, w, V)
    if not vectors:
        out = np.empty(n, dtype=object)
        out[:] = w
        return out
    _signed(a, V)
    out = np.empty((n, n), dtype=object)
    for i in range(n):
        for j in range(n):
            out[i, j] = V[i][j]
    return out


def _eigvalsh(v, args, call):
    return _jacobi(v, args, call, vectors=False)


def _eigh(v, args, call):
    return _jacobi(v, args, call, vectors=True)


EIGEN = {"eigvalsh": _eigvalsh, "eigh": _eigh}
