"""The bindings a derivative inside the program differentiates by (issue 23).

`grad(e, x)` is the derivative of `e` by x's binding, the way the names read: every value
computed from the value bound to `x` (through locals, calls of defs, loops, `while`, branches)
varies with it, and every value computed without it is a constant, even where hash-consing has
merged it with an equal value (`a = sin(z); b = sin(z); grad(a * b, a)` is `sin(z)`).

For the graph to tell these apart, each binding of a name that a `grad`, `jacobian` or
`hessian` of the same function (a def, or the top level) differentiates by is *tagged*: each
element of the value bound becomes `value + ε`, with ε a fresh input node under a name no
program can declare (`@bind`). That sum is a node of its own, so hash-consing never merges it
with a value computed without this binding; it passes derivatives on to `value`, so bindings
computed from other bindings still chain; and the derivative by the binding is the derivative
by ε. Bindings are assignments (`=`, `+=`, `A[i] = ...`), loop and comprehension variables,
def parameters and inputs; after a dynamic `if` or a `while` step that assigned the name, the
select of its values is a binding too (the `if` or the loop binds it, there).

When lowering ends, `strip` replaces every tag by its value (ε is 0 and `x + 0` is `x`), so
no ε reaches the graph and hash-consing merges again what the tags kept apart.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from .. import syntax as s
from ..values import is_array

DERIVATIVES = ("grad", "jacobian", "hessian")
EPSILON = "@bind"  # the input name of the ε nodes; '@' keeps it out of every program
NONE: frozenset = frozenset()

_MAYBE_DERIVATIVE = re.compile(r"\b(grad|jacobian|hessian)\s*\(")


def differentiated_names(program: s.Program, functions: dict) -> dict:
    """The names each function differentiates by, read off the syntax: {None: the top
    level's, def name: that def's}. The second argument of `grad(e, x)` names `x`; that of
    `grad(e, S[0])`, `S`. A def named `grad` is that def, not a derivative."""
    found: dict = {None: set()}
    if not _MAYBE_DERIVATIVE.search(program.source):
        return {None: NONE}  # a program without one costs no walk over its syntax
    forms = [f for f in DERIVATIVES if f not in functions]
    for st in program.statements:
        if isinstance(st, s.Def):
            found[st.name] = _names(forms, [st.body, st.result])
        else:
            found[None] |= _names(forms, [st])
    return {k: frozenset(v) for k, v in found.items()}


def _names(forms: list, roots: list) -> set:
    names: set = set()
    stack = list(roots)
    while stack:  # a loop, not recursion: a 10,000-term sum is 10,000 levels deep
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
        elif isinstance(x, s.Call):
            if x.func in forms and len(x.args) == 2:
                base = base_name(x.args[1])
                if base is not None:
                    names.add(base.id)
            stack.extend(x.args)
        elif type(x) in _FIELDS:
            stack.extend(getattr(x, f) for f in _FIELDS[type(x)])
    return names


# The fields of each syntax class that hold syntax (spans and strings hold none).
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls) if f.name != "span")
           for cls in vars(s).values()
           if isinstance(cls, type) and dataclasses.is_dataclass(cls)
           and cls.__module__ == s.__name__ and cls is not s.Program}


def base_name(var) -> s.Name | None:
    """The name that `x` or `x[...]` (to any depth) subscripts; None for anything else."""
    while isinstance(var, s.Index):
        var = var.value
    return var if isinstance(var, s.Name) else None


def tag(lw, value):
    """`value` as a new binding: each real element `v` becomes the node `v + ε`, ε fresh.
    Conditions stay as they are (no derivative is taken by one)."""
    if is_array(value):
        out = np.empty(value.size, dtype=object)
        for k, x in enumerate(value.flat):
            out[k] = _tag_one(lw, x)
        return out.reshape(value.shape)
    return _tag_one(lw, value)


def _tag_one(lw, x):
    if isinstance(x, bool):
        return x
    b = lw.b
    value = lw.v.node(x)
    epsilon = b.input(EPSILON, len(lw.epsilon))
    tagged = b.add(value, epsilon)  # ε itself where value is the constant 0
    lw.tags[tagged] = value
    lw.epsilon[tagged] = epsilon
    return lw.v.dyn(tagged)


def strip(b, tags: dict[int, int], roots: list[int]) -> list[int]:
    """`roots` with every tag replaced by its value: each node that a root needs and that
    reaches a tag is built again, in id order (so a tag whose value holds another tag finds
    that one already replaced), interned and simplified by the builder."""
    if not tags:
        return list(roots)
    nodes = b.nodes
    lo, hi = min(tags), len(nodes)
    need = bytearray(hi - lo)
    for r in roots:
        if r >= lo:
            need[r - lo] = 1
    for i in range(hi - 1, lo - 1, -1):  # backwards: node ids point backwards
        if need[i - lo]:
            for a in nodes[i].args:
                if a >= lo:
                    need[a - lo] = 1
    new: dict[int, int] = {}
    for i in range(lo, hi):
        if not need[i - lo]:
            continue
        if i in tags:
            value = tags[i]
            new[i] = new.get(value, value)
            continue
        node = nodes[i]
        if not any(a in new for a in node.args):
            continue
        args = [new.get(a, a) for a in node.args]
        if node.op == "region":  # a loop kept as a loop that captured a tagged value
            new[i] = b.region(node.attr, args)
        elif node.op == "part":
            new[i] = b.part(args[0], node.attr)
        else:
            new[i] = b.op(node.op, *args)
    return [new.get(r, r) for r in roots]
