"""Inputs read in place: an input larger than `limits.unroll` elements is one `array` node,
and its elements become nodes only where the program needs them one by one.

A loop kept as a loop that reads the input at an affine index streams it whole from where it
lies (regions.py), so a program over a million data points has a graph the size of its text.
Anything else the program does with the input (an elementwise operation, a call, a slice)
lists its elements first (`listed`), as every input was before; an element at a static
index is its one node. The graph's input port is then whole (`Port.whole`), with whichever
element nodes the program made beside its array node.
"""

from __future__ import annotations

import math

import numpy as np

from ...graph.ir import Builder


class Shaped:
    """A value whose elements are not listed until needed: its shape's rank and size."""

    __slots__ = ()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class WholeInput(Shaped):
    """The value of an input bound in place: its name, shape, `array` node, and, once a use
    needed them, its elements (an array of `Dyn`s, or one for a scalar)."""

    __slots__ = ("name", "shape", "node", "span", "elements")

    def __init__(self, name: str, shape: tuple, node: int, span):
        self.name, self.shape, self.node, self.span = name, shape, node, span
        self.elements = None


def root_builder(b):
    """The builder of the program's graph, under the bodies of loops being lowered."""
    while not isinstance(b, Builder):
        b = b.parent
    return b


def listed(lw, w: WholeInput):
    """The input's elements as an array of `Dyn`s (made once), within the elements limit."""
    if w.elements is None:
        lw.v.check_size(w.size, w.span, f"input '{w.name}' read element by element")
        b = root_builder(lw.v.b)
        arr = np.empty(w.size, dtype=object)
        for k in range(w.size):
            arr[k] = lw.v.dyn(b.input(w.name, k))
        w.elements = arr.reshape(w.shape)
    return w.elements


def element(lw, w: WholeInput, subs: list):
    """`w[subs]` where every subscript is a static integer in range: that element's node
    alone; None for any other subscript (the caller lists the elements)."""
    if len(subs) != w.ndim:
        return None
    flat = 0
    for (item, _), d in zip(subs, w.shape, strict=True):
        if type(item) is not int or not -d <= item < d:
            return None
        flat = flat * d + item % d
    return lw.v.dyn(root_builder(lw.v.b).input(w.name, flat))


def row_elements(lw, w: WholeInput, k: int):
    """Row `k` (a static integer in range) of `w`: its element nodes alone."""
    b = root_builder(lw.v.b)
    width = math.prod(w.shape[1:])
    k %= w.shape[0]
    if w.ndim == 1:
        return lw.v.dyn(b.input(w.name, k))
    out = np.empty(width, dtype=object)
    for t in range(width):
        out[t] = lw.v.dyn(b.input(w.name, k * width + t))
    return out.reshape(w.shape[1:])
