"""A program as a function of one flat float64 vector, the form `scipy.optimize` takes.

`Program.objective(wrt=..., of=..., **inputs)` makes an `Objective`: the inputs named by `wrt`
are the variables (their given values are the starting point `x0`: required, as no default
start suits every problem), every other input is held fixed at the value given. For an output
with one element, `fun`, `jac` (the gradient), `hess` and `hessp` suit
`scipy.optimize.minimize`; for a larger output, `residuals` and `jac` (the Jacobian matrix)
suit `scipy.optimize.least_squares`, and `fun` is half the sum of squared residuals. The last
evaluation is kept, so `fun` then `jac` at the same point evaluate the program once.

`hess` gives a `scipy.sparse` CSR matrix, computed by graph colouring, when the Hessian is
sparse: with `sparse=True`, or by default when it has at least `SPARSE_ROWS` rows and at most
`SPARSE_DENSITY` of its entries can be nonzero (its pattern, from the graph). Below that size a
dense matrix costs little, and it suits every method of `minimize` ("trust-exact" and
"dogleg" need one); CSR suits "trust-constr" and "Newton-CG".
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError, UsageError

SPARSE_ROWS = 100
SPARSE_DENSITY = 0.25


def ravel(values: dict, names: list[str]) -> np.ndarray:
    """The arrays of `names`, flattened in order into one float64 vector."""
    parts = [np.asarray(values[name], dtype=np.float64).reshape(-1) for name in names]
    return np.concatenate(parts) if parts else np.zeros(0)


def unravel(v, shapes: dict) -> dict:
    """A flat vector back into arrays of the given shapes (a dict name -> shape, in order)."""
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    out, start = {}, 0
    for name, shape in shapes.items():
        size = math.prod(shape)
        out[name] = v[start:start + size].reshape(shape)
        start += size
    if start != v.size:
        raise ValueError(f"expected a vector of {start} numbers, got {v.size}")
    return out


class Objective:
    """See the module docstring; made by `Program.objective`."""

    def __init__(self, prog, of: str, wrt: list[str], given: dict, sparse: bool | None = None):
        if sparse not in (None, True, False):
            raise UsageError(f"objective: sparse must be True, False or None, not {sparse!r}")
        self.prog = prog
        self.of = of
        self.wrt = list(wrt)
        self.shapes = {name: prog.inputs[name] for name in self.wrt}
        _check_given(prog, self.wrt, given)
        self.fixed = {k: v for k, v in given.items() if k not in self.shapes}
        self.x0 = ravel(given, self.wrt)
        self.scalar = math.prod(prog.outputs[of]) == 1
        self._last: tuple | None = None
        self._sparse = sparse

    def unravel(self, v) -> dict:
        return unravel(v, self.shapes)

    def ravel(self, values: dict) -> np.ndarray:
        return ravel(values, self.wrt)

    def _inputs(self, v) -> dict:
        return {**self.fixed, **self.unravel(v)}

    def _value_and_derivative(self, v):
        key = np.asarray(v, dtype=np.float64).tobytes()
        if self._last is None or self._last[0] != key:
            if self.scalar:
                value, grads = self.prog.value_and_grad(self._inputs(v), of=self.of,
                                                        wrt=self.wrt)
                derivative = self.ravel(grads)
            else:
                value, jac = self.prog.value_and("jacobian", self._inputs(v), of=self.of,
                                                 wrt=self.wrt)
                m = math.prod(self.prog.outputs[self.of])
                derivative = np.concatenate([np.asarray(jac[n]).reshape(m, -1)
                                             for n in self.wrt], axis=1)
            self._last = (key, np.asarray(value, dtype=np.float64), derivative)
        return self._last[1], self._last[2]

    def fun(self, v) -> float:
        """The output (one element), or half the sum of squared residuals."""
        value, _ = self._value_and_derivative(v)
        return float(value.reshape(-1)[0]) if self.scalar else 0.5 * float(value @ value)

    def jac(self, v) -> np.ndarray:
        """The gradient (one-element output) or the Jacobian matrix (outputs x variables)."""
        return self._value_and_derivative(v)[1]

    def residuals(self, v) -> np.ndarray:
        """The output, flattened: for `scipy.optimize.least_squares`."""
        return self._value_and_derivative(v)[0].reshape(-1)

    @property
    def sparse_hessian(self) -> bool:
        """Whether `hess` gives a CSR matrix (see the module's docstring)."""
        if self._sparse is None:
            n = self.x0.size
            nnz = self.prog.sparsity(of=self.of, wrt=self.wrt, hessian=True).nnz
            self._sparse = n >= SPARSE_ROWS and nnz <= SPARSE_DENSITY * n * n
        return self._sparse

    def hess(self, v):
        """The Hessian matrix over the flat vector (one-element output): an array, or a CSR
        matrix when `sparse_hessian`."""
        if self.sparse_hessian:
            return self.prog.hessian(self._inputs(v), of=self.of, wrt=self.wrt, sparse=True)
        blocks = self.prog.hessian(self._inputs(v), of=self.of, wrt=self.wrt)
        sizes = [math.prod(self.shapes[n]) for n in self.wrt]
        return np.block([[np.asarray(blocks[a][b]).reshape(sa, sb)
                          for b, sb in zip(self.wrt, sizes, strict=True)]
                         for a, sa in zip(self.wrt, sizes, strict=True)])

    def hessp(self, v, p) -> np.ndarray:
        """The Hessian times `p`, without forming the Hessian (forward over reverse)."""
        result = self.prog.hvp(self.unravel(p), self._inputs(v), of=self.of, wrt=self.wrt)
        return self.ravel(result)


def _check_given(prog, wrt: list, given: dict) -> None:
    """Every input needs a value: the fixed ones their value, the variables the point to
    start from, at its declared shape (a batch has no one starting point)."""
    missing = [n for n in prog.inputs if n not in given]
    fixed = [n for n in missing if n not in wrt]
    if fixed:
        raise UsageError(f"objective: no value for the fixed input(s) "
                         f"{', '.join(repr(n) for n in fixed)}",
                         hint="give every input that is not in wrt=, e.g. "
                              f"prog.objective(wrt={wrt!r}, {fixed[0]}=...)")
    if missing:
        raise UsageError(f"objective: no starting value for {', '.join(map(repr, missing))}",
                         hint="give the point to start from, e.g. "
                              f"prog.objective(wrt={wrt!r}, {missing[0]}=...)")
    for name in wrt:
        try:
            shape = np.shape(given[name])
        except ValueError:  # a ragged list
            shape = None
        if shape != prog.inputs[name]:
            got = "is not a regular array" if shape is None else f"has shape {list(shape)}"
            raise InputError(f"objective: input '{name}' is declared with shape "
                             f"{list(prog.inputs[name])}, but its starting value {got}")
