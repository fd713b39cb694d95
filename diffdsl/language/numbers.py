"""Long array literals of plain numbers, read in bulk.

Generated `.dd` files hold data as literals: `const c = [0.27, -1.3, ...]` with 500,000
elements is 10 MB, and read token by token it becomes a million tokens and a syntax node,
a span and often a sign node per element (a 9.6 MB file took 36 s and 1.1 GB). Where an
array literal starts (a `[` after anything that cannot end an expression) and everything up
to its matching `]` is numbers, each with at most one sign, separated by commas (nested
lists allowed, of one shape), the literal is read here: one regex match per list and
Python's own `int` and `float` on the text of each number. The values are those lowering the
same literal element by element gives: Python ints for integer literals, floats for the
rest, signs applied as `-x` applies them (so `-0.0` stays negative).
"""

from __future__ import annotations

import re

import numpy as np

from .. import limits
from . import syntax as s

# Literals with fewer numbers than this are parsed as usual (a node per element).
BULK_MIN = 256
# Nesting deeper than this is left to the parser (arrays have at most 8 dimensions).
MAX_DEPTH = 8

_WS = r"[ \t\f\r\n]*"  # newlines inside brackets are spaces (the post-lexer drops them)
# The grammar's FLOAT and INT terminals, as its lexer tries them (FLOAT first).
_NUMBER = (r"(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
           r"|[0-9]+")
# One way only to match each space (else a long list that fails at its end backtracks
# exponentially): a space before a sign, or after it, or after the number.
_ITEM = rf"{_WS}(?:[+-]{_WS})?(?:{_NUMBER}){_WS}"
_ITEM_RE = re.compile(_ITEM)  # one element, matched whole
_SPACE = re.compile(r"[ \t\f\r\n]+")
_NEXT = re.compile(rf"{_WS}(\[|,{_WS}\]|,|\])")  # what follows a list in a list


def integer(text: str, bits: int, span) -> int:
    """An integer literal within the `int_bits` limit, judged by its digits before converting
    (converting costs time quadratic in the length), then exactly."""
    digits = text.lstrip("0")
    # 10 ** (d - 1) <= value, so value has more than (d - 1) * log2(10) bits.
    if (len(digits) - 1) * 3.3219 >= bits:
        raise limits.exceeded("int_bits", bits, f"this integer has {len(digits):,} digits", span)
    value = int(digits) if 0 < len(digits) <= 4000 else 0
    for k in range(0, len(digits) if len(digits) > 4000 else 0, 4000):
        chunk = digits[k:k + 4000]  # Python converts at most 4300 digits at once
        value = value * 10 ** len(chunk) + int(chunk)
    if value.bit_length() > bits:
        raise limits.exceeded("int_bits", bits, f"this integer has {value.bit_length():,} bits",
                              span)
    return value


class Bulk:
    """The value of the one token that stands for a literal read in bulk."""

    __slots__ = ("values",)

    def __init__(self, values: np.ndarray):
        self.values = values

    def node(self, span) -> s.NumberArray:
        return s.NumberArray(self.values, span)


def read(text: str, pos: int, int_bits: int) -> tuple[np.ndarray, int] | None:
    """The array written at `text[pos]` (a `[`) and the offset after its `]`, or None where
    it is not a literal of plain numbers of one shape with at least `BULK_MIN` of them, or
    an integer in it is longer than 40 digits (the parser's path checks it against the
    `int_bits` limit, which an integer read here must also meet)."""
    found = _nested(text, pos, 0)
    if found is None or len(found[0]) < BULK_MIN:
        return None
    items, shape, end = found
    try:
        values = _values(items, int_bits)
    except ValueError:  # a sign apart from its number (`- 1.5`): without the spaces
        values = _values([_SPACE.sub("", item) for item in items], int_bits)
    if values is None:
        return None
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array.reshape(shape), end


def _values(items: list[str], int_bits: int) -> list | None:
    """Python's numbers of the literals' texts (each has its sign, maybe spaces around)."""
    ints = [k for k, item in enumerate(items) if "." not in item and "e" not in item
            and "E" not in item]
    values = list(map(float, items)) if not ints else list(items)
    for k in ints:
        if len(values[k]) > 48:  # spaces included: far past any float, maybe past int_bits
            return None
        value = values[k] = int(values[k])
        if value.bit_length() > int_bits:
            return None
    if ints and len(ints) < len(items):
        kept = set(ints)
        values = [v if k in kept else float(v) for k, v in enumerate(values)]
    return values


def _nested(text: str, pos: int, depth: int):
    """(the numbers' texts, the shape, the end) of the list at `pos`, or None."""
    close = text.find("]", pos + 1)
    if close > 0 and text.find("[", pos + 1, close) < 0:  # a list of numbers, or nothing
        # (element by element: one regex over the whole list kept a backtracking record of
        # each element, 400 MB for 500,000)
        items = text[pos + 1:close].split(",")
        if len(items) > 1 and not items[-1].strip(" \t\f\r\n"):
            items.pop()  # a trailing comma
        if not all(map(_ITEM_RE.fullmatch, items)):
            return None
        return items, (len(items),), close + 1
    if depth >= MAX_DEPTH:
        return None
    step = _NEXT.match(text, pos + 1)
    if step is None or step.group(1) != "[":
        return None
    numbers, shape, rows, at = [], None, 0, step.start(1)
    while True:
        row = _nested(text, at, depth + 1)
        if row is None or (shape is not None and row[1] != shape):
            return None
        numbers += row[0]
        shape, rows = row[1], rows + 1
        step = _NEXT.match(text, row[2])
        if step is None:
            return None
        what = step.group(1)
        if what == ",":
            follow = _NEXT.match(text, step.end())
            if follow is None or follow.group(1) != "[":
                return None
            at = follow.start(1)
        elif what == "[":
            return None  # two lists side by side
        else:
            return numbers, (rows, *shape), step.end()
