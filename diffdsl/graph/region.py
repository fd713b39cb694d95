"""The attribute of a region node: a loop kept as a loop (DESIGN.md, decision 9)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


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
    iteration 1's, ..., then, for each "@sum" output combined by `min` or `max` (`combine`,
    one kind per output, "add" where empty), the iteration it came from (its winner, as a
    real): the outputs are folded left in iteration order with the op of that name, which
    keeps the earlier value on a tie, as the unrolled `min(...)` and `max(...)` do.

    A scan (`carry` > 0, a `for` loop kept as a loop) also carries a state from one iteration
    to the next: the body reads it at port "@h" and writes the next at "@next". Its initial
    value is the node's last `carry` arguments (after the streams), and its final value is
    the region's last `carry` values (after the winners). The iterations of a scan run in
    order, one after another; those of a region without carry are independent.

    A stream may also be read whole (`in_place`): the body's port is an `array` node, which
    loops inside the body stream as a graph's loops stream an input read in place (k-means'
    centroids, read by the loop over them inside the loop over the points).
    """

    n: int
    body: object  # ir.Graph
    captures: int
    streams: tuple[tuple[int, int, int], ...]  # (length, stride, offset) per stream
    combine: tuple[str, ...] = ()  # per "@sum" output: "add", "min" or "max"; () all "add"
    carry: int = 0  # the state a scan carries from one iteration to the next
    # Per stream, -1 (its elements are arguments, one each) or k >= 0: its one argument is a
    # region node and its elements are that region's values k, k + 1, ... (a scan's pullback
    # reads the states it stored so, without a part node per element). () is all -1.
    whole: tuple[int, ...] = ()

    def key(self) -> str:
        return self._key

    @cached_property
    def _key(self) -> str:  # made once: regions are hashed by it, in every builder's table
        kinds = f":{','.join(self.combine)}" if any(k != "add" for k in self.combine) else ""
        carry = f":h{self.carry}" if self.carry else ""
        whole = f":w{self.whole}" if self.whole else ""
        return f"{self.n}:{self.captures}:{self.streams}:{self.body.key()}{kinds}{carry}{whole}"

    def source(self, j: int) -> int:
        """-1 where stream j's elements are arguments, else the first value of the region
        node that is its one argument."""
        return self.whole[j] if self.whole else -1

    @cached_property
    def _in_place(self) -> tuple[bool, ...]:
        return tuple(self.body.inputs[f"@s{j}"].whole is not None
                     for j in range(len(self.streams)))

    def in_place(self, j: int) -> bool:
        """Whether the body reads stream j whole: its port "@s{j}" is an `array` node of the
        body (an input read in place by loops nested in this one), the stream of stride 0
        and offset 0 over an array node of the graph around it."""
        return self._in_place[j]

    def taken(self, j: int) -> int:
        """How many arguments stream j takes."""
        return 1 if self.source(j) >= 0 else self.streams[j][0]

    def kind(self, e: int) -> str:
        """How "@sum" output `e` is combined over the iterations."""
        return self.combine[e] if self.combine else "add"

    @cached_property
    def winners(self) -> list[int]:
        """The "@sum" outputs combined by min or max, each with a winner among the values
        (made once: a pullback's region may have thousands of sums, asked for each)."""
        return [e for e in range(self.sums) if self.kind(e) != "add"]

    @cached_property
    def _winner_at(self) -> dict[int, int]:
        return {e: k for k, e in enumerate(self.winners)}

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
        """How many values the region has: its sums, n rows of map outputs, the winners, the
        final carried state."""
        return self.sums + self.n * self.maps + len(self.winners) + self.carry

    @cached_property
    def work(self) -> int:
        """How many nodes the region is written out: its body's, n times (a region inside
        the body counted written out too)."""
        return self.n * written_size(self.body)

    @property
    def arity(self) -> int:
        """How many arguments its node takes: captures, streams, the initial state."""
        return self.captures + sum(self.taken(j) for j in range(len(self.streams))) + self.carry

    def carry_value(self, k: int) -> int:
        """The value that holds element `k` of the final carried state."""
        return self.size - self.carry + k

    def with_body(self, body) -> Region:
        return Region(self.n, body, self.captures, self.streams, self.combine, self.carry,
                      self.whole)

    def winner_value(self, e: int) -> int:
        """The value that holds the winner of min/max output `e`."""
        return self.sums + self.n * self.maps + self._winner_at[e]

    def widths(self) -> list[int]:
        return [self.body.inputs[f"@s{j}"].size for j in range(len(self.streams))]


def written_size(graph) -> int:
    """How many nodes `graph` is with its regions written out."""
    return sum(node.attr.work if node.op == "region" else 1 for node in graph.nodes)
