"""Graph colouring for compressed derivatives, and the recovery of entries from the products.

A sparse m x n Jacobian J is found from J S, where S is an n x p matrix of zeros and ones:
column j of S has its one in row `colour[j]`. When no two columns of the same colour have a
nonzero in the same row (a colouring of the column intersection graph, distance 2 in the
bipartite graph of rows and columns), each nonzero J[i, j] stands alone in (J S)[i,
colour[j]], so p sweeps give the whole matrix. `row_colouring` does the same for Sᵀ J
(reverse mode). A symmetric Hessian needs fewer colours: a star colouring (Gebremedhin, Manne
and Pothen, "What color is your Jacobian?", SIAM Review 47, 2005, Algorithm 4.1) colours the
adjacency graph so that every path on four vertices uses at least three colours; then each
H[i, j] is found directly in (H S)[i, colour[j]] or in (H S)[j, colour[i]].

Patterns are CSR index arrays (`Pattern`); the colourings are greedy, largest first, with
numpy doing the work of each vertex, so n = 10^4 takes a fraction of a second. A column (or
vertex) that has no nonzero gets colour -1: no sweep needs it. Colours are 0, 1, ...
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Pattern(NamedTuple):
    """Where a matrix may be nonzero: CSR index arrays, columns sorted within each row."""

    shape: tuple[int, int]
    indptr: np.ndarray  # int64, one more than the rows
    indices: np.ndarray  # int64, the column of each entry

    @classmethod
    def from_entries(cls, shape, rows, cols) -> Pattern:
        """The pattern of the (row, column) pairs given, duplicates merged."""
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        keys = np.unique(rows * shape[1] + cols)
        rows, cols = np.divmod(keys, shape[1])
        indptr = np.zeros(shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=shape[0]), out=indptr[1:])
        return cls((int(shape[0]), int(shape[1])), indptr, cols)

    @property
    def nnz(self) -> int:
        return len(self.indices)

    def rows(self) -> np.ndarray:
        """The row of each entry, in entry order."""
        return np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))

    def transpose(self) -> Pattern:
        return Pattern.from_entries(self.shape[::-1], self.indices, self.rows())

    def symmetric(self) -> Pattern:
        """The pattern and its transpose together (a square pattern)."""
        rows = self.rows()
        return Pattern.from_entries(self.shape, np.concatenate([rows, self.indices]),
                                    np.concatenate([self.indices, rows]))


def _gather(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The entries of several CSR rows, one after the other, without a Python loop."""
    starts = indptr[rows]
    lengths = indptr[rows + 1] - starts
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    return indices[np.repeat(starts - ends + lengths, lengths) + np.arange(total)]


def _smallest_free(mark: np.ndarray, forbidden: np.ndarray, stamp: int) -> int:
    """The smallest colour not in `forbidden`: `mark` remembers, by `stamp`, what is taken."""
    mark[forbidden] = stamp
    return int(np.argmax(mark != stamp))


def column_colouring(pattern: Pattern) -> np.ndarray:
    """Colours of the columns such that no two columns of one colour share a row.

    Greedy, largest first: a column with more (row, other column) pairs is coloured earlier
    (the count is an upper bound of its degree in the column intersection graph, cheap to find).
    """
    m, n = pattern.shape
    by_column = pattern.transpose()
    shared = np.diff(pattern.indptr)[pattern.rows()] - 1
    weight = np.bincount(pattern.indices, weights=shared, minlength=n)
    colours = np.full(n, -1, dtype=np.int64)
    mark = np.full(n + 1, -1, dtype=np.int64)
    for j in np.argsort(-weight, kind="stable"):
        rows = by_column.indices[by_column.indptr[j]:by_column.indptr[j + 1]]
        if not rows.size:
            continue  # a column of zeros needs no sweep
        taken = colours[_gather(pattern.indptr, pattern.indices, rows)]
        colours[j] = _smallest_free(mark, taken[taken >= 0], j)
    return colours


def diagonal_colouring(pattern: Pattern) -> np.ndarray:
    """Colours of the columns of a symmetric pattern such that no column has another of its
    colour among the entries of its own row: the product with a colour's sum of columns is
    then, at row k, the diagonal entry alone (two columns of one colour may share other rows,
    which a diagonal never reads). A column whose row is empty gets none (-1): its diagonal
    is zero. Greedy, most entries first."""
    n = pattern.shape[1]
    count = np.diff(pattern.indptr)
    colours = np.full(n, -1, dtype=np.int64)
    mark = np.full(n + 1, -1, dtype=np.int64)
    for k in np.argsort(-count, kind="stable"):
        row = pattern.indices[pattern.indptr[k]:pattern.indptr[k + 1]]
        if not row.size:
            continue
        taken = colours[row]
        colours[k] = _smallest_free(mark, taken[taken >= 0], k)
    return colours


def row_colouring(pattern: Pattern) -> np.ndarray:
    """Colours of the rows such that no two rows of one colour share a column (for Sᵀ J)."""
    return column_colouring(pattern.transpose())


def star_colouring(pattern: Pattern) -> np.ndarray:
    """A star colouring of a symmetric pattern's adjacency graph (off-diagonal entries).

    Gebremedhin, Manne and Pothen's greedy Algorithm 4.1, vertices largest degree first. For
    each vertex v, the colours forbidden are those of its coloured neighbours w; through an
    uncoloured neighbour w, the colours of all of w's coloured neighbours; through a coloured
    w, the colour of a coloured neighbour x of w that has another neighbour of w's colour (v
    would close the two-coloured path v-w-x-y). `count[c, x]` holds how many neighbours of x
    have colour c (up to 2), so that test needs no loop over x's neighbours. A vertex with
    neither neighbours nor a diagonal entry gets -1.
    """
    n = pattern.shape[0]
    rows = pattern.rows()
    off = rows != pattern.indices
    adj = Pattern.from_entries((n, n), np.concatenate([rows[off], pattern.indices[off]]),
                               np.concatenate([pattern.indices[off], rows[off]]))
    degree = np.diff(adj.indptr)
    has_diagonal = np.zeros(n, dtype=bool)
    has_diagonal[rows[~off]] = True
    colours = np.full(n, -1, dtype=np.int64)
    count = np.zeros((8, n), dtype=np.uint8)
    mark = np.full(n + 1, -1, dtype=np.int64)
    for v in np.argsort(-degree, kind="stable"):
        w = adj.indices[adj.indptr[v]:adj.indptr[v + 1]]
        if not w.size and not has_diagonal[v]:
            continue
        cw = colours[w]
        forbidden = [cw[cw >= 0]]
        bare = w[cw < 0]
        if bare.size:
            cx = colours[_gather(adj.indptr, adj.indices, bare)]
            forbidden.append(cx[cx >= 0])
        done = w[cw >= 0]
        if done.size:
            x = _gather(adj.indptr, adj.indices, done)
            c_of_w = np.repeat(colours[done], degree[done])
            cx = colours[x]
            closes = (cx >= 0) & (x != v) & (count[c_of_w, x] >= 2)
            forbidden.append(cx[closes])
        c = _smallest_free(mark, np.concatenate(forbidden), v)
        colours[v] = c
        if c >= count.shape[0]:
            count = np.concatenate([count, np.zeros_like(count)])
        count[c, w] = np.minimum(count[c, w] + 1, 2)  # w holds distinct vertices
    return colours


def groups(colours: np.ndarray) -> list[np.ndarray]:
    """The members of each colour, colour 0 first (-1, no colour, in none): one sweep each."""
    count = int(colours.max()) + 1 if colours.size else 0
    order = np.argsort(colours, kind="stable")
    bounds = np.searchsorted(colours[order], np.arange(count + 1))
    return [order[bounds[c]:bounds[c + 1]] for c in range(count)]


def locate_columns(pattern: Pattern, colours: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each entry of J (in pattern order) stands in the compressed (J S)ᵀ, whose
    `[c, i]` is (J S)[i, c]: the pair (colour of its column, its row)."""
    return colours[pattern.indices], pattern.rows()


def locate_rows(pattern: Pattern, colours: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each entry of J stands in Sᵀ J (`[c, j]`): (colour of its row, its column)."""
    return colours[pattern.rows()], pattern.indices


def locate_symmetric(pattern: Pattern, colours: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each entry of a symmetric H stands in (H S)ᵀ, S from a star colouring: H[i, j] is
    (H S)[i, colour j] when j is the only entry of row i with its colour, else (H S)[j,
    colour i] (the star colouring makes i the only one of its colour in row j)."""
    rows, cols = pattern.rows(), pattern.indices
    c_col, c_row = colours[cols], colours[rows]
    width = int(colours.max()) + 1 if len(colours) else 1
    _, where, counts = np.unique(rows * width + c_col, return_inverse=True, return_counts=True)
    alone = counts[where.reshape(-1)] == 1
    return np.where(alone, c_col, c_row), np.where(alone, rows, cols)


def recover(compressed: np.ndarray, where: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The entries at `where` (from a `locate_*`), for every leading (batch) index."""
    return compressed[..., where[0], where[1]]
