"""Array expressions over inputs read in place, kept by rows.

An elementwise operation, a matrix product or a reduction along a later axis of arrays whose
first axis is that of an input read in place (`X @ w - y`, `exp(x - m)`,
`logsumexp(A, axis=1)`) is not lowered element by element. Its value is a `Rows`: the rule
that lowers one row of it from its operands' rows. A reduction of all of it (`sum`, `mean`,
`min`, `max`, `logsumexp`) or along its first axis lowers that rule once, as the body of a loop
kept as a loop whose streams read the inputs where they lie, so `mean((X @ w - y) ** 2)` over
10^6 rows is a graph the size of its text; so does a loop of the program's own that reads it at
its index (`r[i]`). Any other use lists its elements, row by row, with the nodes the
elementwise lowering makes: the program's meaning does not change.

Rows are made at the top level of the program only (not in a loop's body; a def never sees an
input), where the first axis is longer than `limits.unroll`. A sum of a matrix adds each row's
sum, in order: the same terms as the elementwise fold, added in another order.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ...graph.ir import Builder, Port
from ..builtins.common import Scalars
from ..builtins.table import reduce_along, reduce_items
from ..loop_index import Index
from ..values import is_array
from . import mapped, padded
from .mapped import Mapped
from .regions import in_body
from .stream_reads import read
from .wholes import Shaped, WholeInput, listed, root_builder, row_elements

ALL, ROWS = "all", "rows"  # how a Rows reads an operand: the same in every row, or its row


class Rows(Shaped):
    """An array of shape `shape` whose row k is `rule(*values)`, each value that of an operand
    (`how`, operand): its row k where `how` is ROWS (an operand with the same first axis), the
    operand itself where ALL (broadcast against the row, or a matrix product's right side).
    `elements`: the array listed, once a use needed it."""

    __slots__ = ("shape", "rule", "operands", "span", "elements")

    def __init__(self, shape: tuple, rule, operands: list, span):
        self.shape, self.rule, self.operands, self.span = tuple(shape), rule, operands, span
        self.elements = None


def lazy(x) -> bool:
    """Whether `x` is an input read in place or an array expression kept by rows."""
    return isinstance(x, Shaped)


def shape(x) -> tuple:
    return tuple(x.shape) if lazy(x) or is_array(x) else ()


@contextmanager
def _at_root(lw):
    """Lower into the program's own builder (a lazy value's elements are nodes of it, read by
    a loop's body as captured values)."""
    b = lw.v.b
    lw.v.b = lw.b = root_builder(b)
    try:
        yield
    finally:
        lw.v.b = lw.b = b


def elements(lw, x):
    """`x` with its elements listed where it is lazy (made once, within the elements limit);
    anything else as it is."""
    if isinstance(x, WholeInput):
        return listed(lw, x)
    if isinstance(x, Mapped):
        return mapped.listed(lw, x)
    if isinstance(x, padded.Padded):
        return padded.listed(lw, x)
    if isinstance(x, Stack):
        if x.elements is None:
            x.elements = lw.v.stack([elements(lw, a) for a in x.items], x.span)
        return x.elements
    if not isinstance(x, Rows):
        return x
    if x.elements is None:
        lw.v.check_size(x.size, x.span, "this array expression")
        out = np.empty(x.shape, dtype=object)
        with _at_root(lw):
            for k in range(x.shape[0]):
                out[k] = row(lw, x, k)
        x.elements = out
    return x.elements


def row(lw, x, i):
    """Row i of `x`: `i` an `Index` of the loop being lowered, or a static integer."""
    if isinstance(x, Rows):
        if x.elements is not None and not isinstance(i, Index):
            return x.elements[i]
        return x.rule(*[row(lw, a, i) if how == ROWS else a for how, a in x.operands])
    if isinstance(i, Index):
        return read(lw, x, [(i, x.span if isinstance(x, WholeInput) else None)], None)
    if isinstance(x, WholeInput):
        return x.elements[i] if x.elements is not None else row_elements(lw, x, i)
    if isinstance(x, Mapped):
        return mapped.row(lw, x, i)
    if isinstance(x, padded.Padded):
        return padded.element(x, i)
    return x[i]


def kept(lw, n: int) -> bool:
    """Whether an array of `n` rows may be kept by rows where it is made."""
    return isinstance(lw.v.b, Builder) and n > lw.v.limits.unroll


def elementwise(lw, rule, args: list, span):
    """The Rows of scalar-wise `rule` over `args` broadcast as NumPy broadcasts, where one of
    them is lazy and gives the result its first axis; None otherwise (the caller lists them
    and lowers the operation element by element, its errors included). Over vectors whose
    tail is one value (padded.py), and scalars, the same for such a vector."""
    if any(isinstance(a, padded.Padded) for a in args):
        done = padded.elementwise(lw, rule, args, span)
        if done is not None:
            return done
    shapes = [shape(a) for a in args]
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        return None
    if any(isinstance(a, Stack) for a in args):
        return _per_item(lw, rule, args, shapes, out, span)
    if not out or not kept(lw, out[0]) or not any(
            lazy(a) and sh == out[:1] + sh[1:] and len(sh) == len(out)
            for a, sh in zip(args, shapes, strict=True)):
        return None
    operands = []
    for a, sh in zip(args, shapes, strict=True):
        if len(sh) == len(out) and sh[0] == out[0]:
            operands.append((ROWS, a))
        elif len(sh) == len(out):  # a first axis of 1: its one row, in every row
            with _at_root(lw):
                operands.append((ALL, elements(lw, row(lw, a, 0))))
        else:
            operands.append((ALL, elements(lw, a)))
    return Rows(out, rule, operands, span)


def matmul(lw, a, b, span):
    """`a @ b` kept by rows: a matrix with a lazy first axis times a matrix or vector (each
    row's product), or a lazy vector times a vector or matrix with rows to match (a sum over
    its elements, kept as a loop); None otherwise."""
    sa, sb = shape(a), shape(b)
    if not (len(sa) in (1, 2) and len(sb) in (1, 2) and sa[-1] == sb[0]
            and isinstance(a, (Rows, WholeInput, Mapped))):
        return None
    if len(sa) == 2 and kept(lw, sa[0]):
        return Rows((sa[0], *sb[1:]), lambda r, m: lw.v.matmul(r, m, span),
                    [(ROWS, a), (ALL, elements(lw, b))], span)
    if len(sa) == 1 and kept(lw, sa[0]):
        products = Rows(sb, lambda x, y: lw.v.arith("*", x, y, span), [(ROWS, a), (ROWS, b)],
                        span)
        return along(lw, "sum", products, 0, span)
    return None


def reduce(lw, name: str, x, span):
    """`name` (sum, mean, min, max or logsumexp) of every element of lazy `x`, kept as a loop
    over its rows; None where it cannot be (the caller lists the elements)."""
    if name not in ("sum", "mean", "min", "max", "logsumexp"):
        return None
    if isinstance(x, Stack):  # along its first axis (the items), then over the rows
        inner = along(lw, "sum" if name == "mean" else name, x, 0, span)
        total = reduce(lw, "sum" if name == "mean" else name, inner, span) \
            if isinstance(inner, Rows) else None
        return lw.v.arith("/", total, x.size, span) if name == "mean" and total is not None \
            else total
    if not kept(lw, x.shape[0]):
        return None
    if x.ndim == 1:
        return along(lw, name, x, 0, span)
    # every element: reduced within each row, then over the rows (logsumexp shifts by the
    # max of all of them)
    if name == "logsumexp":
        return _logsumexp(lw, x, span, whole=True)
    inner = "sum" if name == "mean" else name
    per_row = Rows((x.shape[0],), lambda r: reduce_items(lw.v, inner, _items(r), span),
                   [(ROWS, x)], span)
    total = along(lw, inner, per_row, 0, span)
    if total is None or name != "mean":
        return total
    return lw.v.arith("/", total, x.size, span)


def along(lw, name: str, x, axis: int, span):
    """`name(x, axis=axis)` of lazy `x` (axis from 0): along the first axis a loop kept as a
    loop, with an output per element of a row; along another, a Rows reducing each row.
    None where it cannot be kept (the caller lists the elements)."""
    if name not in ("sum", "mean", "min", "max", "logsumexp"):
        return None
    if isinstance(x, Stack):
        return _stack_along(lw, name, x, axis, span)
    if not kept(lw, x.shape[0]):
        return None
    if axis > 0:
        rest = x.shape[:axis] + x.shape[axis + 1:]
        return Rows(rest, lambda r: reduce_along(lw.v, name, r, axis - 1, span), [(ROWS, x)],
                    span)
    if name == "logsumexp":
        return _logsumexp(lw, x, span, whole=False)
    combine = name if name in ("min", "max") else "add"
    totals = _over_rows(lw, x, lambda r: _items(r), combine)
    if totals is None:
        return None
    if name == "mean":
        totals = [lw.v.arith("/", t, x.shape[0], span) for t in totals]
    return _shaped(totals, x.shape[1:])


def _logsumexp(lw, x, span, whole: bool):
    """logsumexp of every element of `x` (whole) or along its first axis: shifted by the max
    rounded down (`Scalars.shift`) before `exp`, as the elementwise lowering does."""
    a = Scalars(lw.v, span)
    each = (lambda r: [reduce_items(lw.v, "max", _items(r), span)]) if whole else _items
    m = _over_rows(lw, x, each, "max")
    if m is None:
        return None
    shift = [a.shift(v) for v in m]

    def exps(r):
        items = _items(r)
        if whole:
            return [reduce_items(lw.v, "sum", [a.f("exp", a.sub(t, shift[0])) for t in items],
                                 span)]
        return [a.f("exp", a.sub(t, s)) for t, s in zip(items, shift, strict=True)]
    total = _over_rows(lw, x, exps, "add")
    if total is None:
        return None
    out = [a.add(s, a.f("log", t)) for s, t in zip(shift, total, strict=True)]
    return out[0] if whole else _shaped(out, x.shape[1:])


def softmax(lw, x, span):
    """softmax over every element of lazy `x`: a Rows of `exp(r - shift) / total`, the shift
    (`Scalars.shift` of the max) and the total each a loop over the rows, as the elementwise
    lowering computes them; None where a loop cannot be kept."""
    if isinstance(x, Stack) or not kept(lw, x.shape[0]):
        return None
    a = Scalars(lw.v, span)
    m = reduce(lw, "max", x, span)
    if m is None:
        return None
    shift = a.shift(m)
    exps = Rows(x.shape, lambda r: lw.v.elementwise(lambda t: a.f("exp", a.sub(t, shift)),
                                                    [r], span, "softmax()"), [(ROWS, x)], span)
    total = reduce(lw, "sum", exps, span)
    if total is None:
        return None
    return Rows(x.shape, lambda e: lw.v.arith("/", e, total, span), [(ROWS, exps)], span)


def output(lw, x, span) -> Port | None:
    """The port of an output kept by rows: a loop over the rows that stores each row's values
    (a map region), the port whole on its values, in order; None where it cannot be kept (the
    caller lists the elements). A comprehension's rows are its region's values already."""
    if isinstance(x, Mapped):
        return Port(x.shape, (), span, (x.node, 0))
    if not isinstance(x, Rows) or x.elements is not None or not kept(lw, x.shape[0]):
        return None
    region = in_body(lw, x.shape[0],
                     lambda bb: bb.finish([], _items(row(lw, x, Index.of(bb)))))
    return None if region is None else Port(x.shape, (), span, (region, 0))


def _over_rows(lw, x, each, combine: str) -> list | None:
    """The values of a loop kept as a loop over the rows of `x`: `each(row)` lists the values
    of one row, each combined over the rows by `combine`; None where the body is irregular."""
    def build(bb):
        values = each(row(lw, x, Index.of(bb)))
        return bb.finish(values, [], (combine,) * len(values)), len(values)
    done = in_body(lw, x.shape[0], build)
    if done is None:
        return None
    region, m = done
    return [lw.v.dyn(lw.b.part(region, k)) for k in range(m)]


def _items(r) -> list:
    return list(r.flat) if is_array(r) else [r]


def _shaped(values: list, rest: tuple):
    if not rest:
        return values[0]
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(rest)


def binary(lw, op: str, left, right, span):
    """`left op right` kept by rows, or None."""
    if op == "@":
        return matmul(lw, left, right, span)
    if op in ("//", "%"):
        return None
    return elementwise(lw, lambda x, y: lw.v.arith(op, x, y, span), [left, right], span)


def index(lw, x, subs: list, span):
    """`x[subs]` of lazy `x`: a row (at a loop's index, or a static one) indexed further, or,
    for `x[:, ...]`, a Rows of each row indexed so; None otherwise (the caller lists `x`, or
    reads an input's elements as it did)."""
    (first, at), rest = subs[0], subs[1:]
    if isinstance(x, Stack):
        if type(first) is not int or not -x.shape[0] <= first < x.shape[0]:
            return None
        item = x.items[first]
        if not rest:
            return item
        return index(lw, item, rest, span) if lazy(item) else lw.v.getitem(item, rest, span)
    whole = type(first) is slice and first == slice(None)
    if (isinstance(x, WholeInput) and not whole) or any(
            type(item) not in (int, slice) for item, _ in rest) or not (
            isinstance(first, Index) or type(first) in (int, slice)):
        return None
    # the errors indexing its elements would give (none are listed): an index out of range,
    # too many indices
    dims = np.broadcast_to(np.empty((), dtype=object), x.shape)
    lw.v.getitem(dims, [(0 if isinstance(first, Index) else first, at), *rest], span)
    if isinstance(first, Index) or type(first) is int:
        r = row(lw, x, first)
        return lw.v.getitem(r, rest, span) if rest else r
    if whole and rest and kept(lw, x.shape[0]):
        out = dims[(slice(None), *(item for item, _ in rest))].shape
        return Rows(out, lambda r: lw.v.getitem(r, rest, span), [(ROWS, x)], span)
    return None


class Stack(Shaped):
    """`[a, b, ...]` of arrays of one shape (n, ...) kept by rows: an array of shape
    (k, n, ...) kept as its items (a list of components' columns, say). A reduction along its
    first axis is kept by rows; an elementwise operation is, item by item."""

    __slots__ = ("items", "shape", "span", "elements")

    def __init__(self, items: list, span):
        self.items, self.span = items, span
        self.shape = (len(items), *shape(items[0]))
        self.elements = None


def stack(lw, items: list, span):
    """The array of `items` (an array literal, a comprehension written out): a Stack where one
    is kept by rows and all have its shape, else the items' elements stacked."""
    dims = [shape(a) for a in items]
    if items and any(lazy(a) for a in items) and dims[0] and kept(lw, dims[0][0]) and all(
            d == dims[0] for d in dims) and not any(isinstance(a, Stack) for a in items):
        return Stack(items, span)
    return lw.v.stack([elements(lw, a) for a in items], span)


def _per_item(lw, rule, args: list, shapes: list, out: tuple, span):
    """`rule` over `args`, some of them Stacks: the Stack of its values item by item, each
    kept by rows; None where one is not."""
    items = []
    for c in range(out[0]):
        part = []
        for a, sh in zip(args, shapes, strict=True):
            if len(sh) < len(out):  # broadcast along the items
                part.append(a)
            elif isinstance(a, Stack):
                part.append(a.items[c if sh[0] > 1 else 0])
            elif is_array(a):
                part.append(a[c if sh[0] > 1 else 0])
            else:  # an array kept by rows whose rows are the items' axis
                return None
        done = elementwise(lw, rule, part, span)
        if done is None:
            return None
        items.append(done)
    return Stack(items, span)


def _stack_along(lw, name: str, x: Stack, axis: int, span):
    """`name(x, axis=axis)` of a Stack: along the items a Rows reducing each row's k values
    (element by element), along a later axis the items' reductions stacked."""
    if axis == 0:
        return Rows(x.shape[1:], lambda *r: reduce_along(lw.v, name, _stacked(r), 0, span),
                    [(ROWS, a) for a in x.items], span)
    done = [along(lw, name, a, axis - 1, span) if lazy(a) else None for a in x.items]
    return None if any(d is None for d in done) else stack(lw, done, span)


def _stacked(values) -> np.ndarray:
    out = np.empty((len(values), *shape(values[0])), dtype=object)
    for c, v in enumerate(values):
        out[c] = v
    return out
