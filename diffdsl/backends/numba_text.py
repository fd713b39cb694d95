"""Python text for Numba, from the op table's `numba` spellings: the expression of one node (the
CUDA kernels' straight-line code) and the dispatch on opcodes of the tape interpreters, CPU and
CUDA. Opcodes are positions in `ops.OPS`.

Every module made from this text defines the helpers the spellings call (see `ops.Op.numba`):
`dd_round` as written here, and `dd_cbrt` as its target has the cube root.
"""

from __future__ import annotations

from ..graph.ops import OPS

CODE = {name: k for k, name in enumerate(OPS)}  # op name -> opcode
# The tapes test these first: the ops derivative graphs hold most.
HOT = ("mul", "add", "sub", "neg", "select", "div")

# floor (up=False) and ceil as floats: Numba's math.floor gives an integer, wrong for nan, inf
# and beyond 2**63. Values from 2**52 on are integers already; the sign is the argument's, so
# floor(-0.0) and ceil(-0.5) are -0.0, as in NumPy. `{integer}` is int(x) as a float: of x's
# type where the module knows it (`T(int(x))`), so float32 code stays float32.
ROUND = """\
def dd_round(x, up, one):
    if not abs(x) < one * 4503599627370496.0:
        return x
    t = {integer}
    if up and t < x:
        t += one
    elif not up and t > x:
        t -= one
    return math.copysign(t, x)
"""


def expression(op: str, operands, one: str, zero: str) -> str:
    """The row's spelling of `op` on the operands' text; `one` and `zero` spell the constants
    of the kernel's dtype."""
    return OPS[op].numba.format(*operands, one=one, zero=zero)


def dispatch(result: str, operands, one: str, zero: str, leaves: dict, indent: str) -> list[str]:
    """`if op == K:` branches assigning `result` for every op of the table: the hot ops first,
    then `leaves` (op name -> its text), then the rest in table order; an unknown opcode gives
    NaN. `operands` are the texts of the arguments (the third read only by `select`)."""
    order = list(HOT) + list(leaves) + [name for name, row in OPS.items()
                                        if row.arity and name not in HOT]
    lines = []
    for k, name in enumerate(order):
        text = leaves[name] if name in leaves else expression(name, operands, one, zero)
        lines.append(f"{indent}{'elif' if k else 'if'} op == {CODE[name]}:  # {name}")
        lines.append(f"{indent}    {result} = {text}")
    lines += [f"{indent}else:", f"{indent}    {result} = math.nan  # not an opcode"]
    return lines
