"""The op table: every table that consumes it is derived from the rows and covers every op, so
a new elementwise op is one row in ops.py plus its tests. The behaviour of each consumer is
tested where it lives (test_builtins: fold against NumPy; test_engine: LLVM and the tapes on
special values; test_cuda: the CUDA kernels; test_symbolic: SymPy export and derivatives;
test_autodiff: pullbacks against finite differences)."""

from __future__ import annotations

import ast
import re

import pytest

from diffdsl import builtins, dot, ops, rewrites, static, ufuncs
from diffdsl.backends import cuda, cuda_tape, llvm, numba_text, tape
from diffdsl.ir import Builder, Port
from diffdsl.ops import OPS
from diffdsl.sympy_ops import ALT_FUNCS, SYMPY_FUNCS

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
        name in llvm._spellings(dtype) for dtype in llvm.TYPES),
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
