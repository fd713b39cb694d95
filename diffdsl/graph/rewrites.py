"""The algebraic identities the builder applies as it makes a node, keyed by op name beside
the op table (as tinygrad keeps `symbolic_simple` beside its ops).

`RULES[op]` lists rules tried in order when `ir.Builder.op` makes a node of that op that does
not fold to a constant. A rule is `rule(g, name, args, c) -> node id or None`: `g` the builder,
`args` the argument ids, `c` their constant values (None where an argument is not a constant).
The first rule giving a node wins. Rules make nodes through `g.op` and `g.const`, so what they
build is folded and simplified in turn.

The identities are exact or conventional for symbolic derivatives: `x * 0 = 0` and `0 / x = 0`
treat 0 as a symbolic zero, as SymPy does, even where `x` could be infinite at run time.
"""

from __future__ import annotations


def _drop_zero(g, name, args, c):
    """x + 0 = 0 + x = x; x - 0 = x."""
    for k in (0, 1) if name == "add" else (1,):
        if c[k] == 0.0:
            return args[1 - k]
    return None


def _zero_minus(g, name, args, c):
    """0 - x = -x; x - x = 0."""
    if c[0] == 0.0:
        return g.op("neg", args[1])
    if args[0] == args[1]:
        return g.const(0.0)
    return None


def _times_constant(g, name, args, c):
    """x * 0 = 0, x * 1 = x, x * -1 = -x (either side)."""
    for k in (0, 1):
        if c[k] == 0.0:
            return g.const(0.0)
        if c[k] == 1.0:
            return args[1 - k]
        if c[k] == -1.0:
            return g.op("neg", args[1 - k])
    return None


def _divide_trivially(g, name, args, c):
    """x / 1 = x; 0 / x = 0."""
    if c[1] == 1.0:
        return args[0]
    if c[0] == 0.0:
        return g.const(0.0)
    return None


def _double_negation(g, name, args, c):
    inner = g.nodes[args[0]]
    return inner.args[0] if inner.op == "neg" else None


def _small_power(g, name, args, c):
    """x ** 1 = x, x ** 0 = 1, x ** 2 = x * x."""
    if c[1] == 1.0:
        return args[0]
    if c[1] == 0.0:
        return g.const(1.0)
    if c[1] == 2.0:
        return g.op("mul", args[0], args[0])
    return None


def _decided_select(g, name, args, c):
    """select(c, a, a) = a; a select on a constant condition is the branch it picks."""
    if args[1] == args[2]:
        return args[1]
    if c[0] is not None:
        return args[1] if c[0] != 0 else args[2]
    return None


def _same_condition(g, name, args, c):
    """`select(c, select(c, a, b), d)` is `select(c, a, d)`, and likewise in the else branch.

    The reverse sweep wraps pullback parts in `select(guard, part, 0)`; a part that is
    already routed by the same condition then needs no second select.
    """
    cond, x, y = args
    inner_x, inner_y = g.nodes[x], g.nodes[y]
    if inner_x.op == "select" and inner_x.args[0] == cond:
        return g.op("select", cond, inner_x.args[1], y)
    if inner_y.op == "select" and inner_y.args[0] == cond:
        return g.op("select", cond, x, inner_y.args[2])
    return None


def _hoist_select(*positions):
    """`select(c, x, 0) * y` is `select(c, x * y, 0)`: the select moves outward, from the
    argument `positions` named.

    A select pullback routes the cotangent as `select(c, ct, 0)`; the pullbacks below it
    multiply by partial derivatives that may be infinite or NaN in the branch not taken
    (`sqrt'(-1)`). With the select kept outermost, that branch gives exactly 0, never
    `0 * nan` (LANGUAGE.md: a select sends exactly zero to the branch not taken).
    """
    def rule(g, name, args, c):
        for k in positions:
            # A chain of such selects (a max over 1,000 elements routes its tangent through
            # 1,000) moves out in one pass, not one call deeper per select.
            chain, arg = [], args[k]
            while g.nodes[arg].op == "select":
                cond, x, y = g.nodes[arg].args
                if g.value(y) == 0.0:
                    chain.append((cond, True))
                    arg = x
                elif g.value(x) == 0.0:
                    chain.append((cond, False))
                    arg = y
                else:
                    break
            if not chain:
                continue
            rest = list(args)
            rest[k] = arg
            moved, zero = g.op(name, *rest), g.const(0.0)
            for cond, first in reversed(chain):
                moved = g.op("select", cond, moved, zero) if first else \
                    g.op("select", cond, zero, moved)
            return moved
        return None
    return rule


RULES: dict[str, tuple] = {
    "add": (_drop_zero,),
    "sub": (_drop_zero, _zero_minus),
    "mul": (_times_constant, _hoist_select(0, 1)),
    "div": (_divide_trivially, _hoist_select(0)),
    "neg": (_double_negation, _hoist_select(0)),
    "pow": (_small_power,),
    "select": (_decided_select, _same_condition),
}
