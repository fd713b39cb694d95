"""Reads of arrays at a loop's index inside a region's body (regions.py): `A[i, ...]` of an
array from outside the loop, at an index affine in the loop variables of the bodies around
it, becomes a stream of the array's elements, a window of which each iteration sees."""

from __future__ import annotations

import math

import numpy as np

from ..loop_index import Index
from ..values import is_array
from . import mapped, padded
from .regions import BodyBuilder, Irregular, WholeItems
from .wholes import WholeInput


def read(lw, value, index: list, span):
    """`value[index]` where some subscripts are `Index`es of the innermost body or of bodies
    around it: stream reads of the array's elements (of an input read in place, from where it
    lies). Raises `Irregular` where a region cannot read it so."""
    v = lw.v
    bb = v.b
    if isinstance(value, mapped.Mapped):  # a comprehension's rows: computed here if they can be
        done = mapped.fused(lw, value, index, span)
        if done is not None:
            return done
        value = mapped.listed(lw, value)
    if isinstance(value, padded.Padded) and isinstance(bb, BodyBuilder):
        kind, value = padded.read(lw, value, index)  # its fill, its head or its elements
        if kind == "value":
            return value
    if not isinstance(bb, BodyBuilder) or not (is_array(value) or isinstance(
            value, WholeInput)) or len(index) > value.ndim:
        raise Irregular("an index of a loop into something other than an array")
    enclosing = []  # bb and the bodies around it, innermost first
    at = bb
    while isinstance(at, BodyBuilder):
        enclosing.append(at)
        at = at.parent
    shape = value.shape
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    coeffs = {id(body): 0 for body in enclosing}
    offset = 0
    for d, (item, _) in enumerate(index):
        if isinstance(item, Index):
            low = high = item.b  # its range over every iteration of every loop in it
            for body, a in item.terms:
                if id(body) not in coeffs:
                    raise Irregular("an index of a loop that has ended")
                low += min(0, a * (body.n - 1))
                high += max(0, a * (body.n - 1))
                coeffs[id(body)] += a * strides[d]
            if low < 0 or high >= shape[d]:
                raise Irregular("an index out of range in some iteration")
            offset += item.b * strides[d]
        elif type(item) is int and -shape[d] <= item < shape[d]:
            offset += (item % shape[d]) * strides[d]
        else:
            raise Irregular("a subscript a region cannot read")
    terms = [(body, coeffs[id(body)]) for body in enclosing]
    rest = shape[len(index):]
    elements = value if isinstance(value, WholeInput) else list(value.flat)
    ids = _window(terms, elements, offset, math.prod(rest))
    out = np.empty(len(ids), dtype=object)
    for m, i in enumerate(ids):
        out[m] = v.dyn(i)
    return out.reshape(rest) if rest else out[0]


def _window(terms: list, elements: list, offset: int, width: int) -> list[int]:
    """Ids, in the innermost body of `terms` ((body, stride) pairs, innermost first), of the
    elements `offset + sum(stride * index) + t` for t below `width`. Where a body around it
    moves the window too, that body reads the window its loop needs first (a row of a matrix
    in a matrix-vector product), and the inner body streams through it."""
    (body, stride), outer = terms[0], terms[1:]
    if any(c for _, c in outer):
        # What the inner loop reads in one outer step: from its last iteration's window on
        # where it reads backwards (a convolution's x[i - j]).
        back = min(0, stride * (body.n - 1))
        items = _window(outer, elements, offset + back, abs(stride) * (body.n - 1) + width)
        return [body.read(tuple(items), stride, t - back) for t in range(width)]
    if isinstance(elements, WholeInput):
        items = WholeItems(_in_place(body.parent, elements), elements.size)
    else:
        items = tuple(body.parent_node(x) for x in elements)
    return [body.read(items, stride, offset + t) for t in range(width)]


def _in_place(b, w: WholeInput) -> int:
    """The node, in builder `b`, of input `w` read in place: its array node in the program's
    graph, and in a loop's body an array node the body reads whole from the body around it
    (a loop nested in another streams it so, not listed element by element)."""
    if not isinstance(b, BodyBuilder):
        return w.node
    return b.whole(WholeItems(_in_place(b.parent, w), w.size))
