"""The SymPy atoms of an exported graph: constants as the closed forms they round from, and
input elements as real symbols (symbolic.py builds expressions over them).

Constants are exported exactly where the float is (within one unit in the last place) a simple
closed form: an integer, a short decimal (`0.1` is 1/10), a fraction with denominator up to
1000, or a small rational multiple of one of pi, E, log(2), log(10), sqrt(2), sqrt(3),
sqrt(pi), sqrt(2*pi) or of its reciprocal. Constant folding in float64 rounds (`1/3` folds to
0.333...33, `log2`'s derivative holds ln 2 as a float), and this recovers the exact value, so
formulas read as written and our derivatives can be proven equal to SymPy's. Any other
constant, and any of magnitude beyond 2**53 or below 1e-15, is an exact `Float` of 53 bits.

An input element is `IndexedBase(name, shape=shape)[i, j]` with the indices of the declared
shape (the code printers need the shape), a scalar input a plain `Symbol(name)`; both are
declared real, as every value of the language is, so that SymPy differentiates `Abs(x)` to
`sign(x)` and not to an expression in `re` and `im`.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import mpmath
import sympy as sp

from ..graph.ir import Graph

# ---------------------------------------------------------------------------------------------
# Constants


def constant(value: float) -> sp.Expr:
    """The SymPy number for a float constant of the graph (see the module docstring)."""
    x = float(value)
    if math.isnan(x):
        return sp.nan
    if math.isinf(x):
        return sp.oo if x > 0 else -sp.oo
    if x < 0:
        return -constant(-x)
    if x == 0:
        return sp.Integer(0)
    for c in (x, math.nextafter(x, 0.0), math.nextafter(x, math.inf)):
        exact = _exact_form(c)
        if exact is not None:
            return exact
    return sp.Float(x)


def _exact_form(x: float) -> sp.Expr | None:
    if not 1e-15 <= x < 2.0**53:
        return None  # written as a Float: 1e300 as a SymPy Integer would print 301 digits
    if x.is_integer():
        return sp.Integer(int(x))
    text = repr(x)
    mantissa = text.split("e")[0].replace(".", "").strip("0")
    if len(mantissa) <= 12:
        return sp.Rational(text)  # a short decimal, as written: 0.1 is 1/10
    frac = Fraction(x).limit_denominator(1000)
    if float(frac) == x:
        return sp.Rational(frac.numerator, frac.denominator)
    known = _known_constants().get(x)
    if known is not None:
        q, base, inverse = known
        b = _BASES[base][0]
        return q / b if inverse else q * b
    return None


# Irrational constants that ops' rules and programs use; a float equal to a small rational
# multiple of one of them (or of its reciprocal) is exported as that closed form.
_BASES = (
    (sp.pi, lambda: mpmath.pi),
    (sp.E, lambda: mpmath.e),
    (sp.log(2), lambda: mpmath.log(2)),
    (sp.log(10), lambda: mpmath.log(10)),
    (sp.sqrt(2), lambda: mpmath.sqrt(2)),
    (sp.sqrt(3), lambda: mpmath.sqrt(3)),
    (sp.sqrt(sp.pi), lambda: mpmath.sqrt(mpmath.pi)),
    (sp.sqrt(2 * sp.pi), lambda: mpmath.sqrt(2 * mpmath.pi)),
)


@functools.lru_cache(maxsize=1)
def _known_constants() -> dict[float, tuple]:
    """float -> (rational q, base index, inverse?): the simplest form is entered first."""
    ratios = sorted({Fraction(n, d) for n in range(1, 13) for d in range(1, 13)},
                    key=lambda q: (q.numerator + q.denominator, q))
    table: dict[float, tuple] = {}
    with mpmath.workdps(40):
        for q in ratios:
            for base, (_, value) in enumerate(_BASES):
                for inverse in (False, True):
                    v = value()
                    if inverse:
                        exact = mpmath.mpf(q.numerator) / (v * q.denominator)
                    else:
                        exact = q.numerator * v / q.denominator
                    table.setdefault(float(exact), (sp.Rational(q.numerator, q.denominator),
                                                    base, inverse))
    return table



# ---------------------------------------------------------------------------------------------
# Symbols


def unravel(k: int, shape: tuple) -> tuple[int, ...]:
    """The multi-index of flat (row-major) position `k` in `shape`."""
    index = []
    for dim in reversed(shape):
        index.append(k % dim)
        k //= dim
    return tuple(reversed(index))


def input_symbol(name: str, shape: tuple, k: int, real: bool = True) -> sp.Expr:
    """The SymPy atom `to_sympy` uses for element `k` (flat) of input `name` of `shape`."""
    if not shape:
        return sp.Symbol(name, real=True) if real else sp.Symbol(name)
    return indexed_base(name, shape, real)[unravel(k, shape)]


def indexed_base(name: str, shape: tuple, real: bool = True) -> sp.IndexedBase:
    """The `IndexedBase` of an array input: with its shape, which `sympy.ccode` and the other
    code printers need to turn `A[1, 2]` into an offset (`A[5]` for shape (3, 3))."""
    shape = tuple(shape)
    return sp.IndexedBase(name, shape=shape, real=True) if real else \
        sp.IndexedBase(name, shape=shape)


def _plain_symbol(name: str, shape: tuple, k: int) -> sp.Symbol:
    """A real Symbol printed as the element is (`A[0, 1]`): SymPy differentiates with respect
    to a Symbol faster and more simply than with respect to an Indexed."""
    if not shape:
        return sp.Symbol(name, real=True)
    return sp.Symbol(f"{name}[{', '.join(map(str, unravel(k, shape)))}]", real=True)


class Symbols:
    """The atoms of a graph's inputs: plain real Symbols for computing, and the public ones."""

    def __init__(self, graph: Graph, real: bool = True):
        self.plain: dict[str, list] = {}
        self.public: dict[str, list] = {}
        for name, port in graph.inputs.items():
            self.plain[name] = [_plain_symbol(name, port.shape, k) for k in range(port.size)]
            self.public[name] = [input_symbol(name, port.shape, k, real)
                                 for k in range(port.size)]
        self.to_public = {p: q for name in self.plain
                          for p, q in zip(self.plain[name], self.public[name], strict=True)}

    def plain_atom(self, name: str, k: int):
        return self.plain[name][k]

