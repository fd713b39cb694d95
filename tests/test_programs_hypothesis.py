"""Random well-formed programs against a Python evaluator of the same trees.

Hypothesis draws a program as a tree: expressions over the inputs `x` (scalar) and `v[3]`,
constants, arithmetic, powers, elementwise functions, indexing, `sum(v)` and dynamic or
static `if ... then ... else`, and sometimes statements around them: a `const`, local
assignments, a `for` loop that accumulates, and a `def` called twice. Each tree is printed as
`.dd` text, with as few parentheses as the precedence table of LANGUAGE.md allows, and is also
evaluated here in Python with the language's static semantics (static integer arithmetic stays
integer). The two must agree.

Programs whose value is fragile are assumed away rather than compared: any non-finite
intermediate (the IR's `x * 0 = 0` makes `inf * 0` differ from IEEE on purpose), and any
dynamic comparison closer than rounding can decide.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diffdsl

RTOL = 1e-9

# Precedence levels, loosest first (LANGUAGE.md, "Expressions").
COND, OR, AND, NOT, CMP, ADD, MUL, UNARY, POW, POSTFIX, ATOM = range(11)

# Constants with the spelling used in the source.
CONSTANTS = [("0", 0), ("1", 1), ("2", 2), ("3", 3), ("0.5", 0.5), (".25", 0.25),
             ("2.5E+0", 2.5), ("1e-1", 0.1), ("10.0", 10.0), ("1.75", 1.75)]
FUNCTIONS = ["sin", "cos", "exp", "tanh", "sqrtabs", "logabs"]
COMPARISONS = ["<", "<=", ">", ">=", "==", "!="]


class Reject(Exception):
    """The program's value is fragile at these inputs: compare nothing."""


# --- drawing trees ----------------------------------------------------------------------------


@st.composite
def expressions(draw, names, depth, calls=False, index_names=()):
    """An expression tree over `names` (visible local names) of at most `depth` levels."""
    leaf_kinds = ["num", "x", "v", "v", "sumv"] + ["name"] * bool(names)
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        kind = draw(st.sampled_from(leaf_kinds))
        if kind == "num":
            return ("num", draw(st.sampled_from(CONSTANTS)))
        if kind == "x":
            return ("name", "x")
        if kind == "v":
            return ("v", draw(st.sampled_from([-3, -2, -1, 0, 1, 2, *index_names])))
        if kind == "sumv":
            return ("sumv",)
        return ("name", draw(st.sampled_from(names)))
    sub = expressions(names, depth - 1, calls, index_names)
    kinds = ["neg", "bin", "bin", "bin", "pow", "fn", "if"] + ["call"] * calls
    kind = draw(st.sampled_from(kinds))
    if kind == "neg":
        return ("neg", draw(sub))
    if kind == "bin":
        return ("bin", draw(st.sampled_from("+-*/")), draw(sub), draw(sub))
    if kind == "pow":
        return ("pow", draw(sub), draw(st.sampled_from([0, 1, 2, 3, -1])),
                draw(st.sampled_from(["**", "^"])))
    if kind == "fn":
        return ("fn", draw(st.sampled_from(FUNCTIONS)), draw(sub))
    if kind == "call":
        return ("call", draw(sub), draw(sub))
    return ("if", draw(conditions(sub, 2)), draw(sub), draw(sub))


@st.composite
def conditions(draw, sub, depth):
    kind = draw(st.sampled_from(["cmp"] * 4 + ["and", "or", "not"] * (depth > 0)))
    if kind == "cmp":
        return ("cmp", draw(st.sampled_from(COMPARISONS)), draw(sub), draw(sub))
    if kind == "not":
        return ("not", draw(conditions(sub, depth - 1)))
    return (kind, draw(conditions(sub, depth - 1)), draw(conditions(sub, depth - 1)))


def function_body():
    """The body of `def f(a, b)`: it sees its parameters and the const `c0`, nothing else."""
    return _def_expressions(3)


@st.composite
def _def_expressions(draw, depth):
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        kind = draw(st.sampled_from(["a", "b", "c0", "num"]))
        if kind == "num":
            return ("num", draw(st.sampled_from(CONSTANTS)))
        return ("name", kind)
    sub = _def_expressions(depth - 1)
    kind = draw(st.sampled_from(["neg", "bin", "bin", "pow", "fn", "if"]))
    if kind == "neg":
        return ("neg", draw(sub))
    if kind == "bin":
        return ("bin", draw(st.sampled_from("+-*/")), draw(sub), draw(sub))
    if kind == "pow":
        return ("pow", draw(sub), draw(st.sampled_from([0, 1, 2, 3])), "**")
    if kind == "fn":
        return ("fn", draw(st.sampled_from(FUNCTIONS)), draw(sub))
    return ("if", ("cmp", draw(st.sampled_from(COMPARISONS)), draw(sub), draw(sub)),
            draw(sub), draw(sub))


@st.composite
def programs(draw):
    """A program: a list of statements and the output expression."""
    statements = []
    names = []
    if draw(st.booleans()):
        statements.append(("const", "c0", draw(st.sampled_from(CONSTANTS))))
        names.append("c0")
    has_def = draw(st.integers(0, 3)) == 0
    if has_def:
        if "c0" not in names:
            statements.append(("const", "c0", ("2", 2)))
            names.append("c0")
        statements.append(("def", draw(function_body()), draw(st.booleans())))
    for k in range(draw(st.integers(0, 2))):
        statements.append(("assign", f"t{k}", draw(expressions(tuple(names), 3))))
        names.append(f"t{k}")
    if draw(st.integers(0, 2)) == 0:
        start = draw(expressions(tuple(names), 2))
        body = draw(expressions((*names, "acc", "i"), 2, index_names=("i",)))
        statements.append(("for", start, draw(st.integers(0, 3)), body, draw(st.booleans())))
        names.append("acc")
    out = draw(expressions(tuple(names), 4, calls=has_def))
    if has_def:
        # Called twice at least: once with arguments drawn afresh, once with the same ones.
        first = ("call", draw(expressions(tuple(names), 2)), draw(expressions(tuple(names), 2)))
        out = ("bin", "+", ("bin", "*", first, out), first)
    return statements, out


# --- printing .dd text ------------------------------------------------------------------------


def wrap(tree, least):
    text, level = render(tree)
    return text if level >= least else f"({text})"


def render(tree):
    """The source text of an expression and its precedence level."""
    kind = tree[0]
    if kind == "num":
        return tree[1][0], ATOM
    if kind == "name":
        return tree[1], ATOM
    if kind == "v":
        return f"v[{tree[1]}]", POSTFIX
    if kind == "sumv":
        return "sum(v)", POSTFIX
    if kind == "neg":
        return "-" + wrap(tree[1], UNARY), UNARY
    if kind == "bin":
        op, left, right = tree[1:]
        level = ADD if op in "+-" else MUL
        return f"{wrap(left, level)} {op} {wrap(right, level + 1)}", level
    if kind == "pow":
        base, k, spelling = tree[1:]
        return f"{wrap(base, POSTFIX)} {spelling} {k}", POW
    if kind == "fn":
        name, arg = tree[1:]
        inner = render(arg)[0]
        if name == "sqrtabs":
            return f"sqrt(abs({inner}) + 1)", POSTFIX
        if name == "logabs":
            return f"log(abs({inner}) + 1)", POSTFIX
        return f"{name}({inner})", POSTFIX
    if kind == "call":
        return f"f({render(tree[1])[0]}, {render(tree[2])[0]})", POSTFIX
    if kind == "if":
        test, a, b = tree[1:]
        return f"if {render_condition(test)[0]} then {render(a)[0]} else {render(b)[0]}", COND
    raise AssertionError(kind)


def render_condition(tree):
    kind = tree[0]
    if kind == "cmp":
        return f"{wrap(tree[2], ADD)} {tree[1]} {wrap(tree[3], ADD)}", CMP
    if kind == "not":
        text, level = render_condition(tree[1])
        return "not " + (text if level >= NOT else f"({text})"), NOT
    level = AND if kind == "and" else OR
    left, left_level = render_condition(tree[1])
    right, right_level = render_condition(tree[2])
    left = left if left_level >= level else f"({left})"
    right = right if right_level > level else f"({right})"
    return f"{left} {kind} {right}", level


def source(program) -> str:
    statements, out = program
    lines = ["input x", "input v[3]"]
    for st_ in statements:
        kind = st_[0]
        if kind == "const":
            lines.append(f"const {st_[1]} = {st_[2][0]}")
        elif kind == "def":
            body, block = st_[1], st_[2]
            text = render(body)[0]
            if block:
                lines.append(f"def f(a, b) {{\n    r = {text}\n    return r\n}}")
            else:
                lines.append(f"def f(a, b) =\n    {text}")
        elif kind == "assign":
            lines.append(f"{st_[1]} = {render(st_[2])[0]}")
        elif kind == "for":
            start, n, body, augmented = st_[1:]
            lines.append(f"acc = {render(start)[0]}")
            step = f"acc += {render(body)[0]}" if augmented else \
                f"acc = acc + {wrap(body, MUL)}"
            lines.append(f"for i in range({n}) {{\n    {step}\n}}")
    lines.append(f"output y = {render(out)[0]}")
    return "\n".join(lines) + "\n"


# --- the Python evaluator ---------------------------------------------------------------------
# A value is (number, dynamic). Static integers are Python ints, as in the language.


def finite(value):
    number, dynamic = value
    if isinstance(number, float) and not math.isfinite(number):
        raise Reject
    if isinstance(number, int) and abs(number) > 2**53:
        raise Reject  # exact static integers that a real cannot hold
    return value


def is_int(number):
    return isinstance(number, int)


def real(number) -> float:
    try:
        return float(number)
    except OverflowError:
        raise Reject from None


def arith(op, a, b):
    (p, dp), (q, dq) = a, b
    dynamic = dp or dq
    if not dynamic and is_int(p) and is_int(q) and op in "+-*":
        return finite(({"+": p + q, "-": p - q, "*": p * q}[op], False))
    p, q = real(p), real(q)
    if op == "/" and q == 0:
        raise Reject
    result = {"+": p + q, "-": p - q, "*": p * q, "/": p / q if q else 0.0}[op]
    return finite((float(np.float64(result)), dynamic))


def power(a, k):
    p, dynamic = a
    if not dynamic and is_int(p):
        if k >= 0:
            return finite((p**k, False))
        if p == 0:
            raise Reject
        return finite((float(p) ** k, False))
    with np.errstate(all="ignore"):
        return finite((float(np.power(np.float64(real(p)), np.float64(k))), dynamic))


def function(name, a):
    p, dynamic = a
    x = np.float64(real(p))
    with np.errstate(all="ignore"):
        if name == "sqrtabs":
            y = np.sqrt(np.abs(x) + 1)
        elif name == "logabs":
            y = np.log(np.abs(x) + 1)
        else:
            y = getattr(np, name)(x)
    return finite((float(y), dynamic))


def compare(op, a, b):
    (p, dp), (q, dq) = a, b
    if dp or dq:
        p, q = real(p), real(q)
        if abs(p - q) <= 1e-7 * (1.0 + abs(p) + abs(q)):
            raise Reject  # rounding could decide this comparison either way
    result = {"<": p < q, "<=": p <= q, ">": p > q, ">=": p >= q, "==": p == q,
              "!=": p != q}[op]
    return result, dp or dq


class Evaluator:
    def __init__(self, x, v, function_body=None):
        self.x = float(x)
        self.v = [float(e) for e in v]
        self.body = function_body

    def expr(self, tree, env):
        kind = tree[0]
        if kind == "num":
            return (tree[1][1], False)
        if kind == "name":
            if tree[1] == "x":
                return (self.x, True)
            return env[tree[1]]
        if kind == "v":
            index = tree[1]
            if isinstance(index, str):
                index = env[index][0]
            return (self.v[index], True)
        if kind == "sumv":
            return finite(((self.v[0] + self.v[1]) + self.v[2], True))
        if kind == "neg":
            p, dynamic = self.expr(tree[1], env)
            return (-p, dynamic)
        if kind == "bin":
            return arith(tree[1], self.expr(tree[2], env), self.expr(tree[3], env))
        if kind == "pow":
            return power(self.expr(tree[1], env), tree[2])
        if kind == "fn":
            return function(tree[1], self.expr(tree[2], env))
        if kind == "call":
            a = self.expr(tree[1], env)
            b = self.expr(tree[2], env)
            return self.expr(self.body, {"a": a, "b": b, "c0": env["c0"]})
        if kind == "if":
            test, dynamic = self.condition(tree[1], env)
            if not dynamic:
                return self.expr(tree[2] if test else tree[3], env)
            a = self.expr(tree[2], env)
            b = self.expr(tree[3], env)
            return (a if test else b)[0], True
        raise AssertionError(kind)

    def condition(self, tree, env):
        kind = tree[0]
        if kind == "cmp":
            return compare(tree[1], self.expr(tree[2], env), self.expr(tree[3], env))
        if kind == "not":
            value, dynamic = self.condition(tree[1], env)
            return not value, dynamic
        left, dl = self.condition(tree[1], env)
        if not dl and (kind == "and") != left:
            return left, False  # static short-circuit: the right side is not lowered
        right, dr = self.condition(tree[2], env)
        value = (left and right) if kind == "and" else (left or right)
        return value, dl or dr

    def program(self, program):
        statements, out = program
        env = {}
        for st_ in statements:
            kind = st_[0]
            if kind == "const":
                env[st_[1]] = (st_[2][1], False)
            elif kind == "def":
                self.body = st_[1]
            elif kind == "assign":
                env[st_[1]] = self.expr(st_[2], env)
            elif kind == "for":
                start, n, body, _ = st_[1:]
                env["acc"] = self.expr(start, env)
                for i in range(n):
                    env["i"] = (i, False)
                    env["acc"] = arith("+", env["acc"], self.expr(body, env))
                env.pop("i", None)
        return self.expr(out, env)[0]


# --- the test ---------------------------------------------------------------------------------

inputs_x = st.floats(min_value=-2.0, max_value=2.0, allow_nan=False, allow_subnormal=False)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(program=programs(),
       x=inputs_x,
       v=st.lists(inputs_x, min_size=3, max_size=3),
       seed=st.integers(0, 2**32 - 1))
def test_random_program(program, x, v, seed):
    text = source(program)
    prog = diffdsl.compile(text)
    assert prog.inputs == {"x": (), "v": (3,)}
    assert prog.outputs == {"y": ()}

    try:
        expected = real(Evaluator(x, v).program(program))
    except Reject:
        expected = None
    if expected is not None:
        actual = prog(x=x, v=v)
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=1e-12, err_msg=text)

    # A batch of four rows: each row is the single evaluation of that row.
    rng = np.random.default_rng(seed)
    xs = np.concatenate([[x], rng.uniform(-2.0, 2.0, 3)])
    vs = np.concatenate([[v], rng.uniform(-2.0, 2.0, (3, 3))])
    batch = prog(x=xs, v=vs)
    assert batch.shape == (4,)
    for k in range(4):
        single = prog(x=float(xs[k]), v=vs[k])
        np.testing.assert_allclose(batch[k], single, rtol=1e-12, atol=0, equal_nan=True,
                                   err_msg=text)
    # The evaluator agrees on the other rows too, where it can judge.
    for k in range(1, 4):
        try:
            expected = real(Evaluator(xs[k], vs[k]).program(program))
        except Reject:
            continue
        np.testing.assert_allclose(batch[k], expected, rtol=RTOL, atol=1e-12, err_msg=text)
