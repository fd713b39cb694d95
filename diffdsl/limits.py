"""Limits on the work a program may ask of the compiler, checked before the work is done.

Lowering unrolls loops, comprehensions, calls and arrays into scalar nodes, so a short file
can ask for unbounded time or memory: `input x[10000000]`, a loop over `range(10**9)`, a static
integer squared 40 times. Each limit stops such a program with a located error (exit 2) before
memory is spent. The defaults keep a build under about ten seconds and a gigabyte; a user
raises one without editing code, with an environment variable (`DIFFDSL_MAX_NODES=5000000`),
with `--limit nodes=5000000` on the command line, or in Python with
`with diffdsl.limits.using(nodes=5_000_000): ...` around `diffdsl.compile`.

A `using` block holds in the thread (and the `contextvars` context) that entered it: threads
compiling side by side each see their own limits. Work diffdsl moves to a thread of its own
(`deepstack.call`) takes the caller's context along.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from dataclasses import dataclass, fields, replace

from .errors import LimitError


@dataclass(frozen=True)
class Limits:
    """The largest amount of each kind of work one compilation may do."""

    int_bits: int = 4096  # bits of a static integer (2 ** 4096 has 1,234 digits)
    elements: int = 1_000_000  # elements of one array (each becomes a node or a value)
    steps: int = 5_000_000  # loop iterations, comprehension elements, calls, element ops
    # nodes of one graph, the program's or a derivative's: the CPU tape's threshold, and room
    # for GradBench's k-means gradient (1,034,000 nodes)
    nodes: int = 2_000_000
    # iterations of a regular loop that lowering writes out; a longer one stays a loop (a
    # region, whose body is lowered once). A huge value unrolls every loop: the reference
    # semantics, which tests compare with.
    unroll: int = 64
    # values a loop's gradient stores of the states it carries (iterations x state); past
    # it, one state a segment of about sqrt(iterations), the others computed again
    stored: int = 10_000_000


NAMES = tuple(f.name for f in fields(Limits))
ENV = {name: f"DIFFDSL_MAX_{name.upper()}" for name in NAMES}
# What each limit counts, for messages.
WHAT = {"int_bits": "bits in a static integer", "elements": "elements in an array",
        "steps": "steps of unrolled work", "nodes": "nodes in a graph",
        "unroll": "iterations of a loop written out",
        "stored": "states a loop's gradient stores"}

# The `using` blocks in force, innermost last: a tuple, replaced (never changed) by each block.
_overrides: contextvars.ContextVar[tuple] = contextvars.ContextVar("diffdsl_limits",
                                                                 default=())


def current() -> Limits:
    """The limits in force: the defaults, then the environment, then `using` blocks."""
    values = {}
    for name in NAMES:
        text = os.environ.get(ENV[name])
        if text is not None:
            values[name] = parse_value(name, text, ENV[name])
    for layer in _overrides.get():
        values.update(layer)
    return replace(Limits(), **values)


@contextlib.contextmanager
def using(**changes: int):
    """Raise (or lower) limits inside a `with` block: `using(nodes=5_000_000)`."""
    for name, value in changes.items():
        if name not in NAMES:
            raise LimitError(f"unknown limit '{name}'", hint=f"the limits are: {', '.join(NAMES)}")
        parse_value(name, str(value), name)
    token = _overrides.set((*_overrides.get(), dict(changes)))
    try:
        yield current()
    finally:
        _overrides.reset(token)


def parse_value(name: str, text: str, where: str) -> int:
    """A limit's value: a positive integer (`_` separators allowed)."""
    try:
        value = int(str(text).replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise LimitError(f"{where} must be a positive integer, got {text!r}")
    return value


def exceeded(name: str, limit: int, message: str, span=None) -> LimitError:
    """The error for a program that asks for more than the limit `name` (now `limit`) allows."""
    return LimitError(
        f"{message} (the limit is {limit:,} {WHAT[name]})", span,
        hint=f"raise it with limits={{'{name}': N}} or {ENV[name]}=N in the environment "
             "(README, \"Limits\")")


class Budget:
    """A count of the steps one compilation has taken, against the `steps` limit."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0

    def charge(self, count: int, span=None, what: str = "this") -> None:
        """Count `count` steps about to be taken; raise before taking them if over the limit."""
        self.used += count
        if self.used > self.limit:
            raise exceeded("steps", self.limit,
                           f"{what} would take the compilation to {self.used:,} steps", span)
