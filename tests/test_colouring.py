"""Graph colourings and the recovery of sparse matrices from compressed products.

Property tests draw random patterns and random values: a colouring must satisfy its definition
(checked here by brute force, not by the code under test), and the recovery must give back
every entry exactly from the products J S, Sᵀ J or H S, which are computed here with dense
NumPy from the colours.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from diffdsl.graph.colouring import (
    Pattern,
    column_colouring,
    groups,
    locate_columns,
    locate_rows,
    locate_symmetric,
    recover,
    row_colouring,
    star_colouring,
)


def pattern_of(mask: np.ndarray) -> Pattern:
    rows, cols = np.nonzero(mask)
    return Pattern.from_entries(mask.shape, rows, cols)


@st.composite
def masks(draw, square=False, symmetric=False):
    m = draw(st.integers(1, 14))
    n = m if square else draw(st.integers(1, 14))
    density = draw(st.sampled_from([0.05, 0.15, 0.3, 0.6, 1.0]))
    mask = draw(arrays(np.float64, (m, n), elements=st.floats(0, 1))) < density
    return mask | mask.T if symmetric else mask


def values_on(mask: np.ndarray, seed: int, symmetric=False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.normal(size=mask.shape)
    if symmetric:
        values = values + values.T
    return np.where(mask, values, 0.0)


def seed_matrix(colours: np.ndarray) -> np.ndarray:
    """S: one column per colour, a one where a column (or row) has that colour."""
    count = int(colours.max()) + 1 if colours.size else 0
    return (colours[:, None] == np.arange(count)[None, :]).astype(float)


# the definitions, by brute force ---------------------------------------------------------
def assert_columns_apart(mask: np.ndarray, colours: np.ndarray) -> None:
    """No two columns of one colour share a row; every column with an entry has a colour."""
    for j in range(mask.shape[1]):
        assert (colours[j] >= 0) == mask[:, j].any()
    for row in mask:
        used = colours[row]
        assert len(set(used.tolist())) == len(used)


def neighbours(mask: np.ndarray) -> list[set]:
    n = mask.shape[0]
    return [{j for j in range(n) if mask[i, j] and j != i} for i in range(n)]


def assert_star(mask: np.ndarray, colours: np.ndarray) -> None:
    """Distance-1 colouring, and every path on four vertices has at least three colours."""
    adj = neighbours(mask)
    for v in range(mask.shape[0]):
        assert (colours[v] >= 0) == (mask[v, v] or bool(adj[v]))
        assert all(colours[w] != colours[v] for w in adj[v])
    for a in range(mask.shape[0]):
        for b in adj[a]:
            for c in adj[b] - {a}:
                for d in adj[c] - {a, b}:
                    assert not (colours[a] == colours[c] and colours[b] == colours[d]), \
                        f"path {a}-{b}-{c}-{d} has two colours"


# properties ------------------------------------------------------------------------------
@pytest.mark.parametrize("side", ["columns", "rows"])
@settings(max_examples=150, deadline=None)
@given(mask=masks(), seed=st.integers(0, 2**32 - 1))
def test_jacobian_colourings_are_valid_and_recover_every_entry(side, mask, seed):
    """Columns: J S (forward sweeps); rows: Sᵀ J (reverse sweeps)."""
    p = pattern_of(mask)
    J = values_on(mask, seed)
    if side == "columns":
        colours = column_colouring(p)
        assert_columns_apart(mask, colours)
        got = recover((J @ seed_matrix(colours)).T, locate_columns(p, colours))  # [colour, row]
    else:
        colours = row_colouring(p)
        assert_columns_apart(mask.T, colours)
        got = recover(seed_matrix(colours).T @ J, locate_rows(p, colours))  # [colour, column]
    rows, cols = np.nonzero(mask)
    assert np.array_equal(got, J[rows, cols])


@settings(max_examples=200, deadline=None)
@given(masks(square=True, symmetric=True), st.integers(0, 2**32 - 1))
def test_star_colouring_is_a_star_colouring_and_recovers_every_entry(mask, seed):
    p = pattern_of(mask)
    colours = star_colouring(p)
    assert_star(mask, colours)
    H = values_on(mask, seed, symmetric=True)
    compressed = (H @ seed_matrix(colours)).T
    rows, cols = np.nonzero(mask)
    assert np.array_equal(recover(compressed, locate_symmetric(p, colours)), H[rows, cols])


@settings(max_examples=50, deadline=None)
@given(masks(square=True, symmetric=True), st.integers(0, 2**32 - 1))
def test_recovery_works_on_a_batch_of_products(mask, seed):
    p = pattern_of(mask)
    colours = star_colouring(p)
    S = seed_matrix(colours)
    Hs = [values_on(mask, seed + k, symmetric=True) for k in range(3)]
    compressed = np.stack([(H @ S).T for H in Hs])[:, None]  # batch shape (3, 1)
    rows, cols = np.nonzero(mask)
    got = recover(compressed, locate_symmetric(p, colours))
    assert got.shape == (3, 1, len(rows))
    for k, H in enumerate(Hs):
        assert np.array_equal(got[k, 0], H[rows, cols])


# known shapes ----------------------------------------------------------------------------
def banded(n: int, below: int, above: int) -> np.ndarray:
    i, j = np.indices((n, n))
    return (j - i <= above) & (i - j <= below)


def arrow(n: int) -> np.ndarray:
    mask = np.eye(n, dtype=bool)
    mask[0, :] = mask[:, 0] = True
    return mask


@pytest.mark.parametrize("mask, columns, star", [
    (banded(50, 1, 1), 3, 3),            # tridiagonal
    (banded(50, 5, 1), 7, None),          # the Broyden banded function's Jacobian
    (np.eye(40, dtype=bool), 1, 1),       # diagonal
    (arrow(40), 40, 2),                   # an arrowhead: a dense row, yet two colours for H
    (np.ones((6, 6), dtype=bool), 6, 6),  # dense
    (np.kron(np.eye(5), np.ones((3, 3))).astype(bool), 3, 3),  # blocks
])
def test_colour_counts_on_known_shapes(mask, columns, star):
    assert column_colouring(pattern_of(mask)).max() + 1 == columns
    if star is not None:
        assert star_colouring(pattern_of(mask)).max() + 1 == star


def test_an_empty_pattern_needs_no_colour():
    p = pattern_of(np.zeros((3, 4), dtype=bool))
    assert column_colouring(p).tolist() == [-1] * 4
    assert row_colouring(p).tolist() == [-1] * 3
    assert groups(column_colouring(p)) == []
    assert star_colouring(pattern_of(np.zeros((4, 4), dtype=bool))).tolist() == [-1] * 4


def test_groups_list_the_members_of_each_colour_in_order():
    found = groups(np.array([2, -1, 0, 2, 1, 0]))
    assert [g.tolist() for g in found] == [[2, 5], [4], [0, 3]]


def test_a_pattern_merges_duplicates_and_sorts():
    p = Pattern.from_entries((3, 4), [2, 0, 2, 0, 2], [1, 3, 1, 0, 0])
    assert p.indptr.tolist() == [0, 2, 2, 4]
    assert p.indices.tolist() == [0, 3, 0, 1]
    assert p.rows().tolist() == [0, 0, 2, 2]
    t = p.transpose()
    assert t.shape == (4, 3) and t.indptr.tolist() == [0, 2, 3, 3, 4]
    s = Pattern.from_entries((3, 3), [0], [2]).symmetric()
    assert list(zip(s.rows().tolist(), s.indices.tolist(), strict=True)) == [(0, 2), (2, 0)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 20_000), max_size=80))
def test_bits_lists_the_set_bits_in_order(positions):
    """pattern_walk.bits, both ways (one bit at a time below FEW_BITS, unpacked above), against
    the positions it was built from."""
    from diffdsl.graph.pattern_walk import bits
    x = sum(1 << k for k in set(positions))
    got = bits(x)
    assert got.dtype == np.int64 and got.tolist() == sorted(set(positions))
