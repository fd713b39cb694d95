"""SymPy export of IR graphs (`to_sympy`, `diffdsl diff`). SymPy's own derivatives, with the
language's conventions, are symbolic/oracle.py's; printing formulas is symbolic/formulas.py's.

`to_sympy` turns outputs of a graph into SymPy expressions in one forward loop over the node
list (never a recursion over the graph), over the atoms of symbolic/atoms.py: input elements as
real symbols (pass `real=False` for symbols without assumptions), constants as closed forms.

Each op is written as its row's `sympy` field says (ops.py), compiled once into a rule of
`SYMPY_FUNCS`. Notably:
    select(c, a, b)      Piecewise((a, Ne(c, 0)), (b, True)); where `c` is a comparison or a
                         logical combination of comparisons, its relation is the condition:
                         Piecewise((a, x > 0), (b, True))
    lt, le, ..., and     Piecewise((1, x < y), (0, True))
    min(a, b), max       Piecewise((a, a <= b), (b, True)): the first argument on a tie, as the
                         language has it (SymPy's Min and Max are symmetric)
    log1p, expm1         log(1 + x), exp(x) - 1
    log2, log10          log(x, 2), log(x, 10)
    cbrt                 real_root(x, 3): the real cube root, also of negative numbers
    hypot                sqrt(x**2 + y**2)

A chain of `add`, `sub` and `neg` nodes, or of `mul` nodes, each used once by the next, is one
flat SymPy `Add` or `Mul` of all its terms (`_chains`): `sum(u[i] * u[i+1] for i in ...)` is
lowered to a chain of 10,000 two-argument adds, and as nested SymPy objects it was 10,000
levels deep, past the recursion of every SymPy printer, `diff` and `lambdify`.

Graphs are hash-consed, so a subexpression used twice is one SymPy object used twice; the tree
that SymPy prints may still be exponentially larger than the graph (the determinant by minors
has n! terms).
"""

from __future__ import annotations

import collections
import time
from typing import Callable

import sympy as sp

from .. import deepstack
from ..errors import UsageError
from ..graph import autodiff
from ..graph.ir import Graph
from .atoms import Symbols, constant, unravel
from .ops import ALT_FUNCS, SYMPY_FUNCS, Arg, select

__all__ = ["SYMPY_FUNCS", "Symbols", "constant", "select", "to_sympy", "unravel"]

# ---------------------------------------------------------------------------------------------
# Size and depth

DEEP = 150  # expression depth beyond which SymPy work runs on a thread with a large stack
# Expression depth beyond which export builds unevaluated SymPy objects (`evaluate(False)`):
# evaluating Add, Mul and Pow asks uncached questions that recurse to the bottom of their
# arguments (`is_polynomial`, `is_number`), so a chain of n evaluated ops costs n**2.
UNEVALUATED_DEPTH = 400
INLINE_DEPTH = 30  # operations deep beyond which `export_shared` names a part of a formula


def expression_sizes(graph: Graph, cap: int) -> tuple[list[int], list[int]]:
    """For every node, the size of its expression written out as a tree (capped at `cap`) and
    its depth: what SymPy will face, measured on the graph in one forward loop."""
    sizes = [1] * len(graph.nodes)
    depths = [1] * len(graph.nodes)
    for i, node in enumerate(graph.nodes):
        if node.args:
            sizes[i] = min(cap, 1 + sum(sizes[a] for a in node.args))
            depths[i] = 1 + max(depths[a] for a in node.args)
    return sizes, depths


def graph_depth(graph: Graph, ids) -> int:
    """The depth of the deepest expression among nodes `ids`."""
    ids = list(ids)
    if not ids:
        return 0
    _, depths = expression_sizes(graph, 1)
    return max(depths[i] for i in ids)


def deep_call(depth: int, fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)`, on a thread with a stack to match `depth` when it is large.

    Our loops never recurse, but SymPy recurses over an expression as it builds, prints or
    differentiates it, a few frames per level: a chain 10,000 operations deep exhausts
    Python's default limit of 1000. Past `DEEP` levels the work runs on a new thread whose
    stack and recursion limit are sized to the depth (`deepstack.call`, which restores the
    limit afterwards).
    """
    if depth <= DEEP:
        return fn(*args, **kwargs)
    return deepstack.call(60 * depth + 10_000, min(1 << 30, max(1 << 26, depth << 16)),
                          fn, *args, **kwargs)


# ---------------------------------------------------------------------------------------------
# Export


def export_depth(graph: Graph, ids) -> int:
    """The depth of the deepest SymPy expression that the nodes `ids` export to: the graph's
    depth less the levels that flat chains (`_chains`) fold into one Add or Mul."""
    live = _live(graph, ids)
    return _flat_depth(graph, ids, live, _chains(graph, ids, live))


class OutOfTime(Exception):
    """An export that passed its deadline (`check` bounds the time it gives SymPy)."""


def export_nodes(graph: Graph, ids, atom: Callable, deadline: float | None = None
                 ) -> dict[int, sp.Expr]:
    """SymPy expressions of the nodes `ids`, in one forward loop over what they reach.

    `atom(name, k)` gives the symbol of element `k` of input `name`. Expressions deeper than
    `UNEVALUATED_DEPTH` are built unevaluated: the tree of the graph as it is, `x*x` not `x**2`.
    Past `deadline` (`time.monotonic()`), if given, `OutOfTime` is raised.
    """
    live = _live(graph, ids)
    chained = _chains(graph, ids, live)
    return _export(graph, ids, atom, frozenset(), None, _flat_depth(graph, ids, live, chained),
                   live, chained, deadline)


def export_shared(graph: Graph, ids, atom: Callable, symbols) -> tuple[list, dict]:
    """`export_nodes` with every node that two or more nodes (or outputs) use named once:
    `(assignments, exprs)`, where `assignments` are `(symbol, expression)` pairs in the order
    of the graph, each in terms of earlier symbols, and `exprs` are the nodes `ids` in terms
    of them. Symbols come from the iterator `symbols`.

    Linear in the graph, where `sympy.cse` works on the trees written out: a loop's derivative
    graph of a few hundred nodes can stand for 10**10 terms (RK4 steps), which no tree
    algorithm gets through. A condition used twice is named as well (`x3 = (x1 > 0) & x2`).
    """
    nodes = graph.nodes
    live = _live(graph, ids)
    users = [0] * len(nodes)
    for i in ids:
        users[i] += 1
    for i, node in enumerate(nodes):
        if live[i]:
            for a in set(node.args):
                users[a] += 1
    # A node of a flat chain is written inside the chain's one Add or Mul, never named (it
    # has one user) and adds no level. Named too: a part of a formula deeper than
    # INLINE_DEPTH, cut there, so that no one formula is deep (SymPy's evaluation of a deep
    # Piecewise walks all of it).
    chained = _chains(graph, ids, live)
    shared = set()
    depths = [1] * len(nodes)
    for i, node in enumerate(nodes):
        if not live[i] or node.op in ("const", "input"):
            continue
        depths[i] = (0 if chained[i] else 1) + max((1 if a in shared else depths[a])
                                                  for a in node.args)
        if not chained[i] and (users[i] > 1 or depths[i] > INLINE_DEPTH):
            shared.add(i)
    assignments: list = []
    exprs = _export(graph, ids, atom, frozenset(shared), (symbols, assignments), INLINE_DEPTH,
                    live, chained)
    return assignments, exprs


def _live(graph: Graph, ids) -> bytearray:
    """1 for every node that the nodes `ids` reach."""
    nodes = graph.nodes
    live = bytearray(len(nodes))
    for i in ids:
        live[i] = 1
    for i in range(len(nodes) - 1, -1, -1):
        if live[i]:
            for a in nodes[i].args:
                live[a] = 1
    return live


# ---------------------------------------------------------------------------------------------
# Flat chains

# The ops that join a flat chain, by the SymPy object the chain becomes.
_FAMILY = {"add": "add", "sub": "add", "neg": "add", "mul": "mul"}


def _chains(graph: Graph, ids, live: bytearray) -> bytearray:
    """1 for every node written inside its user's flat Add or Mul rather than on its own:
    an `add`, `sub` or `neg` used exactly once, by an `add`, `sub` or `neg`, and not an
    output; the same for `mul` under `mul`. Uses are counted with repetition: in `s * s`
    the sum `s` is one factor twice, not a chain."""
    nodes = graph.nodes
    uses = [0] * len(nodes)
    user = [0] * len(nodes)
    for i in ids:
        uses[i] += 2  # an output is written whole, whatever else uses it
    for i, node in enumerate(nodes):
        if live[i]:
            for a in node.args:
                uses[a] += 1
                user[a] = i
    chained = bytearray(len(nodes))
    for i, node in enumerate(nodes):
        family = _FAMILY.get(node.op)
        if live[i] and family and uses[i] == 1 and _FAMILY.get(nodes[user[i]].op) == family:
            chained[i] = 1
    return chained


def _flat_depth(graph: Graph, ids, live: bytearray, chained: bytearray) -> int:
    """`graph_depth` with the nodes of flat chains adding no level."""
    nodes = graph.nodes
    depths = [1] * len(nodes)
    for i, node in enumerate(nodes):
        if live[i] and node.args:
            depths[i] = (0 if chained[i] else 1) + max(depths[a] for a in node.args)
    return max((depths[i] for i in ids), default=0)


class _Terms:
    """The terms (or factors) of a flat chain as it is built: `(sign, expr, alt)` items,
    `alt` None where it is `expr` (see `Arg`), each item's sign relative to `sign`.

    Joining two chains moves the shorter one's items into the longer one, so a chain of n
    nodes, nested to the left, to the right or as a tree, is built in O(n log n) steps; `neg`
    flips `sign` alone.
    """

    __slots__ = ("items", "sign")

    def __init__(self, items, sign: int = 1):
        self.items = collections.deque(items)
        self.sign = sign

    def join(self, other: _Terms) -> _Terms:
        """`self`'s items, then `other`'s."""
        if len(self.items) >= len(other.items):
            flip = self.sign * other.sign
            self.items.extend((s * flip, x, alt) for s, x, alt in other.items)
            return self
        flip = self.sign * other.sign
        other.items.extendleft((s * flip, x, alt) for s, x, alt in reversed(self.items))
        return other

    def negated(self) -> _Terms:
        self.sign = -self.sign
        return self

    def build(self, family: str) -> tuple:
        """The chain as one SymPy Add or Mul, and its `alt` (None where it is the same)."""
        join = sp.Add if family == "add" else sp.Mul

        def signed(sign, x):
            return x if sign * self.sign > 0 else -x

        expr = join(*(signed(s, x) for s, x, _ in self.items))
        if all(alt is None for _, _, alt in self.items):
            return expr, None
        return expr, join(*(signed(s, x if alt is None else alt) for s, x, alt in self.items))


def _chain_terms(node, terms: dict, exprs: list, alts: list, chained: bytearray) -> _Terms:
    """The terms of the chain that ends at `node`, taken from its arguments' chains."""
    parts = [terms.pop(a) if chained[a] else _Terms([(1, exprs[a], alts[a])])
             for a in node.args]
    if node.op == "neg":
        return parts[0].negated()
    if node.op == "sub":
        parts[1].negated()
    return parts[0].join(parts[1])


# ---------------------------------------------------------------------------------------------
# The export loop


def _export(graph: Graph, ids, atom: Callable, shared: frozenset, naming, depth: int,
            live: bytearray, chained: bytearray, deadline: float | None = None) -> dict:
    if depth > UNEVALUATED_DEPTH:
        with sp.evaluate(False):
            return _export_nodes(graph, atom, shared, naming, live, chained, ids, deadline)
    return _export_nodes(graph, atom, shared, naming, live, chained, ids, deadline)


def _export_nodes(graph: Graph, atom: Callable, shared: frozenset, naming, live: bytearray,
                  chained: bytearray, ids, deadline: float | None) -> dict[int, sp.Expr]:
    nodes = graph.nodes
    exprs: list = [None] * len(nodes)
    alts: list = [None] * len(nodes)  # None: the same as exprs[i]
    rels: dict[int, object] = {}
    terms: dict[int, _Terms] = {}  # chained node -> its chain so far, until its user takes it
    conditions: set = set()  # the symbols that name conditions
    for i, node in enumerate(nodes):
        if not live[i]:
            continue
        if deadline is not None and not i % 64 and time.monotonic() > deadline:
            raise OutOfTime(f"past its deadline at node {i} of {len(nodes)}")
        if node.op == "const":
            exprs[i] = constant(node.attr)
            continue
        if node.op == "input":
            exprs[i] = atom(*node.attr)
            continue
        name = node.op
        family = _FAMILY.get(name)
        if family and (chained[i] or any(chained[a] for a in node.args)):
            chain = _chain_terms(node, terms, exprs, alts, chained)
            if chained[i]:
                terms[i] = chain
                continue
            exprs[i], alts[i] = chain.build(family)
            if naming is not None and i in shared and not exprs[i].is_Atom:
                exprs[i] = _name(naming, exprs[i])
                alts[i] = None
            continue
        args = [Arg(exprs[a], exprs[a] if alts[a] is None else alts[a], rels.get(a))
                for a in node.args]
        result = SYMPY_FUNCS[name](args)
        # A Symbol is a Boolean too in SymPy; a condition is a Boolean that is no Expr, or
        # the name of one (`c & c` of a named condition c is c itself).
        if (isinstance(result, sp.logic.boolalg.Boolean) and not isinstance(result, sp.Expr)) \
                or result in conditions:
            if i in shared and naming is not None and not result.is_Atom:
                result = _name(naming, result)  # a Symbol is a condition too
                conditions.add(result)
            rels[i] = result
            exprs[i] = sp.Piecewise((sp.Integer(1), result), (sp.Integer(0), True))
            if isinstance(exprs[i], sp.Piecewise):
                alts[i] = select(result, sp.Integer(1), sp.Integer(0))
            continue
        exprs[i] = result
        if name in ALT_FUNCS:
            if isinstance(result, sp.Piecewise) or any(alts[a] is not None for a in node.args):
                alts[i] = ALT_FUNCS[name](args)
        elif any(alts[a] is not None for a in node.args):
            alts[i] = SYMPY_FUNCS[name]([Arg(g.alt, g.alt, g.rel) for g in args])
        # A select is named wherever it is: Piecewise walks the Piecewises in its arguments.
        if naming is not None and not result.is_Atom and (i in shared or
                                                          isinstance(result, sp.Piecewise)):
            exprs[i] = _name(naming, result)
            alts[i] = None
    return {i: exprs[i] for i in ids}


def _name(naming, expr):
    symbols, assignments = naming
    symbol = next(symbols)
    assignments.append((symbol, expr))
    return symbol


def shaped(flat: list, shape: tuple):
    """An expression for shape (), else a `sympy.Array` of `shape` (row-major `flat`)."""
    if not shape:
        return flat[0]
    return sp.Array(flat, shape)


def _output_names(graph: Graph, names) -> list[str]:
    if names is None:
        return list(graph.outputs)
    names = [names] if isinstance(names, str) else list(names)
    for name in names:
        if name not in graph.outputs:
            raise UsageError(f"'{name}' is not an output of this program",
                             hint=f"the outputs are: {', '.join(graph.outputs)}")
    return names


def to_sympy(graph: Graph, names=None, real: bool = True) -> dict:
    """Outputs (all, or those in `names`) as SymPy: an expression, or a `sympy.Array`."""
    names = _output_names(graph, names)
    syms = Symbols(graph, real)
    ids = [i for name in names for i in graph.outputs[name].ids]
    exprs = deep_call(export_depth(graph, ids), export_nodes, graph, ids,
                      lambda name, k: syms.public[name][k])
    return {name: shaped([exprs[i] for i in graph.outputs[name].ids], graph.outputs[name].shape)
            for name in names}


# ---------------------------------------------------------------------------------------------
# Derivatives as SymPy, element by element


def function_exprs(graph: Graph, of: str, atom: Callable, deadline: float | None = None) -> list:
    """The elements of output `of`, flat."""
    ids = graph.outputs[of].ids
    exprs = export_nodes(graph, ids, atom, deadline)
    return [exprs[i] for i in ids]


def jacobian_exprs(jac: Graph, wrt: list[str], atom: Callable,
                   deadline: float | None = None) -> dict[str, list]:
    """The "d:NAME" outputs of a jacobian graph, flat, by input name."""
    ids = [i for name in wrt for i in jac.outputs[autodiff.d_name(name)].ids]
    exprs = export_nodes(jac, ids, atom, deadline)
    return {name: [exprs[i] for i in jac.outputs[autodiff.d_name(name)].ids] for name in wrt}


# ---------------------------------------------------------------------------------------------
# Depth of SymPy expressions


def sympy_depth(exprs) -> int:
    """The depth of the deepest of the SymPy expressions `exprs`, found without recursion."""
    depth: dict[int, int] = {}  # id of a subexpression -> its depth; `exprs` keeps them alive
    deepest = 0
    for root in exprs:
        stack = [(root, False)]
        while stack:
            expr, ready = stack.pop()
            args = getattr(expr, "args", ())
            if ready:
                depth[id(expr)] = 1 + max((depth[id(a)] for a in args), default=0)
            elif id(expr) not in depth:
                stack.append((expr, True))
                stack.extend((a, False) for a in args if id(a) not in depth)
        deepest = max(deepest, depth[id(root)])
    return deepest
