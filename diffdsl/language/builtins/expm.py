"""The matrix exponential `expm(A)`: scaling and squaring with the degree-13 Padé approximant
(Higham 2005, "The scaling and squaring method for the matrix exponential revisited").

The number of squarings s = max(0, ceil(log2(|A|_1 / theta_13))) depends on the data, and the
graph is static, so all `MAX_SQUARINGS` squarings are written out and the k-th one is taken by
a select where |A|_1 > theta_13 * 2^k; A is scaled by a product of selects of 1 and 1/2. Both
are piecewise constant in A, so the derivatives (of every order) are exactly those of the
approximant r_13(A / 2^s)^(2^s) at the s chosen, which is how Al-Mohy and Higham compute the
Fréchet derivative of expm (2009). A matrix past |A|_1 = theta_13 * 2^MAX_SQUARINGS (about
3.5e5) gives NaN rather than an inaccurate value.
"""

from __future__ import annotations

import math

import numpy as np

from .linalg import _columns, _gauss_jordan, _one_square

THETA_13 = 5.371920351148152
MAX_SQUARINGS = 16
# the coefficients b_0 .. b_13 of the [13/13] Padé approximant to exp
PADE_13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
           129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
           40840800.0, 960960.0, 16380.0, 182.0, 1.0)


def _combine(v, a, terms, n, span):
    """The sum of c * X over (c, X) pairs; X None is the identity."""
    out = np.empty((n, n), dtype=object)
    for i in range(n):
        for j in range(n):
            total = 0.0
            for c, X in terms:
                x = (1.0 if i == j else 0.0) if X is None else X[i, j]
                total = a.add(total, a.mul(c, x))
            out[i, j] = total
    return out


def _pade_13(v, a, A, n, span):
    """U and V of r_13(A) = (V - U)^-1 (V + U): U odd in A, V even."""
    b = PADE_13
    A2 = v.matmul(A, A, span)
    A4 = v.matmul(A2, A2, span)
    A6 = v.matmul(A4, A2, span)
    inner_u = _combine(v, a, [(b[13], A6), (b[11], A4), (b[9], A2)], n, span)
    u = _combine(v, a, [(1.0, v.matmul(A6, inner_u, span)), (b[7], A6), (b[5], A4),
                        (b[3], A2), (b[1], None)], n, span)
    U = v.matmul(A, u, span)
    inner_v = _combine(v, a, [(b[12], A6), (b[10], A4), (b[8], A2)], n, span)
    V = _combine(v, a, [(1.0, v.matmul(A6, inner_v, span)), (b[6], A6), (b[4], A4),
                        (b[2], A2), (b[0], None)], n, span)
    return U, V


def _expm(v, args, call):
    n, a = _one_square(v, args, call, n_cubed=2 * MAX_SQUARINGS + 12)
    A, span = args[0], call.span
    if n == 0:
        return np.empty((0, 0), dtype=object)
    # the 1-norm: the largest absolute column sum
    norm = v.reduce("max", [v.reduce("sum", [a.f("abs", x) for x in A[:, j]], span)
                            for j in range(n)], span)
    more = [a.cmp(">", norm, THETA_13 * 2.0 ** k) for k in range(MAX_SQUARINGS + 1)]
    scale = 1.0
    for k in range(MAX_SQUARINGS):
        scale = a.mul(scale, a.sel(more[k], 0.5, 1.0))
    As = np.empty((n, n), dtype=object)
    for i in range(n):
        for j in range(n):
            As[i, j] = a.mul(scale, A[i, j])
    U, V = _pade_13(v, a, As, n, span)
    rows = [[a.sub(V[i, j], U[i, j]) for j in range(n)] + [a.add(V[i, j], U[i, j])
                                                            for j in range(n)] for i in range(n)]
    R = _columns(_gauss_jordan(a, rows, n), (n, n))
    for k in range(MAX_SQUARINGS):
        if more[k] is False:
            break  # a static A: no squaring from here on
        R2 = v.matmul(R, R, span)
        for i in range(n):
            for j in range(n):
                R[i, j] = a.sel(more[k], R2[i, j], R[i, j])
    for i in range(n):
        for j in range(n):
            R[i, j] = a.sel(more[MAX_SQUARINGS], math.nan, R[i, j])
    return R


EXPM = {"expm": _expm}
