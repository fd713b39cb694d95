"""The variables of loops kept as loops, as lowering's values see them."""

from __future__ import annotations

import math
import operator


class Index:
    """An affine function of the variables of loops kept as loops (lower/regions.py):
    `b + sum(a * i)` over `terms`, pairs (builder, a) where i is the iteration of the region
    that builder builds. Affine arithmetic (with static integers, and sums of indices) keeps
    it an index; anything else uses its value as a real. It has no static value: comparing or
    testing it as Python would is an error, never a silent answer."""

    __slots__ = ("terms", "b")

    def __init__(self, terms: tuple, b: int):
        self.terms, self.b = tuple((k, a) for k, a in terms if a != 0), b

    @classmethod
    def of(cls, builder) -> Index:
        """The variable of the loop `builder` builds."""
        return cls(((builder, 1),), 0)

    def node(self, builder) -> int:
        """Its value as a real, a node of `builder` (the body or one nested in it)."""
        out = builder.const(float(self.b))
        for body, a in self.terms:
            i = body.index if a == 1 else builder.op("mul", builder.const(float(a)), body.index)
            out = builder.op("add", out, i)
        return out

    def scaled(self, k: int) -> Index:
        return Index(tuple((body, a * k) for body, a in self.terms), self.b * k)

    def plus(self, other) -> Index:
        """`self + other`, other an Index or a static integer."""
        if isinstance(other, int):
            return Index(self.terms, self.b + other)
        merged = dict((id(body), [body, a]) for body, a in self.terms)
        for body, a in other.terms:
            merged.setdefault(id(body), [body, 0])[1] += a
        return Index(tuple((body, a) for body, a in merged.values()), self.b + other.b)

    def _static(self, *_):
        raise TypeError("a loop index has no static value")

    __bool__ = __int__ = __index__ = __float__ = __eq__ = __ne__ = __lt__ = __le__ = _static
    __gt__ = __ge__ = __neg__ = _static
    __hash__ = object.__hash__


def compare(test, a, b) -> bool:
    """`test(a, b)`, a Python comparison, with a loop index on one side or both: its value
    where it is the same in every iteration of the loop (`t == 0` in a scan's body, which
    runs from its second iteration; `i < n` in a loop over range(n)). Where it is not,
    TypeError writes the loop out, where the condition is static in each iteration."""
    if isinstance(a, Index) and isinstance(b, Index):  # integers: a - b is exact
        a, b = a.plus(b.scaled(-1)), 0
    index, other = (a, b) if isinstance(a, Index) else (b, a)

    def at(i: int) -> bool:  # its value in iteration i
        v = index.b + sum(k * i for _, k in index.terms)
        return bool(test(v, other) if index is a else test(other, v))

    if not index.terms:
        return at(0)
    if len(index.terms) > 1:
        raise TypeError("a comparison of the indices of two loops")
    (body, k), = index.terms
    n = body.n
    if test in (operator.eq, operator.ne):  # the other side is v(i) in one iteration at most
        if isinstance(other, int):  # exactly, however large (i == 10 ** 400)
            q, r = divmod(other - index.b, k)
            near = () if r else (q,)
        else:
            exact = (other - index.b) / k
            near = (math.floor(exact), math.ceil(exact)) if math.isfinite(exact) else ()
        hits = [i for i in near if 0 <= i < n and index.b + k * i == other]
        if hits:  # the answer differs from the last iteration's there, or before the last
            raise Changes(body, hits[0] if hits[0] < n - 1 else n - 2)
    elif at(0) != at(n - 1):  # an order is monotone in i: else the same throughout
        raise Changes(body, _last_change(at, n))
    return at(0)


class Changes(TypeError):
    """A comparison of the index of the loop `body` builds whose answer changes with the
    iteration, the same from iteration `last + 1` to the end."""

    def __init__(self, body, last: int):
        super().__init__("a loop index compared where the answer changes with the iteration")
        self.body, self.last = body, last


def _last_change(at, n: int) -> int:
    """The last iteration whose answer is not that of the loop's last, `at(i)` the answer of
    an order in iteration i (monotone in i: bisection)."""
    end = at(n - 1)
    low, high = 0, n - 1  # at(high) == end
    while low < high:
        mid = (low + high) // 2
        if at(mid) == end:
            high = mid
        else:
            low = mid + 1
    return low - 1
