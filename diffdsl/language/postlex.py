"""The post-lexer of grammar/diffdsl.lark: which newlines end a statement, and where `max` is
the keyword of a `while` header. Lark's parser and the fast path (lalr.py) both run it."""

from __future__ import annotations

from lark import Token

# Tokens after which a newline cannot end a statement (LANGUAGE.md, lexical rules).
_CONTINUE_AFTER = {
    "=", "+=", "-=", "*=", "/=", "+", "-", "*", "/", "//", "%", "@", "**", "^",
    "==", "!=", "<", "<=", ">", ">=", ",", "then", "else", "and", "or", "not",
}
# Tokens that can end an expression: a `max` right after one, in a `while` header, can only be
# the keyword (two operands never stand side by side).
ENDS_EXPRESSION = {"NAME", "LOOP_VALUE", "INT", "FLOAT", "RPAR", "RSQB"}


class Newlines:
    """Post-lexer that keeps a newline only where it ends a statement, and reads the `max` of
    `while c max N` as a keyword."""

    always_accept = ("_NL",)

    def process(self, stream):
        depth = 0
        previous = None
        pending = None
        header = None  # the bracket depth of an open `while` header
        for tok in stream:
            if tok.type == "WHILE":
                header = depth
            elif header == depth and tok.type == "NAME" and tok.value == "max" \
                    and previous is not None and previous.type in ENDS_EXPRESSION:
                tok = Token.new_borrow_pos("_MAX", tok.value, tok) if isinstance(tok, Token) \
                    else tok.retyped("_MAX")  # the fast path's tokens (lalr.py)
                header = None
            elif header == depth and tok.value == "{":
                header = None
            if tok.type == "_NL":
                if depth > 0 or previous is None or self._continues(previous):
                    continue
                pending = pending or tok
                continue
            if pending is not None:
                if tok.type not in ("THEN", "ELSE"):
                    yield pending
                pending = None
            if tok.value in ("(", "["):
                depth += 1
            elif tok.value in (")", "]"):
                depth = max(0, depth - 1)
            previous = tok
            yield tok
        if pending is not None:
            yield pending

    @staticmethod
    def _continues(tok: Token) -> bool:
        if tok.type == "_MAX":
            return True
        if tok.type == "NAME" or tok.type in ("INT", "FLOAT"):
            return False
        return tok.value in _CONTINUE_AFTER
