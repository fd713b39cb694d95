"""The variable of a loop kept as a loop, as lowering's values see it."""

from __future__ import annotations


class Index:
    """The variable of a loop kept as a loop (lower/regions.py): `a * i + b` of the iteration
    i of the region `builder` builds. Affine arithmetic with static integers keeps it an
    index; anything else uses its value as a real. It has no static value: comparing or
    testing it as Python would is an error, never a silent answer."""

    __slots__ = ("builder", "a", "b")

    def __init__(self, builder, a: int, b: int):
        self.builder, self.a, self.b = builder, a, b

    def node(self, builder) -> int:
        """Its value as a real, a node of `builder` (the body or one nested in it)."""
        i = self.builder.index
        if self.a != 1:
            i = builder.op("mul", builder.const(float(self.a)), i)
        return i if self.b == 0 else builder.op("add", i, builder.const(float(self.b)))

    def _static(self, *_):
        raise TypeError("a loop index has no static value")

    __bool__ = __int__ = __index__ = __float__ = __eq__ = __ne__ = __lt__ = __le__ = _static
    __gt__ = __ge__ = __neg__ = _static
    __hash__ = object.__hash__
