"""What a forward sweep from a few seeds can reach, so that it visits those nodes alone.

A Jacobian by forward mode, a Hessian or a colouring's sweeps run one forward sweep per input
element (or colour) over the same nodes. A sweep over every active node costs the whole
graph per column even where a seed reaches a few nodes (an element of `x` in a written-out
`x * 2` reaches one); with the users of each node listed once, a column costs what it reaches.
"""

from __future__ import annotations

from .ir import Builder


class Reach:
    """The active nodes in [start, stop) by their users, listed once for many forward sweeps
    over that range (`sweeps.forward`'s `reach`)."""

    def __init__(self, b: Builder, stop: int, active: bytearray, start: int = 0):
        self.b, self.start, self.stop = b, start, stop
        users: dict[int, list[int]] = {}
        nodes = b.nodes
        for i in range(start, stop):
            if active[i]:
                for a in set(nodes[i].args):
                    users.setdefault(a, []).append(i)
        self.users = users
        self._read = None

    def order(self, seeds) -> list[int]:
        """The nodes that the seeds reach (themselves included), in the builder's order: a
        node comes after its arguments, as a sweep needs them."""
        users = self.users
        seen = set(seeds)
        todo = list(seen)
        while todo:
            for u in users.get(todo.pop(), ()):
                if u not in seen:
                    seen.add(u)
                    todo.append(u)
        return sorted(i for i in seen if self.start <= i < self.stop)

    def read(self) -> set[int]:
        """The regions some of whose values (part nodes) a node in the range uses: the same
        for every sweep, so found once."""
        if self._read is None:
            self._read = read_parts(self.b, self.start, self.stop)
        return self._read


def read_parts(b: Builder, start: int, stop: int) -> set[int]:
    """The region nodes some of whose values (part nodes) are arguments of a node in
    [start, stop)."""
    parts = {a for i in range(start, stop) for a in b.nodes[i].args}
    return {b.nodes[a].args[0] for a in parts if b.nodes[a].op == "part"}

