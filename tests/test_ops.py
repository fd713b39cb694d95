"""The op table: every table that consumes it is derived from the rows and covers every op, so
a new elementwise op is one row in ops.py plus its tests. The behaviour of each consumer is
tested where it lives (test_builtins: fold against NumPy; test_engine: LLVM and the tapes on
special values; test_cuda: the CUDA kernels; test_symbolic: SymPy export and derivatives;
test_autodiff: pullbacks against finite differences). Every op also runs as a program of the
language, and its fold agrees with its NumPy function."""

from __future__ import annotations

import ast
import math
import re

import numpy as np
import pytest
from test_builtins import BINARY, UNARY, close

import diffdsl
from diffdsl.backends import cuda, cuda_tape, llvm, numba_text, tape
from diffdsl.graph import dot, ops, rewrites, ufuncs
from diffdsl.graph.ir import Builder, Port
from diffdsl.graph.ops import OPS
from diffdsl.language import static
from diffdsl.language.builtins import table as builtins
from diffdsl.symbolic.ops import ALT_FUNCS, SYMPY_FUNCS

NODES = [name for name, row in OPS.items() if row.arity]  # every op with arguments
OPERANDS = ["a", "b", "c"]


def _branch(source: str, name: str) -> bool:
    """Whether a tape interpreter's text has the branch of `name`, spelled as its row says."""
    test = f"op == {numba_text.CODE[name]}:  # {name}\n"
    third = "v[args[i, 2]]" if "v[i] = " in source else "V[args[i, 2], t]"
    body = numba_text.expression(name, ["a", "b", third], "one", "zero")
    branch = re.escape(test) + r" +\S+ = " + re.escape(body) + "\n"
    return bool(body) and re.search(branch, source) is not None


def _module_line(name: str) -> bool:
    """The CUDA module spells a node of `name` as its row says, in valid Python."""
    b = Builder()
    args = [b.input("x", k) for k in range(OPS[name].arity)]
    out = b.add(b.op(name, *args), b.const(1.5))  # so the op's node is not an output alone
    graph = b.graph({"x": Port((len(args),), tuple(args))}, {"y": Port((), (out,))})
    lines = cuda.body_lines(graph)
    want = numba_text.expression(name, [f"v{a}" for a in range(len(args))], "T(1.0)", "T(0.0)")
    ast.parse("\n".join(lines))
    return f"v{len(args)} = {want}" in lines


CONSUMERS = {
    "fold": lambda name: callable(OPS[name].fold),
    "NumPy function (ufuncs)": lambda name: callable(ufuncs.FUNCTIONS[name]),
    "LLVM spelling, both dtypes": lambda name: all(
        name in llvm.spellings(dtype) for dtype in llvm.TYPES),
    "CUDA module line": _module_line,
    "CPU tape branch": lambda name: _branch(tape.source(), name),
    "CUDA tape branch": lambda name: _branch(cuda_tape.source(), name),
    "SymPy rule": lambda name: callable(SYMPY_FUNCS[name]),
    "drawing label": lambda name: bool(OPS[name].symbol),
    "derivative: a pullback, or flat": lambda name: OPS[name].pullback is not None or (
        OPS[name].tangent is None and not OPS[name].routes and not OPS[name].copies),
}


@pytest.mark.parametrize("name", NODES)
@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_every_consuming_table_covers_every_op(consumer, name):
    assert CONSUMERS[consumer](name), f"{consumer} does not cover {name}"


def test_opcodes_are_positions_in_the_table():
    assert list(numba_text.CODE) == list(OPS)
    assert [numba_text.CODE[name] for name in OPS] == list(range(len(OPS)))
    assert tape.CODE is numba_text.CODE


def test_tables_keyed_by_op_name_name_ops_only():
    """Every key of a table derived from the rows, or written beside them, is an op."""
    assert set(rewrites.RULES) <= set(OPS)
    assert set(ALT_FUNCS) == {name for name, row in OPS.items() if row.sympy_alt}
    assert set(SYMPY_FUNCS) == set(NODES) == set(ufuncs.FUNCTIONS)
    assert set(ops.UNARY_BUILTINS) | set(ops.BINARY_BUILTINS) <= set(builtins.BUILTINS)


def test_rows_that_keep_integers_fold_integers_to_integers():
    for name, row in OPS.items():
        if row.keeps_integers:
            value = static.static_integer(name, (7, -3)[:row.arity])
            assert type(value) is int and value == row.fold(*(7.0, -3.0)[:row.arity]), name


def test_drawings_label_ops_by_their_rows():
    b = Builder()
    x = b.input("x", 0)
    graph = b.graph({"x": Port((), (x,))}, {"y": Port((), (b.op("le", b.neg(x), x),))})
    text = dot.to_dot(graph)
    assert 'label="<="' in text and 'label="-x"' in text


def test_rows_spell_operands_they_have():
    """A spelling names each of its row's operands and no other."""
    for name in NODES:
        row = OPS[name]
        for field in ("numpy", "numba", "ll", "sympy"):
            text = getattr(row, field)
            used = {int(k) for k in re.findall(r"\{(\d)", text)}
            if field == "sympy" and text.isidentifier():
                continue  # a SymPy function's name, applied to every argument
            if field == "numpy" and not text:
                continue  # the fold, mapped over the elements
            assert used == set(range(row.arity)), (name, field, text)


# every op through the language ----------------------------------------------------------

# One program per op of `ops.OPS` (leaves excepted): source, inputs, expected value.
_A = 0.7
_B = -1.3
_AB = {"a": _A, "b": _B}
OP_CASES = {
    name: (f"input a\noutput y = {name}(a)", {"a": val}, UNARY[name][0](val))
    for name, val in {
        "exp": 0.3, "log": 0.7, "log1p": 0.7, "expm1": 0.3, "log2": 0.7, "log10": 0.7,
        "sqrt": 0.7, "cbrt": -0.7, "sin": 0.7, "cos": 0.7, "tan": 0.7, "asin": 0.7,
        "acos": 0.7, "atan": 0.7, "sinh": 0.7, "cosh": 0.7, "tanh": 0.7, "asinh": 0.7,
        "acosh": 1.7, "atanh": 0.7, "abs": -0.7, "sign": -0.7, "floor": -0.7, "ceil": -0.7,
        "erf": 0.7, "lgamma": 0.7,
    }.items()
}
OP_CASES.update({
    name: (f"input a\ninput b\noutput y = {name}(a, b)", _AB, BINARY[name][0](_A, _B))
    for name in ("atan2", "hypot", "logaddexp", "min", "max")
})
OP_CASES.update({
    "pow": ("input a\ninput b\noutput y = a ** b", {"a": _A, "b": 2.5}, _A ** 2.5),
    "neg": ("input a\noutput y = -a", {"a": _A}, -_A),
    "add": ("input a\ninput b\noutput y = a + b", _AB, _A + _B),
    "sub": ("input a\ninput b\noutput y = a - b", _AB, _A - _B),
    "mul": ("input a\ninput b\noutput y = a * b", _AB, _A * _B),
    "div": ("input a\ninput b\noutput y = a / b", _AB, _A / _B),
    "lt": ("input a\ninput b\noutput y = if a < b then a else b", _AB, _B),
    "le": ("input a\ninput b\noutput y = if a <= b then a else b", _AB, _B),
    "gt": ("input a\ninput b\noutput y = if a > b then a else b", _AB, _A),
    "ge": ("input a\ninput b\noutput y = if a >= b then a else b", _AB, _A),
    "eq": ("input a\ninput b\noutput y = if a == b then a else b", _AB, _B),
    "ne": ("input a\ninput b\noutput y = if a != b then a else b", _AB, _A),
    "and": ("input a\ninput b\noutput y = if a > 0 and b > 0 then a else b", _AB, _B),
    "or": ("input a\ninput b\noutput y = if a > 0 or b > 0 then a else b", _AB, _A),
    "not": ("input a\ninput b\noutput y = if not a > 0 then a else b", _AB, _B),
    "select": ("input a\ninput b\noutput y = if a > b then sin(a) else cos(b)", _AB,
               math.sin(_A)),
})


def test_every_op_is_covered():
    assert set(OP_CASES) == set(OPS) - {"input", "const"}


@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_op(name):
    src, inputs, expected = OP_CASES[name]
    prog = diffdsl.compile(src)
    assert name in prog.graph.op_counts(), prog.graph.text()
    close(prog(**inputs), expected)
    # The same op over a batch of rows that all hold the same values.
    batch = {k: np.full(3, v) for k, v in inputs.items()}
    close(prog(**batch), np.full(3, expected))


@pytest.mark.parametrize("name", sorted(n for n in OPS if n not in ("input", "const")))
def test_op_fold_matches_numpy(name):
    """The table's constant folding (`fold`) agrees with its NumPy spelling (`numpy`)."""
    row = OPS[name]
    args = {1: [(0.7,), (-0.3,)], 2: [(0.7, -1.3), (1.5, 1.5)], 3: [(1.0, 0.7, -1.3),
                                                                  (0.0, 0.7, -1.3)]}[row.arity]
    if name in ("log", "log2", "log10", "sqrt"):
        args = [(1.7,), (0.3,)]
    if name == "acosh":
        args = [(1.7,), (3.0,)]
    if name == "pow":
        args = [(0.7, -1.3), (1.5, 2.0)]
    for a in args:
        close(float(row.fold(*a)), float(ufuncs.FUNCTIONS[name](*(np.float64(x) for x in a))))
