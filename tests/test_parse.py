"""The parser: golden syntax trees for every statement and expression form of LANGUAGE.md,
the newline rules, spans, syntax errors, and a Hypothesis round trip through a printer.

Trees are compared as nested tuples (`tree()` below) that leave out spans. Numbers keep their
Python type, and every comparison also compares `repr`, so `3` and `3.0` are told apart.
"""

import ast
import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffdsl import DDSyntaxError
from diffdsl.language import syntax as s
from diffdsl.language.parse import parse

# --- helpers -----------------------------------------------------------------------------------

_SPAN_FIELDS = {"span", "func_span"}


def tree(x):
    """A syntax tree as nested tuples: (ClassName, field, ...), spans left out."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__,) + tuple(
            tree(getattr(x, f.name)) for f in dataclasses.fields(x) if f.name not in _SPAN_FIELDS
        )
    if isinstance(x, (tuple, list)):
        return tuple(tree(v) for v in x)
    return x


def same(actual, expected):
    assert actual == expected
    assert repr(actual) == repr(expected)  # tells 3 from 3.0 and True from 1


def stmts(source):
    return tree(parse(source, "t.dd").statements)


def expr(source):
    """The tree of one expression, parsed as the right-hand side of an assignment."""
    (statement,) = parse("y = " + source, "t.dd").statements
    assert isinstance(statement, s.Assign)
    return tree(statement.value)


# Builders for expected trees: a str is a Name, an int or float a Num, a tuple is kept.
def e(x):
    if isinstance(x, str):
        return ("Name", x)
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return ("Num", x)
    return x


def B(op, left, right):  # noqa: N802 - short names keep the golden trees readable
    return ("BinOp", op, e(left), e(right))


def U(op, operand):  # noqa: N802
    return ("UnaryOp", op, e(operand))


def Cmp(op, left, right):  # noqa: N802
    return ("Compare", op, e(left), e(right))


def Call(func, *args):  # noqa: N802
    return ("Call", func, tuple(e(a) for a in args))


def Ix(value, *subs):  # noqa: N802
    return ("Index", e(value), tuple(e(x) for x in subs))


def Sl(start=None, stop=None, step=None):  # noqa: N802
    return ("Slice", None if start is None else e(start), None if stop is None else e(stop),
            None if step is None else e(step))


def Arr(*elts):  # noqa: N802
    return ("ArrayLit", tuple(e(x) for x in elts))


def For(name, it):  # noqa: N802
    return ("CompFor", name, e(it))


def If(test):  # noqa: N802
    return ("CompIf", e(test))


def Assign(name, value):  # noqa: N802
    return ("Assign", name, e(value))


def R(*args):  # noqa: N802
    return Call("range", *args)


# --- statements --------------------------------------------------------------------------------

STATEMENTS = [
    ("input x", (("InputDecl", "x", ()),)),
    ("input A[3, 3]", (("InputDecl", "A", (e(3), e(3))),)),
    ("input v[n]", (("InputDecl", "v", (e("n"),)),)),
    ("input B[n + 1, 2]", (("InputDecl", "B", (B("+", "n", 1), e(2))),)),
    ("const n = 4", (("ConstDecl", "n", e(4)),)),
    ("const y = [1.5, 2.0]", (("ConstDecl", "y", Arr(1.5, 2.0)),)),
    ("def f(a, b) = a * b",
     (("Def", "f", ("a", "b"), (), B("*", "a", "b")),)),
    ("def g() = 1", (("Def", "g", (), (), e(1)),)),
    ("def f(a, b) { c = a + b; return c * 2 }",
     (("Def", "f", ("a", "b"), (Assign("c", B("+", "a", "b")), ("Return", B("*", "c", 2))),
       None),)),
    ("def f(a) {\n    c = a\n\n    return c\n}",
     (("Def", "f", ("a",), (Assign("c", "a"), ("Return", e("c"))), None),)),
    ("x = 1", (Assign("x", 1),)),
    ("A[i, j] = x", (("IndexAssign", "A", (e("i"), e("j")), e("x")),)),
    ("A[1:, 0] = 2", (("IndexAssign", "A", (Sl(start=1), e(0)), e(2)),)),
    ("s += x", (("AugAssign", "s", "+", None, e("x")),)),
    ("s -= x", (("AugAssign", "s", "-", None, e("x")),)),
    ("s *= x", (("AugAssign", "s", "*", None, e("x")),)),
    ("s /= x", (("AugAssign", "s", "/", None, e("x")),)),
    ("A[i] += x", (("AugAssign", "A", "+", (e("i"),), e("x")),)),
    ("A[i, 0] -= 2 * x", (("AugAssign", "A", "-", (e("i"), e(0)), B("*", 2, "x")),)),
    ("for i in range(n) { s += i }",
     (("For", "i", R("n"), (("AugAssign", "s", "+", None, e("i")),)),)),
    ("for i in range(1, 5, 2) {\n  a = i\n  b = a\n}",
     (("For", "i", R(1, 5, 2), (Assign("a", "i"), Assign("b", "a"))),)),
    ("for i in range(3) { }", (("For", "i", R(3), ()),)),
    ("if c { x = 1 }", (("If", ((e("c"), (Assign("x", 1),)),), None),)),
    ("if c { x = 1 } else { x = 2 }",
     (("If", ((e("c"), (Assign("x", 1),)),), (Assign("x", 2),)),)),
    ("if a > 0 { x = 1 } else if b { x = 2 } else if c { x = 3 } else { x = 4 }",
     (("If", ((Cmp(">", "a", 0), (Assign("x", 1),)), (e("b"), (Assign("x", 2),)),
               (e("c"), (Assign("x", 3),))), (Assign("x", 4),)),)),
    ("if a { x = 1 } else if b { x = 2 }",
     (("If", ((e("a"), (Assign("x", 1),)), (e("b"), (Assign("x", 2),))), None),)),
    ("while x > 1 max 10 { x = x / 2 }",
     (("While", Cmp(">", "x", 1), e(10), (Assign("x", B("/", "x", 2)),), None),)),
    ("while max(a, b) > 0 max max(3, n) {\n  a = max(a, 1)\n  break if a < b\n}",
     (("While", Cmp(">", Call("max", "a", "b"), 0), Call("max", 3, "n"),
       (Assign("a", Call("max", "a", 1)), ("Break", Cmp("<", "a", "b"))), None),)),
    ("while f(x) max\n  n + 1 { }", (("While", Call("f", "x"), B("+", "n", 1), (), None),)),
    ("while t > 1 max 5 as halving { }", (("While", Cmp(">", "t", 1), e(5), (), "halving"),)),
    ("max = 2; y = max", (Assign("max", 2), Assign("y", "max"))),
    ("output y = x + 1", (("Output", "y", B("+", "x", 1)),)),
    ("output y", (("Output", None, e("y")),)),
    ("output x + 1", (("Output", None, B("+", "x", 1)),)),
    ("output sin(x)", (("Output", None, Call("sin", "x")),)),
]


@pytest.mark.parametrize("source, expected", STATEMENTS, ids=[c[0] for c in STATEMENTS])
def test_statement_forms(source, expected):
    same(stmts(source), expected)


def test_a_whole_file():
    source = (
        "# det3.dd\n"
        "input A[3, 3]\n"
        "\n"
        "def det(M) =\n"
        "    if rows(M) == 1 then M[0, 0]\n"
        "    else sum((-1)**j * M[0, j] * det(minor(M, 0, j)) for j in range(cols(M)))\n"
        "\n"
        "output d = det(A)\n"
    )
    body = ("Cond", Cmp("==", Call("rows", "M"), 1), Ix("M", 0, 0),
            ("GenCall", "sum",
             B("*", B("*", B("**", U("-", 1), "j"), Ix("M", 0, "j")),
               Call("det", Call("minor", "M", 0, "j"))),
             (For("j", R(Call("cols", "M"))),)))
    same(stmts(source), (
        ("InputDecl", "A", (e(3), e(3))),
        ("Def", "det", ("M",), (), body),
        ("Output", "d", Call("det", "A")),
    ))


# --- expressions -------------------------------------------------------------------------------

EXPRESSIONS = [
    # numbers: no '.' and no exponent is an integer
    ("3", e(3)),
    ("3.0", e(3.0)),
    ("3.", e(3.0)),
    (".5", e(0.5)),
    ("1e-8", e(1e-8)),
    ("2.5E+3", e(2500.0)),
    ("1e5", e(100000.0)),
    ("0", e(0)),
    ("x", e("x")),
    ("pi", e("pi")),
    ("(x)", e("x")),
    ("((x))", e("x")),
    # conditional expression, loosest
    ("if c then a else b", ("Cond", e("c"), e("a"), e("b"))),
    ("if c then a else b + 1", ("Cond", e("c"), e("a"), B("+", "b", 1))),
    ("if a then b else if c then d else f",
     ("Cond", e("a"), e("b"), ("Cond", e("c"), e("d"), e("f")))),
    ("if x > 0 and y < 1 then x else y",
     ("Cond", ("BoolOp", "and", Cmp(">", "x", 0), Cmp("<", "y", 1)), e("x"), e("y"))),
    # boolean operators
    ("a or b", ("BoolOp", "or", e("a"), e("b"))),
    ("a and b", ("BoolOp", "and", e("a"), e("b"))),
    ("not a", ("Not", e("a"))),
    ("not not a", ("Not", ("Not", e("a")))),
    ("a or b or c", ("BoolOp", "or", ("BoolOp", "or", e("a"), e("b")), e("c"))),
    ("a or b and c", ("BoolOp", "or", e("a"), ("BoolOp", "and", e("b"), e("c")))),
    ("a and b or c", ("BoolOp", "or", ("BoolOp", "and", e("a"), e("b")), e("c"))),
    ("not a and b", ("BoolOp", "and", ("Not", e("a")), e("b"))),
    ("not a == b", ("Not", Cmp("==", "a", "b"))),
    # comparisons bind looser than arithmetic
    ("a == b", Cmp("==", "a", "b")),
    ("a != b", Cmp("!=", "a", "b")),
    ("a < b", Cmp("<", "a", "b")),
    ("a <= b", Cmp("<=", "a", "b")),
    ("a > b", Cmp(">", "a", "b")),
    ("a >= b", Cmp(">=", "a", "b")),
    ("a + 1 < b * 2", Cmp("<", B("+", "a", 1), B("*", "b", 2))),
    # additive and multiplicative, left-associative
    ("a - b - c", B("-", B("-", "a", "b"), "c")),
    ("a + b - c", B("-", B("+", "a", "b"), "c")),
    ("a / b / c", B("/", B("/", "a", "b"), "c")),
    ("a + b * c", B("+", "a", B("*", "b", "c"))),
    ("(a + b) * c", B("*", B("+", "a", "b"), "c")),
    ("a // b % c", B("%", B("//", "a", "b"), "c")),
    ("a @ b @ c", B("@", B("@", "a", "b"), "c")),
    ("a @ b * c", B("*", B("@", "a", "b"), "c")),
    ("a - b @ c", B("-", "a", B("@", "b", "c"))),
    # unary and power
    ("-a", U("-", "a")),
    ("+a", U("+", "a")),
    ("- -a", U("-", U("-", "a"))),
    ("-x**2", U("-", B("**", "x", 2))),
    ("-x^2", U("-", B("**", "x", 2))),
    ("2**-1", B("**", 2, U("-", 1))),
    ("2 ^ -1", B("**", 2, U("-", 1))),
    ("a**b**c", B("**", "a", B("**", "b", "c"))),
    ("a^b^c", B("**", "a", B("**", "b", "c"))),
    ("a^b**c", B("**", "a", B("**", "b", "c"))),
    ("(a**b)**c", B("**", B("**", "a", "b"), "c")),
    ("2**-x**2", B("**", 2, U("-", B("**", "x", 2)))),
    ("-a * b", B("*", U("-", "a"), "b")),
    ("a * -b", B("*", "a", U("-", "b"))),
    ("a - -b", B("-", "a", U("-", "b"))),
    ("(-1)**j", B("**", U("-", 1), "j")),
    ("x[0]**2", B("**", Ix("x", 0), 2)),
    ("f(x)**2", B("**", Call("f", "x"), 2)),
    # calls
    ("f()", Call("f")),
    ("sin(x)", Call("sin", "x")),
    ("atan2(y, x)", Call("atan2", "y", "x")),
    ("f(1, 2,)", Call("f", 1, 2)),
    ("f(g(x), h(y, 1))", Call("f", Call("g", "x"), Call("h", "y", 1))),
    ("f(if c then a else b)", Call("f", ("Cond", e("c"), e("a"), e("b")))),
    # derivatives inside programs are calls; the lowering reads the name
    ("grad(grad(f(x, y), y)[0], x)",
     Call("grad", Ix(Call("grad", Call("f", "x", "y"), "y"), 0), "x")),
    ("hessian(x ** 3, x) + jacobian([x, y], y)",
     B("+", Call("hessian", B("**", "x", 3), "x"), Call("jacobian", Arr("x", "y"), "y"))),
    # generators
    ("sum(e for i in range(n))", ("GenCall", "sum", e("e"), (For("i", R("n")),))),
    ("sum(A[i, j] for i in range(n) for j in range(n) if i != j)",
     ("GenCall", "sum", Ix("A", "i", "j"),
      (For("i", R("n")), For("j", R("n")), If(Cmp("!=", "i", "j"))))),
    ("prod(x[i] for i in range(1, 4))", ("GenCall", "prod", Ix("x", "i"), (For("i", R(1, 4)),))),
    ("max(v for v in xs if v > 0)",
     ("GenCall", "max", e("v"), (For("v", "xs"), If(Cmp(">", "v", 0))))),
    # comprehensions
    ("[e for i in range(n)]", ("Comprehension", e("e"), (For("i", R("n")),))),
    ("[[A[j, i] for j in range(n)] for i in range(m)]",
     ("Comprehension", ("Comprehension", Ix("A", "j", "i"), (For("j", R("n")),)),
      (For("i", R("m")),))),
    ("[A[i, j] for i in range(n) for j in range(i)]",
     ("Comprehension", Ix("A", "i", "j"), (For("i", R("n")), For("j", R("i"))))),
    ("[i for i in range(5) if i % 2 == 0]",
     ("Comprehension", e("i"), (For("i", R(5)), If(Cmp("==", B("%", "i", 2), 0))))),
    # indexing and slicing
    ("A[0]", Ix("A", 0)),
    ("A[i, j]", Ix("A", "i", "j")),
    ("A[-1]", Ix("A", U("-", 1))),
    ("A[-1, -2]", Ix("A", U("-", 1), U("-", 2))),
    ("A[i + 1, 2 * j]", Ix("A", B("+", "i", 1), B("*", 2, "j"))),
    ("A[0][1]", Ix(Ix("A", 0), 1)),
    ("f(x)[0]", Ix(Call("f", "x"), 0)),
    ("x[rows[k]]", Ix("x", Ix("rows", "k"))),
    ("a[1:, :]", Ix("a", Sl(start=1), Sl())),
    ("a[::2]", Ix("a", Sl(step=2))),
    ("a[1:3:1]", Ix("a", Sl(1, 3, 1))),
    ("a[:3]", Ix("a", Sl(stop=3))),
    ("a[:]", Ix("a", Sl())),
    ("a[-2:]", Ix("a", Sl(start=U("-", 2)))),
    ("a[::-1]", Ix("a", Sl(step=U("-", 1)))),
    ("a[0, 1:n - 1]", Ix("a", 0, Sl(1, B("-", "n", 1)))),
    # array literals
    ("[]", Arr()),
    ("[1]", Arr(1)),
    ("[a, b, c]", Arr("a", "b", "c")),
    ("[1, 2,]", Arr(1, 2)),
    ("[[1, 2], [3, 4]]", Arr(Arr(1, 2), Arr(3, 4))),
    ("[[1, 2], [3, 4],]", Arr(Arr(1, 2), Arr(3, 4))),
    ("[[[1.5]]]", Arr(Arr(Arr(1.5)))),
    ("[x + 1, -y]", Arr(B("+", "x", 1), U("-", "y"))),
]


@pytest.mark.parametrize("source, expected", EXPRESSIONS, ids=[c[0] for c in EXPRESSIONS])
def test_expression_forms(source, expected):
    same(expr(source), expected)


def test_keywords_inside_names_are_names():
    source = "iffy = 1; thence = 2; android = 3; notx = 4; order = 5; inputs = 6; x_else = 7"
    same(stmts(source), tuple(Assign(n, v) for n, v in [
        ("iffy", 1), ("thence", 2), ("android", 3), ("notx", 4), ("order", 5), ("inputs", 6),
        ("x_else", 7)]))


# --- newline rules -----------------------------------------------------------------------------

SAME_AS_ONE_LINE = [
    # inside ( ) and [ ]
    ("y = f(a,\n      b)", "y = f(a, b)"),
    ("y = (a\n     + b)", "y = (a + b)"),
    ("y = [1,\n     2,\n]", "y = [1, 2]"),
    ("y = [[1, 2],\n     [3, 4]]", "y = [[1, 2], [3, 4]]"),
    ("y = A[0,\n      1]", "y = A[0, 1]"),
    ("y = sum(x[i]\n        for i in range(3)\n        if i > 0)",
     "y = sum(x[i] for i in range(3) if i > 0)"),
    ("input A[3,\n        3]", "input A[3, 3]"),
    ("def f(a,\n      b) = a", "def f(a, b) = a"),
    # after a token that cannot end an expression
    ("y =\n    a", "y = a"),
    ("y +=\n    a", "y += a"),
    ("y -=\n    a", "y -= a"),
    ("y *=\n    a", "y *= a"),
    ("y /=\n    a", "y /= a"),
    ("const c =\n    2", "const c = 2"),
    ("output y =\n    a", "output y = a"),
    ("def f(x) =\n    x", "def f(x) = x"),
    ("y = a +\n    b", "y = a + b"),
    ("y = a -\n    b", "y = a - b"),
    ("y = a *\n    b", "y = a * b"),
    ("y = a /\n    b", "y = a / b"),
    ("y = a //\n    b", "y = a // b"),
    ("y = a %\n    b", "y = a % b"),
    ("y = a @\n    b", "y = a @ b"),
    ("y = a **\n    b", "y = a ** b"),
    ("y = a ^\n    b", "y = a ** b"),
    ("y = a ==\n    b", "y = a == b"),
    ("y = a <\n    b", "y = a < b"),
    ("y = a >=\n    b", "y = a >= b"),
    ("y = -\n    b", "y = -b"),
    ("y = a and\n    b", "y = a and b"),
    ("y = a or\n    b", "y = a or b"),
    ("y = not\n    b", "y = not b"),
    ("y = if c then\n    a else\n    b", "y = if c then a else b"),
    # before a line that starts with `then` or `else`
    ("y = if c\n    then a\n    else b", "y = if c then a else b"),
    ("y = if c then a\n    else b", "y = if c then a else b"),
    # `}` newline `else {` is one statement
    ("if c {\n    x = 1\n}\nelse {\n    x = 2\n}", "if c { x = 1 } else { x = 2 }"),
    ("if c {\n    x = 1\n}\nelse if d {\n    x = 2\n}\nelse {\n    x = 3\n}",
     "if c { x = 1 } else if d { x = 2 } else { x = 3 }"),
    ("if c {\n    x = 1\n} else\nif d {\n    x = 2\n}", "if c { x = 1 } else if d { x = 2 }"),
    ("if c {\n    x = 1\n} else {\n    x = 2\n}", "if c { x = 1 } else { x = 2 }"),
    # comments and blank lines
    ("# a comment\n\nx = 1  # trailing\n\n\n# another\ny = 2\n", "x = 1; y = 2"),
    ("x = 1 +  # continued\n    2", "x = 1 + 2"),
    ("y = [1,  # one\n     2]  # two", "y = [1, 2]"),
    ("\n\n\nx = 1\n\n\n", "x = 1"),
    ("x = 1\r\ny = 2\r\n", "x = 1; y = 2"),
    # statements inside { } separated by newlines
    ("for i in range(3) {\n    a = i\n\n    b = a  # c\n    c = b\n}",
     "for i in range(3) { a = i; b = a; c = b }"),
    ("def f(a) {\n    b = a\n    return b\n}", "def f(a) { b = a; return b }"),
    ("for i in range(2) {\n    if i > 0 {\n        x = i\n    }\n    else {\n        x = 0\n"
     "    }\n}", "for i in range(2) { if i > 0 { x = i } else { x = 0 } }"),
    # `;` separates statements
    ("x = 1; y = 2; z = 3", "x = 1\ny = 2\nz = 3"),
    (";;x = 1;;", "x = 1"),
    ("x = 1;\ny = 2", "x = 1\ny = 2"),
    ("y = 2*x + 3; z = y*y*3", "y = 2*x + 3\nz = y*y*3"),
]


@pytest.mark.parametrize("source, one_line", SAME_AS_ONE_LINE,
                         ids=[repr(c[0]) for c in SAME_AS_ONE_LINE])
def test_newline_rules(source, one_line):
    same(stmts(source), stmts(one_line))


def test_semicolons_and_newlines_separate_statements():
    same(stmts("a = 1; b = 2\nc = 3"), (Assign("a", 1), Assign("b", 2), Assign("c", 3)))


def test_empty_and_comment_only_sources_parse_to_nothing():
    assert stmts("") == ()
    assert stmts("# only a comment\n") == ()
    assert stmts("\n\n  \n") == ()
    assert stmts(";") == ()


@pytest.mark.parametrize("source", [
    "y = a\n+ b",           # a newline before an operator ends the statement
    "y = a\n* b",
    "y = f\n(x)",
    "y = if c then a\nb",
    "x = 1 y = 2",          # two statements need a newline or ';'
    "if c { x = 1 y = 2 }",
])
def test_newline_ends_a_statement(source):
    with pytest.raises(DDSyntaxError):
        parse(source, "t.dd")


# --- spans -------------------------------------------------------------------------------------


def where(span):
    return (span.line, span.column, span.end_line, span.end_column)


def test_spans():
    source = "input x\ny = x +\n    2 * x\noutput z = sin(y)\n"
    decl, assign, out = parse(source, "t.dd").statements
    assert decl.span.filename == "t.dd"
    assert where(decl.span) == (1, 1, 1, 8)
    assert where(assign.span) == (2, 1, 3, 10)
    plus = assign.value
    assert where(plus.span) == (2, 5, 3, 10)
    assert where(plus.left.span) == (2, 5, 2, 6)
    times = plus.right
    assert where(times.span) == (3, 5, 3, 10)
    assert where(times.left.span) == (3, 5, 3, 6)
    assert where(times.right.span) == (3, 9, 3, 10)
    assert where(out.span) == (4, 1, 4, 18)
    call = out.value
    assert where(call.span) == (4, 12, 4, 18)
    assert where(call.func_span) == (4, 12, 4, 15)
    assert where(call.args[0].span) == (4, 16, 4, 17)


def test_spans_of_blocks_and_indices():
    source = "if c {\n    A[i, 2] = 1\n}\nelse {\n    x = 2\n}\n"
    (stmt,) = parse(source, "t.dd").statements
    assert where(stmt.span) == (1, 1, 6, 2)
    (test, body), = stmt.branches
    assert where(test.span) == (1, 4, 1, 5)
    (assign,) = body
    assert where(assign.span) == (2, 5, 2, 16)
    assert where(assign.subscripts[1].span) == (2, 10, 2, 11)
    (other,) = stmt.orelse
    assert where(other.span) == (5, 5, 5, 10)


def test_span_render_puts_the_caret_under_the_span():
    source = "input x\ny = x + sin(x)\n"
    call = parse(source, "t.dd").statements[1].value.right
    shown = call.span.render().splitlines()
    assert shown[0].strip() == "y = x + sin(x)"
    assert shown[1].index("^") == shown[0].index("sin")
    assert shown[1].count("^") == len("sin(x)")


# --- syntax errors -----------------------------------------------------------------------------


def syntax_error(source):
    with pytest.raises(DDSyntaxError) as info:
        parse(source, "t.dd")
    return info.value


def assert_located(err, line, column, source):
    """`str(err)` starts `t.dd:LINE:COL: error:`, shows the line and puts a caret at COL."""
    text = str(err)
    assert text.startswith(f"t.dd:{line}:{column}: error:"), text
    assert "Traceback" not in text
    shown = text.splitlines()
    src_line = source.splitlines()[line - 1]
    at = [k for k, row in enumerate(shown) if row.strip() == src_line.strip() and row.strip()]
    assert at, f"source line {src_line!r} not shown in:\n{text}"
    caret = shown[at[0] + 1]
    assert "^" in caret, text
    # the caret sits under column COL of the shown line
    offset = shown[at[0]].index(src_line)
    assert caret.index("^") - offset == column - 1, text


@pytest.mark.parametrize("source, line, column", [
    ("y = a < b < c", 1, 11),
    ("y = a == b == c", 1, 12),
    ("y = a < b <= c", 1, 11),
    ("input x\ny = x\nz = (x + 1))\n", 3, 12),
    ("z = ]", 1, 5),
    ("output y = x)", 1, 13),
])
def test_syntax_error_location(source, line, column):
    assert_located(syntax_error(source), line, column, source)


@pytest.mark.parametrize("source", [
    "y = (1 + 2",
    "y = ((a)",
    "y = [1, 2",
    "y = f(a, b",
    "y = A[0",
    "if c { x = 1",
    "def f(x) { return x",
])
def test_unbalanced_brackets(source):
    err = syntax_error(source)
    assert str(err).startswith("t.dd:1:")
    assert "error:" in str(err)


def test_missing_then():
    source = "input a\ny = if a > 0 a else 0\n"
    err = syntax_error(source)
    assert_located(err, 2, 14, source)
    # LANGUAGE.md: every error says what was expected or what to change
    assert "then" in str(err), str(err)


def test_missing_else():
    source = "y = if c then a\n"
    err = syntax_error(source)
    assert str(err).startswith("t.dd:1:")


def test_syntax_error_says_what_was_expected():
    err = syntax_error("y = (1 + 2\n")
    assert ")" in str(err), str(err)


@pytest.mark.parametrize("source", [
    "output",
    "output y =",
    "input",
    "input 3",
    "const = 3",
    "const c",
    "def = 3",
    "def f(x)",
    "def f(x, 1) = x",
    "x = then",
    "x = else",
    "for for in range(3) { }",
    "for i in range(3) x = 1",
    "if c x = 1",
    "y = 1 +",
    "y = * 2",
    "y = a[1:2:3:4]",
    "y = (1, 2)",
    "y = a b",
    "y = 10e",
    "y = x.5",
    "y = $x",
    "y = 'text'",
    "x += ",
    "A[] = 1",
    "1 = x",
    "f(x) = 2",
    "return",
    "y = sum(for i in range(3))",
    "y = [for i in range(3)]",
    "y = a ! b",
    "y = a && b",
    "y = \u03bb",
    "{",
    "}",
    "else { x = 1 }",
])
def test_malformed_sources_are_syntax_errors(source):
    err = syntax_error(source)
    text = str(err)
    assert text.startswith("t.dd:1:") and ": error:" in text, text


def test_syntax_error_is_a_diffdsl_error():
    import diffdsl

    with pytest.raises(diffdsl.DiffDSLError):
        diffdsl.compile("y = a < b < c", filename="t.dd")


# --- Hypothesis: random well-formed expressions ------------------------------------------------

_NUMBERS = st.one_of(
    st.integers(0, 10_000).map(str),
    st.sampled_from(["3.0", ".5", "1e-8", "2.5E+3", "0.25", "10.", "1E5", "7.125e-3"]),
)
_NAMES = st.sampled_from(["x", "y"])
_BINARY = st.sampled_from(["+", "-", "*", "/", "**", "^"])
_SPACE = st.sampled_from(["", " ", "  "])


def _expressions():
    def extend(children):
        binary = st.builds(
            lambda a, op, b, sp1, sp2, nl: f"{a}{sp1}{op}{nl or sp2}{b}",
            children, _BINARY, children, _SPACE, _SPACE, st.sampled_from(["", "\n    "]))
        unary = st.builds(lambda op, a: f"{op}{a}", st.sampled_from(["-", "+", "- "]), children)
        paren = st.builds(lambda a, nl: f"({nl}{a}{nl})", children, st.sampled_from(["", "\n"]))
        call1 = st.builds(lambda f, a: f"{f}({a})", st.sampled_from(["sin", "exp", "log"]),
                          children)
        call2 = st.builds(lambda a, b: f"atan2({a}, {b})", children, children)
        return st.one_of(binary, unary, paren, call1, call2)

    return st.recursive(st.one_of(_NUMBERS, _NAMES), extend, max_leaves=12)


def to_text(node):
    """Print an expression tree back to `.dd` text, fully parenthesised."""
    if isinstance(node, s.Num):
        return repr(node.value)
    if isinstance(node, s.Name):
        return node.id
    if isinstance(node, s.BinOp):
        return f"({to_text(node.left)} {node.op} {to_text(node.right)})"
    if isinstance(node, s.UnaryOp):
        return f"({node.op}{to_text(node.operand)})"
    if isinstance(node, s.Call):
        return f"{node.func}({', '.join(to_text(a) for a in node.args)})"
    raise AssertionError(f"unexpected node {node!r}")


_PY_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_PY_UNARY = {ast.USub: "-", ast.UAdd: "+"}


def from_python(node):
    """Python's own parse of the same text, in the form of `tree()`: an independent oracle
    for precedence and associativity, which Python shares with the .dd language for these
    operators (`^` read as `**`)."""
    if isinstance(node, ast.Constant):
        return ("Num", node.value)
    if isinstance(node, ast.Name):
        return ("Name", node.id)
    if isinstance(node, ast.BinOp):
        return ("BinOp", _PY_OPS[type(node.op)], from_python(node.left), from_python(node.right))
    if isinstance(node, ast.UnaryOp):
        return ("UnaryOp", _PY_UNARY[type(node.op)], from_python(node.operand))
    if isinstance(node, ast.Call):
        return ("Call", node.func.id, tuple(from_python(a) for a in node.args))
    raise AssertionError(f"unexpected Python node {ast.dump(node)}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_expressions())
def test_random_expressions_round_trip(text):
    (statement,) = parse(f"y = {text}\n", "t.dd").statements
    first = tree(statement.value)
    printed = to_text(statement.value)
    (again,) = parse(f"y = {printed}\n", "t.dd").statements
    same(tree(again.value), first)
    # and the tree is the one Python builds for the same text
    python = ast.parse("(" + text.replace("^", "**") + ")", mode="eval").body
    same(first, from_python(python))
