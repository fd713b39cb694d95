"""Arrays whose tail is one value: `zeros(n)` that a program fills in from the front.

`y = zeros(n)` then, step after step, `y = y + h * f(y)` where `f(y)[i]` reads `y[i - 1]` (an
integrator along a chain, a recurrence started from rest) changes only the first few elements
of `y` per step; the others stay 0 until the front reaches them. Listed, each step costs n
nodes' worth of lowering, most of them folding `x[i] * 0` to 0: the ODE of GradBench at
n = 10^5 took its whole step limit. A `Padded` keeps the elements before the front listed
(`head`) and the rest as one value (`fill`, static or a node). Elementwise operations apply to
the heads and once to the fills; a comprehension is written out up to the point from which its
body, lowered once for the iterations after it, is one value whatever the iteration (`split`);
any other use lists the array, as before. The values are those of the array listed: the same
operations on the same elements, the tail's computed once.
"""

from __future__ import annotations

from collections import ChainMap

import numpy as np

from ...graph.ir import Builder
from ..loop_index import Changes, Index
from ..values import Dyn, is_array, memo_key
from .regions import BodyBuilder, Irregular, in_body, range_bounds
from .wholes import Shaped


class Padded(Shaped):
    """The vector of n elements whose first `len(head)` are `head` and the rest `fill`."""

    __slots__ = ("head", "fill", "shape", "span", "elements")

    def __init__(self, head: np.ndarray, fill, n: int, span):
        self.head, self.fill, self.shape, self.span = head, fill, (n,), span
        self.elements = None


def make(head, fill, n: int, span):
    """The vector `head` then `fill` up to n elements: a Padded, its head without the
    trailing elements equal to a static fill; the listed array where nothing is left to
    the fill."""
    m = len(head)
    while m and _same(head[m - 1], fill):
        m -= 1
    if m >= n:
        return head
    return Padded(head[:m], fill, n, span)


def _same(a, b) -> bool:
    """Whether `a` and `b` are one value (0.0 and -0.0 are not), as `Values.merge` asks."""
    return type(a) is type(b) and memo_key(a) == memo_key(b)


def filled(lw, n: int, fill, span):
    """`zeros(n)` or `ones(n)` (fill 0.0 or 1.0) in the program's own builder, where n is past
    `limits.unroll`: a Padded with nothing before its fill; None otherwise (listed)."""
    if not isinstance(lw.v.b, Builder) or n <= lw.v.limits.unroll:
        return None
    return Padded(np.empty(0, dtype=object), fill, n, span)


def listed(lw, p: Padded) -> np.ndarray:
    """The elements of `p` (made once, within the elements limit)."""
    if p.elements is None:
        n = p.shape[0]
        lw.v.check_size(n, p.span, "this array")
        p.elements = _extended(p, n)
    return p.elements


def element(p: Padded, k: int):
    """Element k (a static integer in range, perhaps negative) of `p`."""
    k %= p.shape[0]
    return p.head[k] if k < len(p.head) else p.fill


def static_index(p, index: list) -> bool:
    """Whether `p[index]` is an element of Padded `p` at a static integer in range."""
    return isinstance(p, Padded) and len(index) == 1 and type(index[0][0]) is int and \
        -p.shape[0] <= index[0][0] < p.shape[0]


def setitem(p: Padded, k: int, new):
    """`p` with element k (static, in range) set to the scalar `new`."""
    k %= p.shape[0]
    head = _extended(p, max(len(p.head), k + 1))
    head[k] = new
    return make(head, p.fill, p.shape[0], p.span)


def _extended(p: Padded, m: int) -> np.ndarray:
    """A new array of the first m elements of `p` (m at least its head's length)."""
    out = np.empty(m, dtype=object)
    out[:len(p.head)] = p.head
    out[len(p.head):] = np.full(m - len(p.head), p.fill, dtype=object)
    return out


def elementwise(lw, rule, args: list, span):
    """`rule` (a scalar-wise operation that broadcasts over arrays) of `args`, Padded vectors
    of one length and scalars, as a Padded: the rule over the heads made one length, and once
    over the fills. None for other arguments (the caller lists them) or in a loop's body."""
    if not isinstance(lw.v.b, Builder):
        return None
    vectors = [a for a in args if isinstance(a, Padded)]
    n = vectors[0].shape[0]
    if any(isinstance(a, Shaped) and not (isinstance(a, Padded) and a.shape == (n,))
           or is_array(a) for a in args):
        return None
    m = max(len(a.head) for a in vectors)
    heads, fills = [], []
    for a in args:
        if isinstance(a, Padded):
            heads.append(_extended(a, m))
            fills.append(a.fill)
        else:
            heads.append(a)
            fills.append(a)
    fill = rule(*fills)
    if is_array(fill) or isinstance(fill, Shaped):
        return None
    head = rule(*heads) if m else np.empty(0, dtype=object)
    return make(head, fill, n, span)


class Start(Irregular):
    """A read of a Padded's head in the iterations kept as a loop: the loop written out
    `more` iterations further is past it."""

    def __init__(self, more: int):
        super().__init__("a read of the listed elements of an array")
        self.more = more


def read(lw, p: Padded, index: list):
    """`p[index]` in a loop's body, the subscript an `Index`: ("value", the fill) where every
    iteration reads the tail, ("array", the head) where every one reads the head; in the body
    `split` lowers, `Start` (how many iterations more to write out); else ("array", `p`
    listed)."""
    (item, _) = index[0]
    if len(index) != 1 or not isinstance(item, Index):
        return "array", listed(lw, p)
    low = high = item.b
    for body, a in item.terms:
        low += min(0, a * (body.n - 1))
        high += max(0, a * (body.n - 1))
    m = len(p.head)
    if m <= low and high < p.shape[0]:
        return "value", p.fill
    if 0 <= low and high < m:
        return "array", p.head
    bb = lw.v.b
    if bb.padded_split and len(item.terms) == 1 and item.terms[0][0] is bb and \
            item.terms[0][1] > 0 and item.b < m:
        raise Start(-((item.b - m) // item.terms[0][1]))  # ceil((m - b) / a)
    return "array", listed(lw, p)


# The most times `split` moves its first kept iteration on: each move is one lowering of
# the body, and a body that reads the heads of several arrays at several offsets needs one
# per read that lands in a head.
MOVES = 8


def split(lw, elt, clause, n: int, scope, span):
    """`[elt for NAME in range(...)]` (n iterations) as a Padded, where its scope holds one:
    the iterations before some k written out, the rest lowered once as a loop's body whose
    value is the same in every iteration (static, or a node from outside the loop), that
    value the fill. None where the scope holds none or no such k is found (the caller
    lowers the comprehension as before)."""
    if not isinstance(lw.v.b, Builder) or clause.name in lw.wrt or n <= lw.v.limits.unroll:
        return None
    held = _padded(scope)
    if not held:
        return None
    start = range_bounds(lw, clause.iter, scope)[0]
    k = min(max(len(v.head) for v in held), n)
    for _ in range(MOVES):
        if k >= n:
            return None
        got = in_body(lw, n - k, lambda bb, k=k: _tail(lw, bb, elt, clause.name, start + k,
                                                  scope))
        if isinstance(got, int):
            k += got
            continue
        if got is None:
            return None
        head = [lw.expr(elt, ChainMap({clause.name: lw.bound(clause.name, start + j)},
                                      scope)) for j in range(k)]
        if any(is_array(x) or isinstance(x, Shaped) for x in head):
            return None
        lw.v.check_size(k, span, "this comprehension")
        out = np.empty(k, dtype=object)
        out[:] = head
        return make(out, got[0], n, span)
    return None


def _tail(lw, bb: BodyBuilder, elt, name: str, first: int, scope):
    """The value of `elt` in every iteration from `first` on, lowered once in `bb`, as a
    1-tuple where it is one value in all of them; the number of iterations more to write
    out where the body reads a head (`Start`)."""
    bb.padded_split = True  # reads of a head raise Start: see `read`
    try:
        value = lw.expr(elt, ChainMap({name: Index.of(bb).plus(first)}, scope))
    except Start as need:
        return need.more
    except Changes as need:  # `i == 0`: the same answer from some iteration on
        if need.body is not bb or need.last < 0:
            raise
        return need.last + 1
    if isinstance(value, (bool, int, float)) or (isinstance(value, Dyn) and value.id < bb.base):
        return (value,)
    raise Irregular("a value that varies from one iteration to another")


def _padded(scope) -> list:
    """The Padded values `scope` binds (a ChainMap's maps too)."""
    maps = scope.maps if isinstance(scope, ChainMap) else [scope]
    found = []
    for m in maps:
        if isinstance(m, ChainMap):
            found += _padded(m)
        else:
            found += [v for v in m.values() if isinstance(v, Padded)]
    return found
