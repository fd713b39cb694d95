"""The syntax tree of a `.dd` program: frozen dataclasses, each with the span it came from.

`eq=False` throughout: trees can be thousands of levels deep (a 10,000-term sum), and the
generated recursive `__eq__`/`__hash__` would hit Python's recursion limit; identity is all
the compiler needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DDSyntaxError, Span

node = dataclass(frozen=True, eq=False)


# Expressions -------------------------------------------------------------------------------

@node
class Num:
    value: int | float
    span: Span


@node
class Name:
    id: str
    span: Span


@node
class BinOp:
    op: str  # + - * / // % @ **
    left: object
    right: object
    span: Span


@node
class UnaryOp:
    op: str  # + -
    operand: object
    span: Span


@node
class Compare:
    op: str  # == != < <= > >=
    left: object
    right: object
    span: Span


@node
class BoolOp:
    op: str  # and, or
    left: object
    right: object
    span: Span


@node
class Not:
    operand: object
    span: Span


@node
class Cond:
    test: object
    then: object
    orelse: object
    span: Span


@node
class Call:
    func: str
    args: tuple
    span: Span
    func_span: Span


@node
class Keyword:
    """`name=value` among a call's arguments (`sum(A, axis=0)`)."""
    name: str
    value: object
    span: Span


@node
class CompFor:
    name: str
    iter: object
    span: Span


@node
class CompIf:
    test: object
    span: Span


@node
class GenCall:
    """`sum(e for i in range(n) if ...)`: a reduction over a generator."""

    func: str
    elt: object
    clauses: tuple
    span: Span
    func_span: Span


@node
class Index:
    value: object
    subscripts: tuple
    span: Span


@node
class Slice:
    start: object | None
    stop: object | None
    step: object | None
    span: Span


@node
class ArrayLit:
    elts: tuple
    span: Span


@node
class NumberArray:
    """An array literal of plain numbers (`[0.5, -1, 2e3]`, nested lists of one shape), as
    the parser reads a long one in bulk (numbers.py): `values` is an object array of the
    Python ints and floats that lowering the same `ArrayLit` element by element gives.
    Shared by every lowering of the program: never written to."""

    values: object  # numpy.ndarray, dtype object
    span: Span


@node
class Comprehension:
    elt: object
    clauses: tuple
    span: Span


# Statements --------------------------------------------------------------------------------

@node
class InputDecl:
    name: str
    dims: tuple
    span: Span


@node
class ConstDecl:
    name: str
    value: object
    span: Span


@node
class Def:
    name: str
    params: tuple
    body: tuple  # statements before the result; empty for `def f(x) = expr`
    result: object
    span: Span


@node
class Assign:
    name: str
    value: object
    span: Span


@node
class IndexAssign:
    name: str
    subscripts: tuple
    value: object
    span: Span


@node
class AugAssign:
    name: str
    op: str  # + - * /
    subscripts: tuple | None  # `A[i] += x` keeps its subscripts
    value: object
    span: Span


@node
class For:
    name: str
    iter: object
    body: tuple
    span: Span


@node
class While:
    """`while test max limit { body }`: at most `limit` steps, each while `test` holds.
    `while ... as label { ... }` names the loop: `label.steps` and `label.converged`."""

    test: object
    limit: object
    body: tuple
    span: Span
    label: str | None = None


@node
class Break:
    """`break if test`, directly in the body of a `while`: the loop stops there when it holds."""

    test: object
    span: Span


@node
class If:
    branches: tuple  # ((condition, body), ...), the `else if` chain in order
    orelse: tuple | None
    span: Span


@node
class Output:
    name: str | None
    value: object
    span: Span


@node
class Return:
    value: object
    span: Span


@node
class Program:
    statements: tuple
    filename: str
    source: str


def chained_comparison(parts: tuple, filename: str, source: str) -> DDSyntaxError:
    """The error for `0 < x < 1` (the parser's operands and operator tokens, alternating), at
    the comparison that chains, with the form that says what it means."""
    text = [_text(source, p.span) for p in parts[::2]]
    ops = parts[1::2]
    pairs = [f"{text[k]} {ops[k]} {text[k + 1]}" for k in range(len(ops))]
    tok = ops[1]
    span = Span(filename, tok.line, tok.column, tok.end_line, tok.end_column, source)
    return DDSyntaxError("comparisons do not chain", span,
                         hint=f"write `{' and '.join(pairs)}`")


def _text(source: str, span: Span) -> str:
    """The text a span covers, its lines joined by spaces."""
    lines = source.splitlines()[span.line - 1:span.end_line]
    if len(lines) == 1:
        return lines[0][span.column - 1:span.end_column - 1]
    return " ".join([lines[0][span.column - 1:]] + [x.strip() for x in lines[1:-1]]
                    + [lines[-1][:span.end_column - 1].strip()])
