"""Every example's outputs with one element, and a point inside its domain for each: what the
PyTorch and JAX bridge tests differentiate (gradcheck, gradgradcheck, check_grads).

Points avoid the places where an output is not differentiable: the kinks of piecewise.dd,
ties of triangle_stats.dd's max and min (distinct values), the domain edges of special.dd
(x > 0, |y| < 2, x y > -1), a covariance that is positive definite for gauss.dd, and loops
whose count of iterations stays the same under the finite differences' steps.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import diffdsl

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

_rng = np.random.default_rng(24)


def _uniform(shape, low=0.5, high=1.5):
    return _rng.uniform(low, high, shape)


# file -> (inputs, the one-element outputs)
POINTS = {
    "det2.dd": ({"A": _uniform((2, 2))}, ["d"]),
    "det3.dd": ({"A": _uniform((3, 3))}, ["d"]),
    "det3_forum.dd": ({"ax": _uniform((3, 3))}, ["az"]),
    "det_minors.dd": ({"A": _uniform((5, 5))}, ["d"]),
    "forum_scalar.dd": ({"x": _uniform((1, 1))}, ["z"]),
    "gauss.dd": ({"S": np.array([[2.0, 1, 0], [1, 2, 1], [0, 1, 2]]), "x": _uniform(3),
                  "mu": _uniform(3, -0.5, 0.5)}, ["ll"]),
    "indexing.dd": ({"A": _uniform((3, 4))}, ["s"]),
    "logsumexp.dd": ({"x": _uniform(5, -1, 1)}, ["lse", "sp"]),
    "matrix.dd": ({"A": _uniform((3, 3)), "v": _uniform(3)}, ["t", "q"]),
    "piecewise.dd": ({"x": np.float64(1.5), "b": np.float64(0.5)}, ["r"]),
    "rosenbrock.dd": ({"x": _uniform(4)}, ["f"]),
    "special.dd": ({"x": _uniform(3), "y": _uniform(3, -0.9, 0.9)}, ["h"]),
    "sum_a.dd": ({"a": _uniform((2, 3))}, ["s"]),
    "triangle_stats.dd": ({"A": _uniform((4, 4))},
                          ["offdiag", "lower_max", "upper_min", "diag_prod", "row_max_sum"]),
    "loops/newton_lambertw.dd": ({"p": np.float64(2.0)}, ["w"]),
    "loops/particle.dd": ({"q": np.float64(0.2), "v0": np.array([1.0, 0.5])},
                          ["landing", "miss"]),
    "loops/pendulums.dd": ({"q0": _uniform(4, -0.3, 0.3), "stiff": _uniform(4)}, ["energy"]),
    "loops/saddle.dd": ({"x0": np.array([0.5, -0.3]), "y0": np.array([0.2, 0.1])}, ["value"]),
    "linalg/fiedler.dd": ({"w": _uniform(7)}, ["connectivity"]),
    "linalg/gaussian_loglik.dd": ({"S": np.array([[4.0, 1, 0], [1, 3, 1], [0, 1, 2]]),
                                   "x": _uniform(3, -1, 1), "mu": _uniform(3, -1, 1)}, ["ll"]),
    "linalg/linear_flow.dd": ({"W": np.eye(5) * 2 + _uniform((5, 5), -0.3, 0.3),
                               "b": _uniform(5, -1, 1), "x": _uniform(5, -1, 1)},
                              ["logp", "orientation"]),
    "linalg/linear_ode.dd": ({"k": np.float64(2.0), "c": np.float64(0.5)}, ["miss"]),
}

# Examples that are there (a table row may run ahead of its example's commit).
CASES = [(name, of) for name, (_, outs) in POINTS.items() if (EXAMPLES / name).is_file()
         for of in outs]


def program(name: str):
    return diffdsl.load(EXAMPLES / name, backend="cpu")  # the kernels, not the interpreter


def one_element_outputs() -> list[tuple[str, str]]:
    """Every example's outputs of one element, found by loading the programs: the table above
    must name them all (a new example needs a point)."""
    found = []
    for path in sorted(EXAMPLES.rglob("*.dd")):
        prog = diffdsl.load(path)
        name = path.relative_to(EXAMPLES).as_posix()
        found += [(name, of) for of, shape in prog.outputs.items()
                  if int(np.prod(shape, dtype=np.int64)) == 1]
    return found


def quadratic_form_gradients(A, v, rows: tuple) -> tuple:
    """The gradients of the sum over `rows` of q = v'Av (matrix.dd's q), in closed form: v v'
    and (A + A')v a row, summed over the rows for an input given without them (shared)."""
    Ab, vb = np.broadcast_to(A, rows + (3, 3)), np.broadcast_to(v, rows + (3,))
    dA = np.einsum("...i,...j->...ij", vb, vb)
    dv = np.einsum("...ij,...j->...i", Ab + np.swapaxes(Ab, -1, -2), vb)
    if rows and np.ndim(A) == 2:
        dA = dA.reshape(-1, 3, 3).sum(0)
    if rows and np.ndim(v) == 1:
        dv = dv.reshape(-1, 3).sum(0)
    return dA, dv
