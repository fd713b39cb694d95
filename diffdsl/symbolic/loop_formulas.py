"""Loops' formulas made cheaply: a `Sum` as SymPy makes it but for the folding of its
summand's branches, and an iteration put into a formula that shares its subexpressions
(symbolic/sums.py exports regions with them)."""

from __future__ import annotations

import sympy as sp


def summed(expr, index: sp.Symbol, n: int):
    """`Sum(expr, (index, 0, n - 1))`, made as `Sum` makes it but for the Piecewise folding
    of its argument: with a max inside (a logsumexp over a GMM's components), SymPy
    multiplied out the branches' conditions for minutes. The same sum, its branches where
    they were."""
    if index not in expr.free_symbols:
        return n * expr
    made = sp.Expr.__new__(sp.Sum)
    made._args = (expr, sp.Tuple(index, sp.Integer(0), sp.Integer(n - 1)))
    made.is_commutative = expr.is_commutative
    return made


def put(expr, index: sp.Symbol, value, done: dict):
    """`expr` with `value` for `index`, rebuilt as the export built it (`ops._apply`):
    evaluated where every argument is a number, else not; a `Sum` that binds `index` itself
    (a captured sum) kept as it is. Each subexpression is visited once (`done`): a formula
    shares them, and walked as a tree (`xreplace`, `free_symbols`, `has`) it is exponential.
    `xreplace` also evaluated every function it rebuilt: a max asked SymPy to order its
    arguments' differences and an exp its argument's sign, and a GMM's logsumexp over its 5
    components took minutes."""
    found = done.get(expr)
    if found is not None:
        return found
    if expr == index:
        out = value
    elif not expr.args or (isinstance(expr, sp.Sum) and
                           any(limit[0] == index for limit in expr.limits)):
        out = expr
    elif isinstance(expr, sp.NDimArray):  # its elements put, its shape kept a number
        out = sp.ImmutableDenseNDimArray([put(e, index, value, done)
                                          for e in sp.flatten(expr.tolist())], expr.shape)
    else:
        args = [put(a, index, value, done) for a in expr.args]
        if isinstance(expr, sp.Indexed) and isinstance(args[0], sp.NDimArray):
            # an element of listed formulas (`Array(...)[2 * j + t]`): SymPy's Indexed takes
            # the element itself, which an index that is not a number cannot
            if all(isinstance(a, sp.Integer) for a in args[1:]):
                out = args[0][tuple(args[1:])]
            else:
                out = sp.Expr.__new__(sp.Indexed, *args)
        elif all(isinstance(a, sp.Number) for a in args):
            out = expr.func(*args)
        else:
            with sp.evaluate(False):
                out = expr.func(*args)
    done[expr] = out
    return out
