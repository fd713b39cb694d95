"""What a loop's derivative reads and writes in blocks, not element by element
(backends/llvm_loops.py): a stream of constants (the seeds of one colour of a Hessian's
diagonal, 1.0 and 0.0 by turns) is a table the loop reads in place, and an output whose
elements are one loop's values at a step (the diagonal's even elements from one colour's
sweep, its odd ones from the other's) is copied by a loop. Before, 20,000 columns were
140,000 lines of IR and 23 s of LLVM. The values must not change: each program's diagonal
and sparse Hessian against the numpy interpreter and the dense Hessian, at sizes that
take the blocks and below them."""

from __future__ import annotations

import numpy as np
import pytest

import diffdsl
from diffdsl.backends import cpu

PROGRAMS = {  # the Hessian's pattern takes two colours, for the diagonal
    "pairs": "input x[{n}]\noutput f = sum(exp(x[2 * i] / x[2 * i + 1]) for i in range({n} // 2))",
    "triples": "input x[{n}]\noutput f = sum(x[3 * i] * x[3 * i + 1] ** 2 - cos(x[3 * i + 2]) "
               "* x[3 * i] for i in range({n} // 3))",
}


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("n", [6, 30, 3000])
def test_the_diagonal_and_sparse_hessian_keep_their_values(name, n):
    n -= n % 6
    prog = diffdsl.compile(PROGRAMS[name].format(n=n), cache=False)
    x = np.random.default_rng(n).uniform(0.5, 1.5, n)
    want = prog.hessian(x=x, diagonal=True, backend="numpy")["x"]
    got = prog.hessian(x=x, diagonal=True, backend="cpu")["x"]
    np.testing.assert_allclose(got, want, rtol=1e-13)
    sparse = prog.hessian(x=x, sparse=True, backend="cpu")
    np.testing.assert_allclose(sparse.diagonal(), want, rtol=1e-13)
    if n <= 30:
        np.testing.assert_allclose(prog.hessian(x=x, backend="cpu")["x"]["x"],
                                   sparse.toarray(), rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_diagonals_kernel_does_not_grow_with_the_columns(name):
    lines = []
    for n in (3000, 30000):
        prog = diffdsl.compile(PROGRAMS[name].format(n=n), cache=False)
        graph = prog.derivative("hessian_diagonal", wrt=["x"], value=False)
        text, _ = cpu.emit(graph, "float64")
        body = [line for line in text.split("\n") if not line.startswith("@")]  # not tables
        lines.append(sum("store " in line for line in body))
    assert lines[1] <= lines[0] + 100, lines  # not a store per column
