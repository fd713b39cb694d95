"""Errors that diffdsl reports to users.

Every error a user can cause is a `DiffDSLError`. Errors in a `.dd` file carry a `Span`, and
`str(error)` renders them as ``file.dd:3:7: error: message``, the source line, and a caret
under the part at fault, so the command line prints them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    """A range of a source file: 1-based line and column of the start, and where it ends."""

    filename: str
    line: int
    column: int
    end_line: int
    end_column: int
    source: str = field(default="", repr=False, compare=False)

    def render(self) -> str:
        lines = self.source.splitlines()
        if not 1 <= self.line <= len(lines):
            return ""
        text = lines[self.line - 1]
        stop = self.end_column if self.end_line == self.line else len(text) + 1
        width = max(1, stop - self.column)
        # Tabs keep their width in the caret line, so the caret stays under the right place.
        pad = "".join(c if c == "\t" else " " for c in text[: self.column - 1])
        return f"    {text}\n    {pad}{'^' * width}"


class DiffDSLError(Exception):
    """Base class of every error diffdsl raises for a bad program, input or request."""

    kind = "error"

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint

    def located(self, span: Span | None) -> DiffDSLError:
        """This error, placed at `span` when it has no place yet (raised below the syntax)."""
        if self.span is None:
            self.span = span
        return self

    def __str__(self) -> str:
        head = f"error: {self.message}"
        if self.span is None:
            head = f"diffdsl: {head}"
        else:
            head = f"{self.span.filename}:{self.span.line}:{self.span.column}: {head}"
            shown = self.span.render()
            if shown:
                head += "\n" + shown
        if self.hint:
            head += f"\n    hint: {self.hint}"
        return head


class DDSyntaxError(DiffDSLError):
    """The text does not follow the grammar."""


class UnknownNameError(DiffDSLError):
    """A name that is not defined where it is used."""


class ArityError(DiffDSLError):
    """A call with the wrong number of arguments."""


class ShapeError(DiffDSLError):
    """Operands or values whose shapes do not fit together."""


class StaticValueError(DiffDSLError):
    """A dynamic value (one that depends on inputs) where a static one is needed."""


class IndexRangeError(DiffDSLError):
    """An index outside the bounds of an array."""


class AssignmentError(DiffDSLError):
    """Assignment to an input or a const, or another misuse of a name."""


class RecursionLimitError(DiffDSLError):
    """A recursion deeper than the language allows."""


class TypeMismatchError(DiffDSLError):
    """A value of the wrong kind: an array where a scalar is needed, a real where an integer is."""


class LimitError(DiffDSLError):
    """A program that asks for more work than a limit allows (see `diffdsl.limits`)."""


class InputError(DiffDSLError):
    """A missing, malformed or wrongly shaped value given for an input at evaluation."""


class UsageError(DiffDSLError):
    """A request that does not fit the program: unknown output or input name, bad option."""
