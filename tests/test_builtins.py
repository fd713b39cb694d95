"""Every builtin of LANGUAGE.md and every op of `ops.OPS`, against NumPy and `math`.

Each elementwise builtin is evaluated on random points of its domain as a scalar input, as an
array input, as a batch, and folded on a static argument (tests/test_ops.py runs one program
per op of the table, with the references of `UNARY` and `BINARY` here).
"""

import math

import mpmath
import numpy as np
import pytest

import diffdsl

RTOL = 1e-13
ATOL = 1e-15
RNG_SEED = 20240611

# name -> (NumPy reference, low, high) of the domain sampled.
UNARY = {
    "exp": (np.exp, -3.0, 3.0),
    "log": (np.log, 0.05, 5.0),
    "log1p": (np.log1p, -0.9, 5.0),
    "expm1": (np.expm1, -3.0, 3.0),
    "log2": (np.log2, 0.05, 5.0),
    "log10": (np.log10, 0.05, 5.0),
    "sqrt": (np.sqrt, 0.0, 5.0),
    "cbrt": (np.cbrt, -5.0, 5.0),
    "sin": (np.sin, -4.0, 4.0),
    "cos": (np.cos, -4.0, 4.0),
    "tan": (np.tan, -1.4, 1.4),
    "asin": (np.arcsin, -0.99, 0.99),
    "acos": (np.arccos, -0.99, 0.99),
    "atan": (np.arctan, -5.0, 5.0),
    "sinh": (np.sinh, -3.0, 3.0),
    "cosh": (np.cosh, -3.0, 3.0),
    "tanh": (np.tanh, -3.0, 3.0),
    "asinh": (np.arcsinh, -5.0, 5.0),
    "acosh": (np.arccosh, 1.01, 5.0),
    "atanh": (np.arctanh, -0.99, 0.99),
    "abs": (np.abs, -5.0, 5.0),
    "sign": (np.sign, -5.0, 5.0),
    "floor": (np.floor, -5.0, 5.0),
    "ceil": (np.ceil, -5.0, 5.0),
    "erf": (np.vectorize(math.erf, otypes=[float]), -3.0, 3.0),
    "lgamma": (np.vectorize(lambda x: float(mpmath.log(abs(mpmath.gamma(x)))), otypes=[float]),
               0.1, 5.0),
}

# name -> (NumPy reference, low, high) for both arguments.
BINARY = {
    "atan2": (np.arctan2, -3.0, 3.0),
    "hypot": (np.hypot, -3.0, 3.0),
    "logaddexp": (np.logaddexp, -30.0, 30.0),
    "pow": (np.power, 0.1, 3.0),
    "min": (np.minimum, -3.0, 3.0),
    "max": (np.maximum, -3.0, 3.0),
}

LANGUAGE_BUILTINS = set(
    "exp log log1p expm1 log2 log10 sqrt cbrt sin cos tan asin acos atan sinh cosh tanh asinh "
    "acosh atanh abs sign floor ceil erf atan2 hypot pow min max sum prod dot transpose trace "
    "minor zeros ones eye len rows cols size pi lgamma logaddexp".split()
)


def points(low, high, shape, seed=0):
    rng = np.random.default_rng(RNG_SEED + seed)
    x = rng.uniform(low, high, size=shape)
    return x


def close(actual, expected, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(actual, dtype=float), expected, rtol=rtol, atol=atol)


def test_tables_cover_the_language():
    covered = set(UNARY) | set(BINARY) | {
        "sum", "prod", "dot", "transpose", "trace", "minor", "zeros", "ones", "eye", "len",
        "rows", "cols", "size", "pi",
    }
    assert covered == LANGUAGE_BUILTINS


# --- elementwise, one argument ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_scalar(name):
    ref, low, high = UNARY[name]
    prog = diffdsl.compile(f"input x\noutput y = {name}(x)")
    assert name in prog.graph.op_counts()
    for x in points(low, high, 8):
        out = prog(x=float(x))
        assert np.shape(out) == ()
        close(out, ref(x))
    # A batch of scalars.
    xs = points(low, high, (3, 4), seed=1)
    out = prog(x=xs)
    assert out.shape == (3, 4)
    close(out, ref(xs))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_array(name):
    ref, low, high = UNARY[name]
    prog = diffdsl.compile(f"input v[2, 3]\noutput y = {name}(v)")
    assert prog.outputs == {"y": (2, 3)}
    v = points(low, high, (2, 3), seed=2)
    close(prog(v=v), ref(v))
    batch = points(low, high, (5, 2, 3), seed=3)
    out = prog(v=batch)
    assert out.shape == (5, 2, 3)
    close(out, ref(batch))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_static(name):
    """A static argument is folded when compiling; the result must be the same number."""
    ref, low, high = UNARY[name]
    x = float(points(low, high, 1, seed=4)[0])
    prog = diffdsl.compile(f"input t\noutput y = {name}({x!r}) + 0 * t")
    assert name not in prog.graph.op_counts()
    close(prog(t=1.0), ref(x))


EDGE_POINTS = ["-2.0", "-1.0", "-0.0", "0.0", "0.5", "1.0", "2.0", "1e400", "-1e400", "1e300"]


def same_number(a, b):
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_static_equals_dynamic_everywhere(name):
    """Folding never changes a result, even outside the domain (nan), at inf and at -0.0."""
    dynamic = diffdsl.compile(f"input t\noutput y = {name}(t)")
    for p in EDGE_POINTS:
        static = diffdsl.compile(f"output y = {name}({p})")()
        assert same_number(static, dynamic(t=float(p))), (name, p)


@pytest.mark.parametrize("name", sorted(BINARY) + ["+", "-", "*", "/", "**"])
def test_binary_static_equals_dynamic_everywhere(name):
    def spell(a, b):
        return f"{name}({a}, {b})" if name[0].isalpha() else f"({a}) {name} ({b})"

    dynamic = diffdsl.compile(f"input t\ninput s\noutput y = {spell('t', 's')}")
    for p in EDGE_POINTS:
        for q in EDGE_POINTS:
            static = diffdsl.compile(f"output y = {spell(p, q)}")()
            assert same_number(static, dynamic(t=float(p), s=float(q))), (name, p, q)


def test_sign_floor_ceil_at_special_points():
    prog = diffdsl.compile("input x\noutput y = [sign(x), floor(x), ceil(x), abs(x)]")
    for x in (0.0, -0.0, 2.0, -2.0, 2.5, -2.5):
        close(prog(x=x), [np.sign(x), np.floor(x), np.ceil(x), abs(x)], atol=0)


# --- elementwise, two arguments ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_scalar(name):
    ref, low, high = BINARY[name]
    prog = diffdsl.compile(f"input a\ninput b\noutput y = {name}(a, b)")
    assert name in prog.graph.op_counts()
    a = points(low, high, 10, seed=5)
    b = points(low, high, 10, seed=6)
    for x, y in zip(a, b, strict=True):
        close(prog(a=float(x), b=float(y)), ref(x, y))
    out = prog(a=a, b=b)
    assert out.shape == (10,)
    close(out, ref(a, b))
    # One batched, one shared.
    close(prog(a=a, b=float(b[0])), ref(a, b[0]))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_arrays(name):
    ref, low, high = BINARY[name]
    u = points(low, high, 4, seed=7)
    w = points(low, high, 4, seed=8)
    prog = diffdsl.compile(f"input u[4]\ninput w[4]\ninput s\n"
                           f"output p = {name}(u, w)\noutput q = {name}(u, s)\n"
                           f"output r = {name}(s, w)")
    out = prog(u=u, w=w, s=1.5)
    close(out["p"], ref(u, w))
    close(out["q"], ref(u, 1.5))
    close(out["r"], ref(1.5, w))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_static(name):
    ref, low, high = BINARY[name]
    prog = diffdsl.compile(f"input t\noutput y = {name}(1.25, 0.5) + 0 * t")
    assert name not in prog.graph.op_counts()
    close(prog(t=1.0), ref(1.25, 0.5))


@pytest.mark.parametrize("name", ["min", "max"])
def test_min_max_ties(name):
    ref = BINARY[name][0]
    prog = diffdsl.compile(f"input a\ninput b\noutput y = {name}(a, b)")
    for x in (0.0, 1.5, -2.0):
        assert prog(a=x, b=x) == x
    a = np.array([1.0, 2.0, 3.0, -1.0])
    b = np.array([1.0, 1.0, 4.0, -1.0])
    close(prog(a=a, b=b), ref(a, b), atol=0)


def test_pow_spellings():
    prog = diffdsl.compile("input a\ninput b\noutput y = [a ** b, a ^ b, pow(a, b), a ** 3]")
    close(prog(a=1.7, b=-0.6), [1.7 ** -0.6] * 3 + [1.7 ** 3])


# --- reductions -------------------------------------------------------------------------------

REDUCTIONS = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("shape", [(1,), (5,), (2, 3), (2, 2, 2)])
def test_reduction_of_array(name, shape):
    prog = diffdsl.compile(f"input v{list(shape)}\noutput y = {name}(v)")
    v = points(-2.0, 2.0, shape, seed=9)
    close(prog(v=v), REDUCTIONS[name](v))
    batch = points(-2.0, 2.0, (3, *shape), seed=10)
    close(prog(v=batch), REDUCTIONS[name](batch.reshape(3, -1), axis=1))


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_of_generator(name):
    prog = diffdsl.compile(
        f"input A[3, 3]\noutput y = {name}(A[i, j] * (i + 1) for i in range(3) "
        f"for j in range(3) if i != j)")
    a = points(-2.0, 2.0, (3, 3), seed=11)
    items = [a[i, j] * (i + 1) for i in range(3) for j in range(3) if i != j]
    close(prog(A=a), REDUCTIONS[name](items))


@pytest.mark.parametrize("name", ["min", "max"])
def test_reduction_ties(name):
    prog = diffdsl.compile(f"input v[4]\noutput y = {name}(v)")
    for v in ([1.0, 1.0, 1.0, 1.0], [2.0, -1.0, -1.0, 2.0]):
        assert prog(v=v) == REDUCTIONS[name](v)


def test_static_reductions():
    prog = diffdsl.compile("input t\noutput y = [sum(i for i in range(5)), prod(i + 1 for i in "
                           "range(4)), min(3, 1.5), max([1, 7, 2]), sum(ones(3))] * t")
    close(prog(t=1.0), [10.0, 24.0, 1.5, 7.0, 3.0])


def test_empty_sum_and_prod():
    prog = diffdsl.compile("input t\noutput y = [sum(i for i in range(0)), "
                           "prod(i for i in range(0))] * t")
    close(prog(t=1.0), [0.0, 1.0])


# --- array builtins ---------------------------------------------------------------------------


def test_dot():
    prog = diffdsl.compile("input u[4]\ninput w[4]\noutput y = dot(u, w)")
    u, w = points(-1, 1, 4, seed=12), points(-1, 1, 4, seed=13)
    close(prog(u=u, w=w), np.dot(u, w))


def test_transpose():
    prog = diffdsl.compile("input A[2, 3]\noutput y = transpose(A)")
    a = points(-1, 1, (2, 3), seed=14)
    assert prog.outputs == {"y": (3, 2)}
    close(prog(A=a), a.T, atol=0)


def test_trace():
    prog = diffdsl.compile("input A[4, 4]\noutput y = trace(A)")
    a = points(-1, 1, (4, 4), seed=15)
    close(prog(A=a), np.trace(a))


@pytest.mark.parametrize("i, j", [(0, 0), (1, 2), (2, 3), (-1, -1), (0, -2)])
def test_minor(i, j):
    prog = diffdsl.compile(f"input A[3, 4]\noutput y = minor(A, {i}, {j})")
    a = points(-1, 1, (3, 4), seed=16)
    expected = np.delete(np.delete(a, i % 3, axis=0), j % 4, axis=1)
    assert prog.outputs == {"y": (2, 3)}
    close(prog(A=a), expected, atol=0)


def test_zeros_ones_eye():
    prog = diffdsl.compile("input t\noutput z = zeros(2, 3) + t\noutput o = ones(4) * t\n"
                           "output e = eye(3) * t\noutput z3 = zeros(1, 2, 2) + t")
    out = prog(t=2.0)
    close(out["z"], np.zeros((2, 3)) + 2.0)
    close(out["o"], np.ones(4) * 2.0)
    close(out["e"], np.eye(3) * 2.0)
    close(out["z3"], np.zeros((1, 2, 2)) + 2.0)


def test_shape_builtins():
    prog = diffdsl.compile("input A[2, 5]\ninput v[3]\ninput s\n"
                           "output y = [len(A), rows(A), cols(A), size(A), len(v), size(v), "
                           "size(s)] * s")
    close(prog(A=np.zeros((2, 5)), v=np.zeros(3), s=1.0), [2, 2, 5, 10, 3, 3, 1])


def test_shape_builtins_are_static():
    prog = diffdsl.compile("input A[2, 5]\nconst n = 3\ninput v[cols(A) - n]\n"
                           "output y = sum(v) * size(A)")
    assert prog.inputs["v"] == (2,)
    close(prog(A=np.zeros((2, 5)), v=[1.0, 2.0]), 30.0)


def test_pi():
    prog = diffdsl.compile("input x\noutput y = pi * x")
    close(prog(x=1.0), math.pi, atol=0)
    close(diffdsl.compile("input x\noutput y = cos(pi) + x")(x=0.0), -1.0)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 3), (3, 4)),  # matrix @ matrix
    ((2, 3), (3,)),  # matrix @ vector
    ((3,), (3, 4)),  # vector @ matrix
    ((3,), (3,)),  # vector @ vector
    ((1, 1), (1, 1)),
])
def test_matmul(a_shape, b_shape):
    prog = diffdsl.compile(f"input A{list(a_shape)}\ninput B{list(b_shape)}\noutput y = A @ B")
    a = points(-1, 1, a_shape, seed=17)
    b = points(-1, 1, b_shape, seed=18)
    expected = a @ b
    assert prog.outputs == {"y": np.shape(expected)}
    close(prog(A=a, B=b), expected)
    batch = points(-1, 1, (2, *a_shape), seed=19)
    close(prog(A=batch, B=b), batch @ b)


def test_matmul_shape_mismatch():
    with pytest.raises(diffdsl.ShapeError):
        diffdsl.compile("input A[2, 3]\ninput B[2, 3]\noutput y = A @ B")


# --- conditions -------------------------------------------------------------------------------

COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
           "==": np.equal, "!=": np.not_equal}


@pytest.mark.parametrize("op", sorted(COMPARE))
def test_comparisons(op):
    prog = diffdsl.compile(f"input a\ninput b\noutput y = if a {op} b then 1 else 0")
    a = np.array([1.0, 2.0, -1.0, 0.0, 3.5])
    b = np.array([1.0, 1.0, 2.0, -0.0, 3.5])
    close(prog(a=a, b=b), COMPARE[op](a, b).astype(float), atol=0)
    for x, y in zip(a, b, strict=True):
        assert prog(a=x, b=y) == float(COMPARE[op](x, y))


@pytest.mark.parametrize("expr, fn", [
    ("a > 0 and b > 0", lambda a, b: (a > 0) & (b > 0)),
    ("a > 0 or b > 0", lambda a, b: (a > 0) | (b > 0)),
    ("not a > 0", lambda a, b: ~(a > 0)),
    ("not (a > 0 and b > 0)", lambda a, b: ~((a > 0) & (b > 0))),
    ("a > 0 and not b > 0 or a < -1", lambda a, b: ((a > 0) & ~(b > 0)) | (a < -1)),
    ("not not a > 0", lambda a, b: a > 0),
])
def test_logic(expr, fn):
    prog = diffdsl.compile(f"input a\ninput b\noutput y = if {expr} then a + 10 else b - 10")
    a = np.array([1.0, 1.0, -1.0, -1.0, -2.0, 0.0])
    b = np.array([1.0, -1.0, 1.0, -1.0, 3.0, 0.0])
    close(prog(a=a, b=b), np.where(fn(a, b), a + 10, b - 10), atol=0)


def test_static_logic():
    prog = diffdsl.compile("const k = 2\ninput x\noutput y = [if k > 1 and not k > 3 then 1 "
                           "else 0, if k < 1 or k == 2 then 1 else 0, if not k != 2 then 1 "
                           "else 0] * x")
    close(prog(x=1.0), [1.0, 1.0, 1.0])
    assert set(prog.graph.op_counts()) <= {"input", "const", "mul"}


def test_static_short_circuit():
    # The right side would be an index error if it were lowered.
    prog = diffdsl.compile("input v[2]\nconst k = 0\n"
                           "output y = if k > 0 and v[5] > 0 then 1 else v[1]")
    assert prog(v=[1.0, 2.0]) == 2.0
