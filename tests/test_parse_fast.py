"""The parser's fast path (language/lalr.py, language/numbers.py) against Lark's own path.

Every source parses to the tree Lark's parser and transformer give, span for span (or, where
a long array literal of numbers is read in bulk, to a `NumberArray` holding exactly the
values of Lark's `ArrayLit`), and a source Lark refuses gives Lark's error, word for word.
The trees come from the examples, from the fuzzer's program generator (mutated programs
included), from the same programs laid out with other spaces, newlines and comments, and from
generated array literals; the bulk reader is also run with its threshold at 1, so that every
literal in those programs goes through it.
"""

from __future__ import annotations

import math
from pathlib import Path

import fuzzing
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffdsl.errors import DiffDSLError, Span
from diffdsl.language import lalr, numbers, parse
from diffdsl.language import syntax as s
from diffdsl.language.lower import lower
from diffdsl.limits import using

EXAMPLES = sorted(Path(__file__).resolve().parent.parent.glob("examples/**/*.dd"))
SLOW = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _literal_values(e):
    """The numbers of an `ArrayLit` of plain (signed) numbers as nested lists, else None."""
    if isinstance(e, s.ArrayLit):
        items = [_literal_values(x) for x in e.elts]
        return None if any(x is None for x in items) else items
    sign = 1
    if isinstance(e, s.UnaryOp):
        sign, e = (-1 if e.op == "-" else 1), e.operand
    if isinstance(e, s.Num) and type(e.value) in (int, float):
        return -e.value if sign < 0 else e.value
    return None


def _same_number(a, b) -> bool:
    return type(a) is type(b) and (a == b or (a != a and b != b)) and \
        (type(a) is int or math.copysign(1, a) == math.copysign(1, b))


def assert_same_tree(fast, slow, where="tree"):
    """Equal class by class, field by field, spans (all of their places) included."""
    stack = [(fast, slow, where)]
    while stack:
        a, b, at = stack.pop()
        if isinstance(a, s.NumberArray) and isinstance(b, s.ArrayLit):
            expect = np.array(_literal_values(b), dtype=object)
            assert a.values.shape == expect.shape, at
            assert all(map(_same_number, a.values.flat, expect.flat)), at
            stack.append((a.span, b.span, at + ".span"))
            continue
        assert type(a) is type(b), f"{at}: {type(a).__name__} vs {type(b).__name__}"
        if isinstance(a, Span):
            assert (a.filename, a.line, a.column, a.end_line, a.end_column) == \
                (b.filename, b.line, b.column, b.end_line, b.end_column), f"{at}: {a} vs {b}"
            assert a.source is b.source or a.source == b.source, at
        elif isinstance(a, tuple):
            assert len(a) == len(b), at
            stack.extend((x, y, f"{at}[{k}]") for k, (x, y) in enumerate(zip(a, b, strict=True)))
        elif hasattr(a, "__dataclass_fields__"):
            stack.extend((getattr(a, f), getattr(b, f), f"{at}.{f}")
                         for f in a.__dataclass_fields__)
        elif isinstance(a, float):
            assert _same_number(a, b), at
        else:
            assert a == b and type(a) is type(b), f"{at}: {a!r} vs {b!r}"


def check(source: str, bulk_everything: bool = False):
    """The fast path and Lark's agree on `source`; valid text never falls back."""
    try:
        slow = parse.parse_with_lark(source, "p.dd")
    except DiffDSLError as exc:
        with pytest.raises(type(exc)) as fast_error:
            parse.parse(source, "p.dd")
        assert str(fast_error.value) == str(exc)
        assert fast_error.value.span == exc.span
        return
    transformer = parse._ToSyntax("p.dd", source)
    from diffdsl.language.postlex import Newlines
    fast = parse._fast(True).parse(source, "p.dd", transformer, Newlines().process, 4096)
    assert_same_tree(fast, slow.statements)
    if not bulk_everything:
        assert not _has_number_array(fast)
    assert_same_tree(parse.parse(source, "p.dd"), slow)


def _has_number_array(x) -> bool:
    stack = [x]
    while stack:
        x = stack.pop()
        if isinstance(x, s.NumberArray):
            return True
        if isinstance(x, tuple):
            stack.extend(x)
        elif hasattr(x, "__dataclass_fields__"):
            stack.extend(getattr(x, f) for f in x.__dataclass_fields__)
    return False


@pytest.fixture
def bulk_everything(monkeypatch):
    monkeypatch.setattr(numbers, "BULK_MIN", 1)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples(path):
    check(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_with_every_literal_in_bulk(path, bulk_everything):
    check(path.read_text(encoding="utf-8"), bulk_everything=True)


@SLOW
@given(fuzzing.programs(mutate=True))
def test_generated_programs(source):
    check(source)


@SLOW
@given(fuzzing.programs(mutate=True), st.data())
def test_generated_programs_laid_out_otherwise(source, data):
    """Spaces become tabs or runs of spaces, some become newlines (inside brackets they are
    spaces, elsewhere they may end a statement or be an error), lines end in CRLF, comments."""
    pieces = source.split(" ")
    out = [pieces[0]]
    for piece in pieces[1:]:
        out.append(data.draw(st.sampled_from([" ", "  ", "\t", "\n", " # note\n", " \\ "])))
        out.append(piece)
    text = "".join(out)
    if data.draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    check(text)


@SLOW
@given(fuzzing.programs(mutate=False))
def test_generated_programs_with_every_literal_in_bulk(source):
    old, numbers.BULK_MIN = numbers.BULK_MIN, 1
    try:
        check(source, bulk_everything=True)
    finally:
        numbers.BULK_MIN = old


def _number_text() -> st.SearchStrategy:
    """Ways to write a number as the grammar allows: exponents, leading zeros."""
    return st.one_of(
        st.integers(0, 10 ** 30).map(str),
        st.integers(1, 30).map(lambda k: "0" * k), st.integers(1, 30).map(lambda k: "0" * k + "7"),
        st.floats(0, 1e300, allow_nan=False, allow_infinity=False).map(repr),
        st.tuples(st.integers(0, 999), st.integers(-400, 400)).map(
            lambda t: f"{t[0]}e{t[1]}" if t[1] < 0 else f"{t[0]}.E+{t[1]}"),
        st.integers(0, 999).map(lambda k: f".{k}"), st.integers(0, 999).map(lambda k: f"{k}."),
    )


_SIGNS = st.sampled_from(["", "-", "+", "- ", "-\n"])
_SEPARATORS = st.sampled_from([",", ", ", " ,", ",\n", ",\t\t"])


@st.composite
def literals(draw):
    """An array literal of numbers, flat or nested, of one shape or (rarely) ragged."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))

    def make(dims):
        if not dims:
            return draw(_SIGNS) + draw(_number_text())
        items = [make(dims[1:]) for _ in range(dims[0])]
        if len(dims) > 1 and draw(st.integers(0, 9)) == 0:
            items.append(make(dims[2:] or []))  # ragged: not read in bulk
        return "[" + "".join(x + draw(_SEPARATORS) for x in items[:-1]) + items[-1] + \
            draw(st.sampled_from(["", ",", " , "])) + draw(st.sampled_from(["", " ", "\n"])) + "]"
    return make(shape)


@SLOW
@given(literals())
def test_literals_read_in_bulk(text):
    """Bulk or not, the same values: Python ints for integer literals, floats for the rest,
    the sign of zero kept; a literal the bulk reader refuses is parsed the usual way."""
    old, numbers.BULK_MIN = numbers.BULK_MIN, 1
    try:
        for source in (f"const c = {text}\noutput y = 1\n", f"output y = sum({text})\n",
                       f"input x\noutput y = x * {text}\n"):
            check(source, bulk_everything=True)
    finally:
        numbers.BULK_MIN = old


def test_a_long_literal_is_one_node_of_its_values():
    rng = np.random.default_rng(3)
    values = [float(v) for v in rng.standard_normal(3000)] + [-0.0, 12, -7, 1e308 * 10]
    text = "[" + ", ".join(repr(v) if v != math.inf else "1e309" for v in values) + "]"
    program = parse.parse(f"input w\nconst c = {text}\noutput y = w * c[1]\n", "p.dd")
    node = program.statements[1].value
    assert isinstance(node, s.NumberArray)
    assert all(map(_same_number, node.values, values))
    assert (node.span.line, node.span.column, node.span.end_column) == (2, 11, 11 + len(text))
    check(f"input w\nconst c = {text}\noutput y = w * c[1]\n", bulk_everything=True)


def test_lowering_a_bulk_literal_gives_the_graph_of_the_element_by_element_one():
    text = "[[" + "], [".join(", ".join(f"{(-1) ** k * k}.25" for k in range(j, j + 300))
                              for j in range(3)) + "]]"
    source = f"input w[3, 300]\nconst c = {text}\noutput y = w * c - 0\n"
    fast, slow = lower(parse.parse(source, "p.dd")), lower(parse.parse_with_lark(source, "p.dd"))
    assert isinstance(parse.parse(source, "p.dd").statements[1].value, s.NumberArray)
    assert [(n.op, n.args, n.attr) for n in fast.nodes] == \
        [(n.op, n.args, n.attr) for n in slow.nodes]


@pytest.mark.parametrize("source", [
    "input x[300]\noutput y = x[" + ", ".join(["0"] * 300) + "]\n",  # subscripts, not a literal
    "input x\noutput y = x\n[" + ", ".join(["1"] * 300) + "]\n",
    "output y = sum([" + ", ".join(["1"] * 300) + ", x])\n",
    "output y = sum([" + ", ".join(["2"] * 300) + "] [1, 2])\n",
    "output y = [" + ", ".join(["1.5"] * 300) + "] ** 2 < 1 < 3\n",
])
def test_what_is_not_a_literal_read_in_bulk(source):
    check(source, bulk_everything=True)


def test_an_integer_over_the_limit_in_a_long_literal_is_located_as_before():
    text = "[" + ", ".join(["1"] * 400 + ["300"] + ["2"] * 10) + "]"
    with using(int_bits=8):
        check(f"const c = {text}\noutput y = 1\n")
        with pytest.raises(DiffDSLError, match="int_bits|bits"):
            parse.parse(f"const c = {text}\noutput y = 1\n", "p.dd")


def test_a_deep_sum_parses_without_recursion():
    terms = " + ".join(f"{k} * x" for k in range(1, 5001))
    check(f"input x\noutput y = {terms}\n")


def test_another_lark_falls_back_to_larks_path(monkeypatch):
    """A Lark whose internals the fast path does not find leaves parsing to Lark."""
    class Bare:
        options = None
    with pytest.raises(lalr.Unsupported):
        lalr.FastParser(Bare(), parse._ToSyntax, (), "_NL")
    monkeypatch.setattr(parse, "_fast", lambda cache=True: None)
    assert_same_tree(parse.parse("input x\noutput y = x\n", "p.dd"),
                     parse.parse_with_lark("input x\noutput y = x\n", "p.dd"))
