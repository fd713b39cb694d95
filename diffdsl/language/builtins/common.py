"""What the builtin modules share: checks of a call's arguments, and scalar arithmetic on
static numbers and `Dyn`s for the builtins composed of the op table's ops.

Each builtin takes the value algebra `v`, the evaluated arguments and the call node (for its
name and spans); the checks raise errors located at the call or at the argument at fault.
"""

from __future__ import annotations

import math

from ...errors import ArityError, StaticValueError, TypeMismatchError
from ..values import Dyn, describe, memo_key


def arity(call, args, *counts) -> None:
    """Refuse a call with a number of arguments not among `counts`."""
    if len(args) not in counts:
        want = " or ".join(str(c) for c in counts)
        plural = "" if counts == (1,) else "s"
        raise ArityError(f"{call.func}() takes {want} argument{plural}, got {len(args)}",
                         call.span)


def static_int(value, call, k: int) -> int:
    """Argument `k` (from 0), which must be a static integer."""
    if isinstance(value, Dyn):
        raise StaticValueError(f"argument {k + 1} of {call.func}() must be static",
                               call.args[k].span)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeMismatchError(f"argument {k + 1} of {call.func}() must be an integer, got "
                                f"{describe(value)}", call.args[k].span)
    return value


class Scalars:
    """Scalar arithmetic on static numbers and `Dyn`s: static operands fold."""

    def __init__(self, v, span):
        self.v, self.span = v, span

    def add(self, a, b):
        return self.v.scalar_arith("+", a, b, self.span)

    def sub(self, a, b):
        return self.v.scalar_arith("-", a, b, self.span)

    def mul(self, a, b):
        return self.v.scalar_arith("*", a, b, self.span)

    def div(self, a, b):
        return self.v.scalar_arith("/", a, b, self.span)

    def neg(self, a):
        return self.v.op("neg", a) if isinstance(a, Dyn) else -a

    def f(self, name, *xs):
        return self.v.apply(name, list(xs), self.span)

    def cmp(self, op, a, b):
        return self.v.compare(op, a, b, self.span)

    def shift(self, m):
        """What logsumexp and softmax subtract before `exp`, `m` the largest element: `m`
        rounded down, so that no `exp` overflows; 0 where `m` is infinite (all -inf gives
        -inf, any +inf gives +inf, not NaN) or NaN. Rounded down, it is piecewise constant,
        so no derivative flows through it: the derivative by the shift, zero, would otherwise
        be computed as 1 minus the sum of the softmax weights, which loses the digits of the
        largest element's partial as the elements grow in number."""
        return self.sel(self.cmp("<", self.f("abs", m), math.inf), self.f("floor", m), 0.0)

    def sel(self, c, a, b):
        """`a` where `c` holds (nonzero), else `b`."""
        if not isinstance(c, Dyn):
            return a if c else b
        if not isinstance(a, Dyn) and not isinstance(b, Dyn) and type(a) is type(b) \
                and memo_key(a) == memo_key(b):
            return a
        return self.v.op("select", c, a, b)
