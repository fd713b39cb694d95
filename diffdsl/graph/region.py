"""The attribute of a region node: a loop kept as a loop (DESIGN.md, decision 9)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class Region:
    """A loop kept as a loop: the attribute of a `region` node.

    The body is a graph with inputs "@i" (the index, one element: 0, 1, ..., n - 1 as a
    real), "@c" (the captured values: the node's first `captures` arguments, the same in
    every iteration) and "@s0", "@s1", ... (streams: the window of an array that iteration i
    reads), and outputs "@sum" (summed over the iterations) and "@map" (stacked). Stream j is
    the next `length` arguments of the node, an array's elements in row-major order; iteration
    i reads its elements `offset + stride * i + t` for t below the width of port "@s{j}".
    The region's values, read by `part` nodes, are the sums, then iteration 0's map outputs,
    iteration 1's, ...
    """

    n: int
    body: object  # ir.Graph
    captures: int
    streams: tuple[tuple[int, int, int], ...]  # (length, stride, offset) per stream

    def key(self) -> str:
        return f"{self.n}:{self.captures}:{self.streams}:{self.body.key()}"

    def __eq__(self, other) -> bool:
        return isinstance(other, Region) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    @property
    def sums(self) -> int:
        return self.body.outputs["@sum"].size

    @property
    def maps(self) -> int:
        return self.body.outputs["@map"].size

    @property
    def size(self) -> int:
        """How many values the region has: its sums, then n rows of map outputs."""
        return self.sums + self.n * self.maps

    def widths(self) -> list[int]:
        return [self.body.inputs[f"@s{j}"].size for j in range(len(self.streams))]
