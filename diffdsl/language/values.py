"""Values while lowering: static numbers, dynamic scalars (`Dyn`) and arrays of either.

Static values follow Python: integer arithmetic stays integer, `/` gives a real, comparisons
give booleans. Static reals are computed as the compiled program would compute them (IEEE:
`1.0 / 0` is inf), so folding never changes a result. An operation with a dynamic operand
becomes an IR node through the `Builder`."""

from __future__ import annotations

import math
import operator

import numpy as np

from .. import limits
from ..errors import IndexRangeError, ShapeError, StaticValueError, TypeMismatchError
from ..graph.ops import ARITHMETIC, COMPARISONS
from . import loop_index
from .loop_index import Index
from .static import static_integer, static_real


class Dyn:
    """A dynamic scalar: a reference to IR node `id`. One object per id (see `Values.dyn`)."""

    __slots__ = ("id",)

    def __init__(self, i: int):
        self.id = i

    def __repr__(self) -> str:
        return f"%{self.id}"


def is_array(x) -> bool:
    return isinstance(x, np.ndarray)


def describe(x) -> str:
    if is_array(x):
        return f"an array of shape {list(x.shape)}"
    if isinstance(x, Dyn):
        return "a dynamic real"
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, int):
        return f"the integer {x}"
    return f"the real {x!r}"


def shape_of(x) -> list:
    return list(x.shape) if is_array(x) else []


def memo_key(x):
    """A hashable key for a value: calls with equal keys return equal results."""
    if isinstance(x, Dyn):
        return x.id
    if is_array(x):
        ids = tuple([e.id for e in x.flat if type(e) is Dyn])
        if len(ids) == x.size:  # all dynamic: the same key as below, in half the time
            return (x.shape, ids)
        return (x.shape, tuple(memo_key(e) for e in x.flat))
    if isinstance(x, float):
        return ("f", x.hex())
    return (type(x).__name__, x)


_PY_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul}
MAX_RANK = 32  # NumPy iterates over at most 32 dimensions (a batch adds its own up to 64)


def to_real(x) -> float:
    """A static number as a real; an integer too large for a double is infinite, as in IEEE."""
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


class Values:
    """The value algebra of lowering, over one `Builder`, within `limits` (see limits.py).

    Work is counted as it is asked for: each element an elementwise operation, reduction,
    matrix product or array literal handles is a step of the budget, charged before the work.
    """

    def __init__(self, builder, limits_: limits.Limits | None = None):
        self.b = builder
        self._dyn: dict[int, Dyn] = {}
        self.limits = limits.current() if limits_ is None else limits_
        self.budget = limits.Budget(self.limits.steps)

    def check_size(self, size: int, span, what: str) -> None:
        """Refuse an array of `size` elements over the limit, before it is allocated."""
        if size > self.limits.elements:
            raise limits.exceeded("elements", self.limits.elements,
                                  f"{what} would have {size:,} elements", span)
        if (listing := getattr(self.b, "listing", None)) is not None:  # lower/regions.py
            listing(size)  # in a loop's body: it may write the loop out instead

    def check_rank(self, rank: int, span, what: str) -> None:
        if rank > MAX_RANK:
            raise ShapeError(f"{what} would have {rank} dimensions; arrays have at most "
                             f"{MAX_RANK}", span)

    def check_int(self, value: int, span) -> int:
        """A static integer within the `int_bits` limit."""
        if value.bit_length() > self.limits.int_bits:
            raise _too_big(self.limits.int_bits, f"this static integer has "
                           f"{value.bit_length():,} bits", span)
        return value

    def dyn(self, i: int):
        """The value of node `i`: a static number if the node is a constant, else a `Dyn`."""
        c = self.b.value(i)
        if c is not None:
            return c
        d = self._dyn.get(i)
        if d is None:
            d = self._dyn[i] = Dyn(i)
        return d

    def node(self, x, span=None) -> int:
        if isinstance(x, Dyn):
            return x.id
        if isinstance(x, Index):
            return x.node(self.b)
        if is_array(x):
            raise ShapeError(f"expected a scalar, got {describe(x)}", span)
        return self.b.const(to_real(x))

    def is_static(self, x) -> bool:
        if is_array(x):
            return not any(isinstance(e, Dyn) for e in x.flat)
        return not isinstance(x, Dyn)

    def op(self, name: str, *args):
        return self.dyn(self.b.op(name, *map(self.node, args)))

    # elementwise ----------------------------------------------------------------------------
    def elementwise(self, fn, args: list, span, what: str):
        """Apply scalar `fn` over arrays broadcast to one shape as NumPy broadcasts them
        (trailing dimensions match or one of them is 1; scalars go everywhere)."""
        shapes = [a.shape for a in args if is_array(a)]
        if not shapes:
            self.budget.charge(1, span, what)
            return fn(*args)
        try:
            shape = np.broadcast_shapes(*shapes)
        except ValueError:
            listed = " and ".join(str(list(sh)) for sh in shapes)  # in the operands' order
            raise ShapeError(f"{what}: shapes {listed} do not broadcast", span,
                             hint="NumPy's rule: aligned from the right, each pair of "
                                  "dimensions equal or one of them 1") from None
        size = math.prod(shape)
        self.check_size(size, span, what)
        self.budget.charge(size, span, what)
        # Each operand as `size` elements as indexing gives them: no generator an element.
        cols = [list(np.broadcast_to(a, shape).flat) if is_array(a) else [a] * size for a in args]
        out = np.empty(size, dtype=object)
        for k, result in enumerate(map(fn, *cols)):
            out[k] = result
        return out.reshape(shape)

    def arith(self, op: str, a, b, span):
        if not is_array(a) and not is_array(b):  # the common case, without broadcasting's work
            self.budget.charge(1, span, f"'{op}'")
            return self.scalar_arith(op, a, b, span)
        return self.elementwise(lambda x, y: self.scalar_arith(op, x, y, span), [a, b], span,
                                f"'{op}'")

    def real(self, x):
        """`x` with a loop index as its value, a real."""
        return self.dyn(x.node(self.b)) if isinstance(x, Index) else x

    def index_arith(self, op: str, x, y, span):
        """Affine arithmetic keeps a loop index an index; the rest works on its value."""
        if type(y) is int and isinstance(x, Index) and op == "*":
            return x.scaled(y)
        if type(x) is int and isinstance(y, Index) and op == "*":
            return y.scaled(x)
        if op in ("+", "-") and type(x) in (int, Index) and type(y) in (int, Index):
            if op == "-":
                y = -y if type(y) is int else y.scaled(-1)
            return x.plus(y) if isinstance(x, Index) else y.plus(x)
        other = y if isinstance(x, Index) else x
        if not isinstance(other, (Dyn, Index)) and (other == 0 or not math.isfinite(other)):
            # Written out, this folds with IEEE's rules (0 / 0 is NaN); kept as a loop, the
            # builder's symbolic identities (0 / x = 0) would decide: write it out instead.
            raise TypeError("a loop index with a static zero or infinity")
        return self.scalar_arith(op, self.real(x), self.real(y), span)

    def scalar_arith(self, op: str, x, y, span):
        if isinstance(x, Index) or isinstance(y, Index):
            return self.index_arith(op, x, y, span)
        if isinstance(x, Dyn) or isinstance(y, Dyn):
            return self.op(ARITHMETIC[op], x, y)
        if type(x) in (int, bool) and type(y) in (int, bool):
            if op in _PY_ARITH:
                return self.check_int(_PY_ARITH[op](int(x), int(y)), span)
            if op == "**":
                return self.int_power(int(x), int(y), span)
        return static_real(ARITHMETIC[op], to_real(x), to_real(y))

    def int_power(self, x: int, y: int, span):
        """`x ** y` of static integers: an integer for `y >= 0`, else a real (`2 ** -1` is 0.5)."""
        if y < 0:
            return math.inf if x == 0 else static_real("pow", to_real(x), to_real(y))
        # |x| >= 2 gives at least y * (bits(x) - 1) + 1 bits: refuse before computing it.
        if abs(x) >= 2 and y * (abs(x).bit_length() - 1) + 1 > self.limits.int_bits:
            raise _too_big(self.limits.int_bits, "this power of static integers would have "
                           "more bits", span)
        return self.check_int(x ** y, span)

    def int_op(self, op: str, a, b, span):
        def one(x, y):
            if isinstance(x, Dyn) or isinstance(y, Dyn):
                raise StaticValueError(f"'{op}' works on static integers only, but an operand "
                                       "depends on an input", span)
            if type(x) not in (int, bool) or type(y) not in (int, bool):
                raise TypeMismatchError(f"'{op}' works on integers only, got {describe(x)} and "
                                        f"{describe(y)}", span)
            if y == 0:
                raise ShapeError(f"integer {'division' if op == '//' else 'modulo'} by zero",
                                 span)
            return x // y if op == "//" else x % y
        return self.elementwise(one, [a, b], span, f"'{op}'")

    def negate(self, a, span):
        def one(x):
            if isinstance(x, (Dyn, Index)):
                return self.op("neg", x)
            return -x if not isinstance(x, bool) else -int(x)
        return self.elementwise(one, [a], span, "'-'")

    def apply(self, name: str, args: list, span):
        """A builtin elementwise function of the op table."""
        def one(*xs):
            if any(isinstance(x, (Dyn, Index)) for x in xs):
                return self.op(name, *xs)
            if name == "pow":  # `pow(a, b)` is `a ** b`, integer on static integers
                return self.scalar_arith("**", xs[0], xs[1], span)
            exact = static_integer(name, xs)
            if exact is not None:
                return exact
            return static_real(name, *(to_real(x) for x in xs))
        return self.elementwise(one, args, span, f"{name}()")

    # conditions -----------------------------------------------------------------------------
    def compare(self, op: str, a, b, span):
        if is_array(a) or is_array(b):
            raise ShapeError(f"'{op}' compares scalars, got {describe(a)} and {describe(b)}",
                             span, hint="compare elements, e.g. A[i, j] > 0")
        if isinstance(a, Dyn) or isinstance(b, Dyn):
            return self.op(COMPARISONS[op], a, b)
        # A loop index against a static value is a static condition when the loop is
        # written out (one branch lowered); kept as a loop, it is one where the answer is
        # the same in every iteration, else the loop is written out (`loop_index.compare`).
        if isinstance(a, Index) or isinstance(b, Index):
            return loop_index.compare(_PY_COMPARE[op], a, b)
        return bool(_PY_COMPARE[op](a, b))

    def condition(self, c, span):
        """A condition's value: a static bool or a `Dyn` (nonzero is true)."""
        if is_array(c):
            raise ShapeError(f"a condition must be a scalar, got {describe(c)}", span)
        if isinstance(c, Dyn):
            return c
        return bool(c)

    def logic(self, op: str, a: Dyn, b):
        if not isinstance(b, Dyn):
            if op == "and":
                return a if b else False
            return True if b else a
        return self.op(op, a, b)

    def merge(self, test: Dyn, a, b, name, span):
        """Select between two values elementwise: `a` where `test` holds, else `b`."""
        if is_array(a) != is_array(b) or (is_array(a) and a.shape != b.shape):
            what = f"'{name}' has" if name else "the two branches have"
            raise ShapeError(f"{what} shape {shape_of(a)} in one branch and {shape_of(b)} in "
                             "the other", span, hint="a dynamic condition needs both branches "
                             "to give the same shape")

        def one(x, y):
            if not isinstance(x, Dyn) and not isinstance(y, Dyn) and type(x) is type(y) \
                    and memo_key(x) == memo_key(y):
                return x
            return self.op("select", test, x, y)
        return self.elementwise(one, [a, b], span, "select")

    # arrays ---------------------------------------------------------------------------------
    def stack(self, items: list, span):
        if not items:
            return np.empty((0,), dtype=object)
        first = shape_of(items[0])
        self.check_rank(len(first) + 1, span, "this array")
        self.check_size(len(items) * math.prod(first), span, "this array")
        self.budget.charge(len(items), span, "this array")
        for item in items[1:]:
            if shape_of(item) != first:
                raise ShapeError(f"array elements must have one shape, got {first} and "
                                 f"{shape_of(item)}", span)
        out = np.empty((len(items), *first), dtype=object)
        for k, item in enumerate(items):
            out[k] = item
        return out

    def getitem(self, value, index: list, span):
        if not is_array(value):
            raise ShapeError(f"cannot index {describe(value)}", span)
        return value[self._numpy_index(value, index, span)]

    def _numpy_index(self, value, index: list, span) -> tuple:
        shape = value.shape
        if len(index) > value.ndim:
            raise IndexRangeError(f"too many indices: {len(index)} for an array of shape "
                                  f"{list(shape)}", span)
        key = []
        for axis, (item, span) in enumerate(index):
            dim = shape[axis]
            if isinstance(item, slice):
                key.append(item)
                continue
            values = item.flat if is_array(item) else [item]
            for i in values:
                if not -dim <= i < dim:
                    raise IndexRangeError(
                        f"index {i} is out of range for axis {axis} of size {dim}", span,
                        hint=f"valid indices are {-dim} to {dim - 1}")
            key.append(item.astype(np.intp) if is_array(item) else item)
        return tuple(key)

    def setitem(self, value, index: list, new, span):
        if not is_array(value):
            raise ShapeError(f"cannot assign to an element of {describe(value)}", span)
        key = self._numpy_index(value, index, span)
        target_shape = value[key].shape if is_array(value[key]) else ()
        if is_array(new) and new.shape != target_shape:
            raise ShapeError(f"cannot assign shape {list(new.shape)} to a part of shape "
                             f"{list(target_shape)}", span)
        copy = value.copy()  # arrays are values: the old one stays as it was
        if is_array(new) or not target_shape:
            copy[key] = new
        else:
            part = np.empty(target_shape, dtype=object)
            part.fill(new)
            copy[key] = part
        return copy

    def matmul(self, a, b, span):
        if not (is_array(a) and is_array(b)) or a.ndim > 2 or b.ndim > 2:
            raise ShapeError(f"'@' needs vectors or matrices, got {describe(a)} and "
                             f"{describe(b)}", span)
        inner_a = a.shape[-1]
        inner_b = b.shape[0]
        if inner_a != inner_b:
            raise ShapeError(f"'@' shapes {list(a.shape)} and {list(b.shape)} do not fit: "
                             f"{inner_a} != {inner_b}", span)
        left = a if a.ndim == 2 else a.reshape(1, -1)
        right = b if b.ndim == 2 else b.reshape(-1, 1)
        self.check_size(left.shape[0] * right.shape[1], span, "this product")
        self.budget.charge(left.shape[0] * right.shape[1] * inner_a, span, "this product")
        out = np.empty((left.shape[0], right.shape[1]), dtype=object)
        for i in range(left.shape[0]):
            for j in range(right.shape[1]):
                out[i, j] = self.dot_flat(list(left[i, :]), list(right[:, j]), span)
        shape = tuple(([a.shape[0]] if a.ndim == 2 else []) + ([b.shape[1]] if b.ndim == 2 else []))
        return out.reshape(shape) if shape else out.flat[0]

    def dot_flat(self, xs: list, ys: list, span):
        total = 0
        for x, y in zip(xs, ys, strict=True):
            total = self.scalar_arith("+", total, self.scalar_arith("*", x, y, span), span)
        return total

    def range(self, bounds: list, call):
        if not 1 <= len(bounds) <= 3:
            from ..errors import ArityError
            raise ArityError(f"range() takes 1 to 3 arguments, got {len(bounds)}", call.span)
        for value, arg in zip(bounds, call.args, strict=True):
            if isinstance(value, Dyn) or (is_array(value)):
                raise StaticValueError("range bounds must be static, but this one depends on an "
                                       "input" if isinstance(value, Dyn) else
                                       "range bounds must be integers", arg.span)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeMismatchError(f"range bounds must be integers, got {describe(value)}",
                                        arg.span)
        if len(bounds) == 3 and bounds[2] == 0:
            raise ShapeError("range() step cannot be zero", call.args[2].span)
        return range(*bounds)

    def reduce(self, name: str, items: list, span):
        """sum, prod, min, max of a list of values, folded left in order."""
        if not items:
            if name == "sum":
                return 0
            if name == "prod":
                return 1
            raise ShapeError(f"{name}() of an empty sequence", span)
        total = items[0]
        for item in items[1:]:
            if name in ("sum", "prod"):
                total = self.arith("+" if name == "sum" else "*", total, item, span)
            else:
                total = self.apply(name, [total, item], span)
        return total


def _too_big(bits: int, message: str, span) -> Exception:
    error = limits.exceeded("int_bits", bits, message, span)
    error.hint = ("write a real (2.0 ** 5000 is inf, as IEEE says), or " + error.hint[0].lower()
                  + error.hint[1:])
    return error


_PY_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
               "==": operator.eq, "!=": operator.ne}
