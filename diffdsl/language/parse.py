"""Text to syntax tree: the Lark LALR parser of grammar/diffdsl.lark and its transformer, its
tables run by our own loop where the text parses (lalr.py), by Lark's parser elsewhere."""

from __future__ import annotations

import difflib
import functools
from pathlib import Path
from typing import NamedTuple

from lark import Lark, Token, Transformer_NonRecursive, v_args
from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)

from .. import limits
from ..errors import DDSyntaxError, DiffDSLError, Span
from . import lalr, numbers
from . import syntax as s
from .postlex import ENDS_EXPRESSION, Newlines

# Friendly names for terminals in "expected ..." messages.
_TERMINAL_NAMES = {
    "NAME": "a name", "INT": "a number", "FLOAT": "a number", "_NL": "a new line",
    "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "LBRACE": "'{'",
    "RBRACE": "'}'", "COMMA": "','", "SEMICOLON": "';'", "EQUAL": "'='", "COLON": "':'",
    "ADDOP": "'+' or '-'", "MULOP": "an operator", "POWOP": "'**'", "CMPOP": "a comparison",
    "AUGOP": "'+='", "_MAX": "'max'", "$END": "the end of the file",
}


def _grammar_path() -> Path:
    package = Path(__file__).resolve().parent.parent  # diffdsl/, from diffdsl/language/
    for candidate in (package / "grammar" / "diffdsl.lark",
                      package.parent / "grammar" / "diffdsl.lark"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("grammar/diffdsl.lark is missing from the diffdsl installation")


@functools.lru_cache(maxsize=2)
def _parser(cache: bool = True) -> Lark:
    return Lark(
        _grammar_path().read_text(encoding="utf-8"),
        parser="lalr",
        # The post-lexer looks one token ahead, so lexing must not depend on parser state.
        lexer="basic",
        postlex=Newlines(),
        propagate_positions=True,
        maybe_placeholders=True,
        # Lark keeps the built tables in a per-user temporary file, checked by the grammar's
        # hash: start-up skips rebuilding them. Without the cache (--no-cache), nothing is
        # written anywhere.
        cache=cache,
    )


@functools.lru_cache(maxsize=2)
def _fast(cache: bool = True) -> lalr.FastParser | None:
    try:
        return lalr.FastParser(_parser(cache), _ToSyntax, ENDS_EXPRESSION, "_NL")
    except lalr.Unsupported:  # another Lark than the ones tested: its own path, slower
        return None


def parse(source: str, filename: str = "<string>", cache: bool = True) -> s.Program:
    """Parse `.dd` text into a `syntax.Program`; raises `DDSyntaxError` with a location.
    `cache=False` builds the parser's tables without Lark's file in the temporary folder.
    Text that parses goes through the fast path (lalr.py), which builds the same tree;
    anything else through Lark's parser, whose errors are the ones reported."""
    fast = _fast(cache)
    if fast is not None:
        try:
            statements = fast.parse(source, filename, _ToSyntax(filename, source),
                                    Newlines().process, limits.current().int_bits)
            return s.Program(statements=statements, filename=filename, source=source)
        except lalr.Fallback:
            pass
    return parse_with_lark(source, filename, cache)


def parse_with_lark(source: str, filename: str = "<string>", cache: bool = True) -> s.Program:
    """`parse` by Lark's parser and transformer alone: the reference for the fast path."""
    try:
        tree = _parser(cache).parse(source)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, source, filename) from None
    try:
        statements = _ToSyntax(filename, source).transform(tree)
    except VisitError as exc:  # Lark wraps what a transformer method raises
        if isinstance(exc.orig_exc, DiffDSLError):
            raise exc.orig_exc from None
        raise
    return s.Program(statements=statements, filename=filename, source=source)


def _syntax_error(exc: UnexpectedInput, source: str, filename: str) -> DDSyntaxError:
    line = getattr(exc, "line", 1) or 1
    column = getattr(exc, "column", 1) or 1
    width = 1
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        if tok.type == "$END":
            line, column = _end_position(source)
            what = "end of the file"
        elif tok.type == "_NL":
            what = "end of the line"
        else:
            what = repr(str(tok))
            width = max(1, len(str(tok)))
        expected = _expected(exc.accepts or exc.expected)
        message = f"unexpected {what}" + (f"; expected {expected}" if expected else "")
        better = _typo(tok, source, filename) or _leading_operator(tok, source, filename)
        if better is not None:
            return better
    elif isinstance(exc, UnexpectedCharacters):
        char = source[exc.pos_in_stream] if exc.pos_in_stream < len(source) else "?"
        message = f"unexpected character {char!r}"
        if not char.isascii():
            hint = ("names and numbers are ASCII: letters a-z and A-Z, digits 0-9 and '_'")
            return DDSyntaxError(message, Span(filename, line, column, line, column + 1,
                                               source), hint=hint)
    elif isinstance(exc, UnexpectedEOF):
        line, column = _end_position(source)
        message = "unexpected end of the file"
    else:  # pragma: no cover - lark raises only the kinds above
        message = "syntax error"
    span = Span(filename, line, column, line, column + width, source)
    return DDSyntaxError(message, span)


# Words that begin a statement: a misspelt one reads as a name followed by another name.
_STATEMENT_WORDS = ("input", "output", "const", "def", "for", "while", "break", "if", "elif",
                    "else", "return")
_BINARY = {"ADDOP", "MULOP", "POWOP", "CMPOP", "AND", "OR"}


def _line_start(source: str, tok: Token) -> str:
    """The text of `tok`'s line before it."""
    lines = source.splitlines()
    if not 1 <= tok.line <= len(lines):
        return ""
    return lines[tok.line - 1][: tok.column - 1]


def _typo(tok: Token, source: str, filename: str) -> DDSyntaxError | None:
    """`inptu x`, `retrun 1`: a statement's first word, close to a keyword but not one, and
    then a token that cannot follow a name there."""
    before = _line_start(source, tok)
    word = before.strip()
    if not word.isidentifier() or word in _STATEMENT_WORDS:  # one word, then this name
        return None
    close = difflib.get_close_matches(word, _STATEMENT_WORDS, n=1, cutoff=0.6)
    if not close:
        return None
    column = len(before) - len(before.lstrip(" \t")) + 1
    span = Span(filename, tok.line, column, tok.line, column + len(word), source)
    return DDSyntaxError(f"unknown statement {word!r}; did you mean `{close[0]}`?", span,
                         hint=f"a statement begins with a keyword: {', '.join(_STATEMENT_WORDS)}"
                              ", or a name and '='")


def _leading_operator(tok: Token, source: str, filename: str) -> DDSyntaxError | None:
    """A line that starts with a binary operator: the line before ended its statement."""
    if tok.type not in _BINARY or _line_start(source, tok).strip() or tok.line <= 1:
        return None
    span = Span(filename, tok.line, tok.column, tok.line, tok.column + len(str(tok)), source)
    return DDSyntaxError(
        f"a line cannot start with {str(tok)!r}: the line before ended the statement", span,
        hint=f"to continue an expression on the next line, end the line before with "
             f"'{tok}', or wrap the whole expression in parentheses")


def _end_position(source: str) -> tuple[int, int]:
    lines = source.splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


_OPERATORS = {"ADDOP", "MULOP", "POWOP", "CMPOP", "AND", "OR", "AUGOP"}


def _expected(names) -> str:
    """Say what could come next: keywords and punctuation by name, operators as a group."""
    names = set(names or ())
    words = []
    for name in sorted(names - _OPERATORS):
        word = _TERMINAL_NAMES.get(name)
        if word is None:
            word = f"'{name.lower()}'" if name.isalpha() else None
        if word and word not in words:
            words.append(word)
    if names & _OPERATORS == {"ADDOP"}:
        words.append("'-'")  # only a unary sign can come here
    elif names & _OPERATORS:
        words.append("an operator")
    if not words:
        return ""
    if len(words) > 6:
        words = words[:5] + ["..."]
    return ", ".join(words[:-1]) + (" or " if len(words) > 1 else "") + words[-1]


class _Elif(NamedTuple):
    test: object
    body: tuple


def _tok_span(tok: Token, filename: str, source: str) -> Span:
    return Span(filename, tok.line, tok.column, tok.end_line, tok.end_column, source)


@v_args(inline=True, meta=True)
class _ToSyntax(Transformer_NonRecursive):
    """One method per grammar alias; children are bound by name."""

    def __init__(self, filename: str, source: str):
        super().__init__()
        self.filename = filename
        self.source = source
        self.int_bits = limits.current().int_bits

    def _span(self, meta) -> Span:
        if type(meta) is Span:  # the fast path passes the span itself
            return meta
        if getattr(meta, "empty", True):
            return Span(self.filename, 1, 1, 1, 2, self.source)
        return Span(self.filename, meta.line, meta.column, meta.end_line, meta.end_column,
                    self.source)

    # program structure
    def start(self, meta, *statements):
        return tuple(statements)

    def block(self, meta, *statements):
        return tuple(statements)

    def params(self, meta, *names):
        return tuple(str(n) for n in names)

    def args(self, meta, *values):
        return tuple(values)

    def subscripts(self, meta, *items):
        return tuple(items)

    def comp_clauses(self, meta, *clauses):
        return tuple(clauses)

    # statements
    def input_decl(self, meta, name, *dims):
        return s.InputDecl(str(name), tuple(dims), self._span(meta))

    def const_decl(self, meta, name, value):
        return s.ConstDecl(str(name), value, self._span(meta))

    def def_expr(self, meta, name, params, result):
        return s.Def(str(name), params, (), result, self._span(meta))

    def def_block(self, meta, name, params, body):
        return s.Def(str(name), params, body, None, self._span(meta))

    def assign(self, meta, name, value):
        return s.Assign(str(name), value, self._span(meta))

    def index_assign(self, meta, name, subscripts, value):
        return s.IndexAssign(str(name), subscripts, value, self._span(meta))

    def aug_assign(self, meta, name, op, value):
        return s.AugAssign(str(name), str(op)[0], None, value, self._span(meta))

    def index_aug_assign(self, meta, name, subscripts, op, value):
        return s.AugAssign(str(name), str(op)[0], subscripts, value, self._span(meta))

    def for_stmt(self, meta, name, iterable, body):
        return s.For(str(name), iterable, body, self._span(meta))

    def while_stmt(self, meta, test, limit, label, body):
        return s.While(test, limit, body, self._span(meta), label and str(label))

    def break_stmt(self, meta, test):
        return s.Break(test, self._span(meta))

    def elif_clause(self, meta, test, body):
        return _Elif(test, body)

    def else_clause(self, meta, body):
        return body

    def if_stmt(self, meta, test, body, *rest):
        branches = [(test, body)]
        orelse = None
        for clause in rest:
            if isinstance(clause, _Elif):
                branches.append((clause.test, clause.body))
            else:
                orelse = clause
        return s.If(tuple(branches), orelse, self._span(meta))

    def output_named(self, meta, name, value):
        return s.Output(str(name), value, self._span(meta))

    def output_expr(self, meta, value):
        return s.Output(None, value, self._span(meta))

    def return_stmt(self, meta, value):
        return s.Return(value, self._span(meta))

    # expressions
    def cond(self, meta, test, then, orelse):
        return s.Cond(test, then, orelse, self._span(meta))

    def or_(self, meta, left, right):
        return s.BoolOp("or", left, right, self._span(meta))

    def and_(self, meta, left, right):
        return s.BoolOp("and", left, right, self._span(meta))

    def not_(self, meta, operand):
        return s.Not(operand, self._span(meta))

    def comparison(self, meta, left, op, right, *chain):  # `0 < x < 1` is refused, with a hint
        if chain:
            raise s.chained_comparison((left, op, right, *chain), self.filename, self.source)
        return s.Compare(str(op), left, right, self._span(meta))

    def binop(self, meta, left, op, right):
        text = "**" if str(op) == "^" else str(op)
        return s.BinOp(text, left, right, self._span(meta))

    def unop(self, meta, op, operand):
        return s.UnaryOp(str(op), operand, self._span(meta))

    def call(self, meta, name, args):
        span = _tok_span(name, self.filename, self.source)
        return s.Call(str(name), args, self._span(meta), span)

    def keyword(self, meta, name, value):
        return s.Keyword(str(name), value, self._span(meta))

    def gencall(self, meta, name, elt, clauses):
        span = _tok_span(name, self.filename, self.source)
        return s.GenCall(str(name), elt, clauses, self._span(meta), span)

    def index(self, meta, value, subscripts):
        return s.Index(value, subscripts, self._span(meta))

    def slice(self, meta, start, stop, step=None):
        return s.Slice(start, stop, step, self._span(meta))

    def int_lit(self, meta, tok):
        return s.Num(numbers.integer(str(tok), self.int_bits, self._span(meta)), self._span(meta))

    def float_lit(self, meta, tok):
        return s.Num(float(tok), self._span(meta))

    def name(self, meta, tok):
        return s.Name(str(tok), self._span(meta))

    def array(self, meta, *elts):
        return s.ArrayLit(tuple(elts), self._span(meta))

    def comprehension(self, meta, elt, clauses):
        return s.Comprehension(elt, clauses, self._span(meta))

    def comp_for(self, meta, name, iterable):
        return s.CompFor(str(name), iterable, self._span(meta))

    def comp_if(self, meta, test):
        return s.CompIf(test, self._span(meta))
