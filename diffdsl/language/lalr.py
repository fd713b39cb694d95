"""The parser's fast path: Lark's own LALR tables and lexer regex, run by a loop of ours.

Lark's parser builds a tree and the transformer walks it again; every token and reduction
goes through several layers of Python calls, so a generated 1.3 MB `.dd` (100,000 terms)
took 21 s to parse. Here the same grammar (grammar/diffdsl.lark, compiled by Lark: its parse
table, rules and terminal regex) is run by one loop that calls the transformer's methods as
it reduces, with spans computed as Lark's `propagate_positions` computes them, so the syntax
tree is the one Lark's path gives, span for span (tests/test_parse_fast.py compares them).

Only text that parses goes this way: at the first thing this loop does not expect (a syntax
error, a character no terminal matches, an error a transformer method raises) it stops and
the caller parses the text again with Lark, whose errors, messages and their order stay
the only ones. A long array literal of plain numbers is read in bulk, with no token per
element (`numbers.py`).
"""

from __future__ import annotations

import bisect

from lark import Token
from lark.parsers.lalr_analysis import Shift

from ..errors import Span
from . import numbers


class Unsupported(Exception):
    """This Lark (or grammar) is built in a way the fast path does not know: use Lark's."""


class Fallback(Exception):
    """This text needs Lark's path: a syntax error, or an error the transformer raised."""


class Lines:
    """Line and column (1-based) of an offset in the text, as Lark's line counter gives."""

    def __init__(self, text: str):
        self.breaks = [i for i, c in enumerate(text) if c == "\n"] if "\n" in text else []

    def at(self, pos: int) -> tuple[int, int]:
        k = bisect.bisect_left(self.breaks, pos)  # newlines before `pos`
        return k + 1, pos - (self.breaks[k - 1] if k else -1)


class Tok:
    """A token: what the transformer's methods and the post-lexer read of Lark's `Token`."""

    __slots__ = ("type", "value", "start", "end", "lines")

    def __init__(self, type_: str, value, start: int, end: int, lines: Lines):
        self.type, self.value, self.start, self.end, self.lines = type_, value, start, end, lines

    def __str__(self) -> str:
        return self.value

    def __float__(self) -> float:
        return float(self.value)

    def retyped(self, type_: str) -> Tok:
        return Tok(type_, self.value, self.start, self.end, self.lines)

    line = property(lambda self: self.lines.at(self.start)[0])
    column = property(lambda self: self.lines.at(self.start)[1])
    end_line = property(lambda self: self.lines.at(self.end)[0])
    end_column = property(lambda self: self.lines.at(self.end)[1])


class _Inlined(list):
    """The kept children of a `_rule`, spliced into its parent's children (Lark's inlining)."""


_PASS, _INLINE, _EXPAND1, _CALL, _BULK = range(5)


class FastParser:
    """Parses with the tables of `lark` (a LALR Lark with a basic lexer) and the methods of
    `transformer` (a `Transformer` class with `v_args(inline=True, meta=True)`)."""

    def __init__(self, lark, transformer: type, ends_expression, line_break: str):
        """`ends_expression`: the token types after which a `[` is an index, not the start
        of an array literal; `line_break`: the newline token's type (skipped there)."""
        self.ends_expression, self.line_break = frozenset(ends_expression), line_break
        try:
            table = lark.parser.parser._parse_table
            lexer = getattr(lark.parser.lexer, "lexer", lark.parser.lexer)
            self.mres = [m.match for m in lexer.scanner._mres]
            self.ignore = frozenset(lexer.ignore_types)
            self.callbacks = dict(lexer.callback)
            start, end = table.start_states["start"], table.end_states["start"]
            rules = list(lark.rules)
            placeholders = lark.options.maybe_placeholders
        except (AttributeError, KeyError, TypeError) as exc:
            raise Unsupported(f"this Lark has no {exc}") from None
        if lark.options.parser != "lalr" or not all(isinstance(s, int) for s in table.states):
            raise Unsupported("not an integer LALR table")
        index = {id(rule): k for k, rule in enumerate(rules)}
        # Actions as ints: a state to shift to (>= 0), or ~k to reduce by rule k.
        self.table: dict = {}
        for state, row in table.states.items():
            self.table[state] = {name: (arg if action is Shift else ~index[id(arg)])
                                 for name, (action, arg) in row.items()}
        self.start, self.end = start, end
        self.rules = [self._rule(rule, transformer, placeholders) for rule in rules]
        self.chains: dict = {}  # (state below, top state, token type) -> state after
        # A literal read in bulk is an INT token that `INT -> int_lit` reduces to its node.
        self.bulk = False
        for k, rule in enumerate(rules):
            if rule.alias == "int_lit" and [t.name for t in rule.expansion] == ["INT"]:
                self.rules[k] = self.rules[k][:2] + (_BULK,) + self.rules[k][3:]
                self.bulk = True

    @staticmethod
    def _rule(rule, transformer: type, placeholders: bool):
        """(size, origin, kind, method name, to_include, nones at the end, the indices of
        the children kept where none is inlined and no placeholder is added, else None), as
        Lark's `ParseTreeBuilder` and `ChildFilter` shape each rule's children."""
        name, expansion, options = rule.origin.name, rule.expansion, rule.options
        empty = options.empty_indices if placeholders else None
        if empty:
            counts = [len(ones) for ones in "".join(str(int(b)) for b in empty).split("0")]
        else:
            counts = [0] * (len(expansion) + 1)
        include, nones = [], 0
        for i, sym in enumerate(expansion):
            nones += counts[i]
            if options.keep_all_tokens or not (sym.is_term and sym.filter_out):
                include.append((i, not sym.is_term and sym.name.startswith("_"), nones))
                nones = 0
        nones += counts[len(expansion)]
        expand1 = options.expand1 and not rule.alias
        method = rule.alias or name
        if name.startswith("_") and not rule.alias:
            if expand1:
                raise Unsupported(f"an inlined rule {name} with '?'")
            kind = _INLINE
        elif not hasattr(transformer, method) and not expand1:
            raise Unsupported(f"no transformer method for {method}")
        elif expand1 and len(expansion) == 1 and include == [(0, False, 0)] and not nones:
            kind = _PASS
        else:
            kind = _EXPAND1 if expand1 else _CALL
        pick = None
        if not nones and all(not expand and not add for _, expand, add in include):
            pick = tuple(i for i, _, _ in include)
        return len(expansion), name, kind, method, tuple(include), nones, pick

    def parse(self, text: str, filename: str, transformer, postlex, int_bits: int):
        """The transformer's value of the whole text (`filename` names it in spans);
        `postlex(tokens)` filters the tokens as Lark's post-lexer does; integers in a
        literal read in bulk have at most `int_bits` bits. Raises `Fallback` where Lark's
        path must take over."""
        lines = Lines(text)
        empty = Span(filename, 1, 1, 1, 2, text)  # a node without tokens, as `_span` says

        def span_of(first: int, last: int) -> Span:
            if first < 0:
                return empty
            return Span(filename, *lines.at(first), *lines.at(last), text)

        methods = {}
        for rule in self.rules:
            kind, method = rule[2], rule[3]
            if kind != _PASS and kind != _INLINE and method not in methods \
                    and hasattr(type(transformer), method):
                fn = getattr(type(transformer), method)
                methods[method] = getattr(fn, "base_func", fn).__get__(transformer)
        try:
            return self._run(postlex(self._tokens(text, lines, int_bits)), methods, span_of)
        except Fallback:
            raise
        except Exception as exc:  # what a method raised: Lark's path raises it in its order
            raise Fallback(str(exc)) from exc

    def _tokens(self, text: str, lines: Lines, int_bits: int):
        """Lark's basic lexer: the first alternative of its regex that matches, keywords
        retyped by its callbacks, ignored terminals dropped; a bulk literal is one token."""
        mres, ignore, callbacks, pos, n = self.mres, self.ignore, self.callbacks, 0, len(text)
        retype: dict = {}
        previous = None  # the type of the last token kept but newlines
        while pos < n:
            for match in mres:
                m = match(text, pos)
                if m is not None:
                    break
            else:
                raise Fallback("no terminal matches here")
            kind, end = m.lastgroup, m.end()
            if kind in ignore:
                pos = end
                continue
            value = m.group()
            if kind in callbacks:
                key = (kind, value)
                if key not in retype:
                    tok = callbacks[kind](Token(kind, value))
                    if tok.value != value:
                        raise Fallback("a lexer callback changed a token's text")
                    retype[key] = tok.type
                kind = retype[key]
            if value == "[" and self.bulk \
                    and previous not in self.ends_expression:
                bulk = numbers.read(text, pos, int_bits)
                if bulk is not None:
                    # an INT token whose value is the array: where `[` starts an operand,
                    # an INT is one, and the parser goes on from the same state
                    values, end = bulk
                    kind, value = "INT", numbers.Bulk(values)
            if kind != self.line_break:
                previous = kind
            yield Tok(kind, value, pos, end, lines)
            pos = end

    def _run(self, tokens, methods: dict, span_of):
        table, rules, chains, end_state = self.table, self.rules, self.chains, self.end
        states, values, firsts, lasts = [self.start], [], [], []
        for tok in _with_end(tokens):
            kind = tok.type
            while True:
                action = table[states[-1]].get(kind)
                if action is None:
                    raise Fallback(f"unexpected {kind}")
                if action >= 0:
                    if tok is _END:
                        raise Fallback("shift of the end")
                    states.append(action)
                    values.append(tok)
                    firsts.append(tok.start)
                    lasts.append(tok.end)
                    break
                size, name, how, method, include, nones, pick = rules[~action]
                if how == _PASS:
                    # `?rule: child` passes the child on and moves the state only: a run of
                    # them depends on the two states on top and the token alone, so it is
                    # followed once and remembered
                    key = (states[-2], states[-1], kind)
                    top = chains.get(key)
                    if top is None:
                        top = chains[key] = self._chain(states[-2], states[-1], kind)
                    states[-1] = top
                    if tok is _END and top == end_state:
                        return values[-1]
                    continue
                if size:
                    children = values[-size:]
                    first, last = firsts[-size], lasts[-1]
                    if first < 0 or last < 0:  # a child without tokens: look further in
                        first = next((p for p in firsts[-size:] if p >= 0), -1)
                        last = next((p for p in reversed(lasts[-size:]) if p >= 0), -1)
                    del states[-size:], values[-size:], firsts[-size:], lasts[-size:]
                else:
                    children, first, last = [], -1, -1
                if pick is not None:  # no child inlined, no placeholder
                    kept = children if len(pick) == size else [children[i] for i in pick]
                else:
                    kept = []
                    for i, expand, add in include:
                        if add:
                            kept += [None] * add
                        if expand:
                            kept += children[i]
                        else:
                            kept.append(children[i])
                    if nones:
                        kept += [None] * nones
                if how == _INLINE:
                    value = _Inlined(kept)
                elif how == _EXPAND1 and len(kept) == 1:
                    value = kept[0]
                elif how == _BULK and type(kept[0].value) is numbers.Bulk:
                    value = kept[0].value.node(span_of(first, last))
                else:
                    value = methods[method](span_of(first, last), *kept)
                states.append(table[states[-1]][name])
                values.append(value)
                firsts.append(first)
                lasts.append(last)
                if tok is _END and states[-1] == end_state:
                    return values[-1]
        raise Fallback("the end of the text was not accepted")

    def _chain(self, below: int, top: int, kind: str) -> int:
        """The top state after every `?rule: child` reduction that `kind` brings about."""
        while True:
            action = self.table[top].get(kind)
            if action is None or action >= 0 or self.rules[~action][2] != _PASS:
                return top
            top = self.table[below][self.rules[~action][1]]


class _EndTok:
    type = "$END"


_END = _EndTok()


def _with_end(tokens):
    yield from tokens
    yield _END
