"""Where each statement may stand: the structural rules of a program, checked on the syntax tree.

Declarations (`input`, `const`, `def`, `output`) belong at the top level, `return` at the end
of a def, `break if` directly in the body of a while loop; a def is defined once, with distinct
parameters; an output without a name is allowed only in a file with one output. Lowering calls
these as it reaches each part, so errors come in the order of the file, as they always have.
"""

from __future__ import annotations

from ...errors import AssignmentError
from .. import syntax as s

# The declarations, by the keyword that introduces them.
DECLARATIONS = {s.InputDecl: "input", s.ConstDecl: "const", s.Def: "def", s.Output: "output"}


def collect_defs(statements) -> dict[str, s.Def]:
    """The program's defs by name (they are hoisted: a def may be called before its line), each
    checked: one def a name, distinct parameters, a body that ends with its result."""
    functions: dict[str, s.Def] = {}
    for st in statements:
        if isinstance(st, s.Def):
            if st.name in functions:
                raise AssignmentError(f"function '{st.name}' is defined twice", st.span)
            for k, param in enumerate(st.params):
                if param in st.params[:k]:
                    raise AssignmentError(f"def '{st.name}' has two parameters named "
                                          f"'{param}'", st.span)
            _check_body(st)
            functions[st.name] = st
    return functions


def check_outputs(statements) -> None:
    """An output without a name (`output x + 1`) is named `out`: only one such in a file."""
    unnamed = [st for st in statements if isinstance(st, s.Output) and st.name is None
               and not isinstance(st.value, s.Name)]
    outputs = [st for st in statements if isinstance(st, s.Output)]
    if unnamed and len(outputs) > 1:
        raise AssignmentError(
            "an output without a name is allowed only when the file has one output",
            unnamed[0].span, hint="name it: `output NAME = ...`")


def check_blocks(body) -> None:
    """The blocks inside `body` (loops and ifs) hold no declaration, `return` or stray
    `break if`."""
    for st in body:
        if isinstance(st, s.For):
            _check_nested(st.body, "a loop")
        elif isinstance(st, s.While):  # `break if` belongs directly in its body
            _check_nested([x for x in st.body if not isinstance(x, s.Break)], "a loop")
        elif isinstance(st, s.Break):
            raise AssignmentError("`break if` is allowed only directly in the body of a "
                                  "while loop", st.span)
        elif isinstance(st, s.If):
            for _, b in st.branches:
                _check_nested(b, "an if block")
            if st.orelse:
                _check_nested(st.orelse, "an if block")


def _check_body(d: s.Def) -> None:
    for i, st in enumerate(d.body):
        if isinstance(st, s.Return) and i != len(d.body) - 1:
            raise AssignmentError("`return` must be the last statement of a def", st.span)
    if d.result is None and not (d.body and isinstance(d.body[-1], s.Return)):
        raise AssignmentError(f"def '{d.name}' must end with `return EXPR`", d.span)
    check_blocks(d.body)
    for st in d.body:
        if type(st) in DECLARATIONS:
            _check_nested([st], "a def")


def _check_nested(body, where: str) -> None:
    """Declarations and `return` belong at the top level and at the end of a def."""
    for st in body:
        if type(st) in DECLARATIONS:
            raise AssignmentError(f"`{DECLARATIONS[type(st)]}` is allowed only at the top "
                                  f"level, not in {where}", st.span)
        if isinstance(st, s.Return):
            raise AssignmentError("`return` must be the last statement of a def, "
                                  "not inside a block", st.span)
    check_blocks(body)
