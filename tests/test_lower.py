"""Lowering: hash-consing, folding, dead code, canonical text, call memoisation, scoping,
static and dynamic conditions, indexing, and batch evaluation (LANGUAGE.md, DESIGN.md 1)."""

import math
import re

import numpy as np
import pytest

import diffdsl
from diffdsl.language import lower as lower_module


def compile_(src):
    return diffdsl.compile(src)


def ops(prog):
    return prog.graph.op_counts()


def consts(prog):
    return [n.attr for n in prog.graph.nodes if n.op == "const"]


# --- hash-consing -----------------------------------------------------------------------------


def test_equal_subexpressions_are_one_node():
    prog = compile_("input x\ninput y\noutput z = x*y + x*y")
    assert ops(prog)["mul"] == 1
    assert prog(x=3.0, y=5.0) == 30.0


def test_commutative_operands_share_a_node():
    prog = compile_("input x\ninput y\noutput z = x*y + y*x")
    assert ops(prog)["mul"] == 1
    assert ops(prog)["add"] == 1


def test_subexpressions_shared_across_statements():
    src = """
input x
input y
a = sin(x*y)
b = sin(y*x) + 1
c = x*y
output z = a + b + c
"""
    prog = compile_(src)
    assert ops(prog)["mul"] == 1
    assert ops(prog)["sin"] == 1
    x, y = 0.3, 0.7
    assert prog(x=x, y=y) == pytest.approx(2 * math.sin(x * y) + 1 + x * y, rel=1e-15)


def test_graph_is_topological_and_nodes_unique():
    prog = compile_("input x[3]\ninput y\noutput z = sum(exp(x) * y) + prod(x) * y - x[0]")
    seen = set()
    for i, node in enumerate(prog.graph.nodes):
        assert all(a < i for a in node.args)
        key = (node.op, node.args, repr(node.attr) if node.op == "const" else node.attr)
        assert key not in seen
        seen.add(key)


# --- constant folding -------------------------------------------------------------------------


def test_constant_folding_gives_one_const():
    prog = compile_("input x\noutput z = 2*3+x")
    assert consts(prog) == [6.0]
    assert ops(prog) == {"input": 1, "const": 1, "add": 1}
    assert prog(x=1.5) == 7.5


def test_static_integer_arithmetic_stays_integer():
    prog = compile_("const n = 7 // 2\ninput v[n]\noutput z = sum(v)")
    assert prog.inputs == {"v": (3,)}
    prog = compile_("const n = -7 // 2\nconst m = -7 % 3\ninput v[-n, m]\noutput z = sum(v)")
    assert prog.inputs == {"v": (4, 2)}
    prog = compile_("const n = 2 ** 3 - 5\ninput v[n]\noutput z = sum(v)")
    assert prog.inputs == {"v": (3,)}


def test_real_division_gives_a_real_dimension_error():
    with pytest.raises(diffdsl.DiffDSLError):
        compile_("const n = 6 / 2\ninput v[n]\noutput z = sum(v)")


def test_integer_to_negative_power_is_real():
    prog = compile_("input x\noutput z = x * 2 ** -1")
    assert consts(prog) == [0.5]
    assert prog(x=3.0) == 1.5
    prog = compile_("output z = 2 ** -1")
    assert prog() == 0.5


def test_static_reals_fold_as_numpy_computes_them():
    prog = compile_("input x\noutput z = x + sin(0.5) * exp(2) / 3")
    assert consts(prog) == [math.sin(0.5) * math.exp(2) / 3]


def test_huge_static_integer_does_not_crash():
    """Static integers are exact; one too large for a real must become inf or a compile error,
    never a Python OverflowError."""
    for src in ("input x\noutput z = x * 10 ** 400",
                "output z = 10 ** 400",
                "input x\noutput z = sin(10 ** 400) + x"):
        try:
            prog = compile_(src)
        except diffdsl.DiffDSLError:
            continue
        assert prog.graph is not None


def test_zero_and_negative_zero_are_distinct_consts():
    prog = compile_("input x\noutput z = [x, 0.0, -0.0]")
    values = consts(prog)
    assert len(values) == 2
    assert {math.copysign(1.0, v) for v in values} == {1.0, -1.0}
    out = prog(x=1.0)
    assert math.copysign(1.0, out[1]) == 1.0
    assert math.copysign(1.0, out[2]) == -1.0


# --- dead code --------------------------------------------------------------------------------


def test_unused_local_leaves_no_nodes():
    prog = compile_("input x\ny = sin(x) * 17.5\noutput z = x")
    assert ops(prog) == {"input": 1}
    prog = compile_("input x\ninput w[2]\nu = exp(w[0]) + w[1]\noutput z = cos(x)")
    assert ops(prog) == {"input": 3, "cos": 1}
    assert prog.inputs == {"x": (), "w": (2,)}


# --- canonical text and key -------------------------------------------------------------------

SRC_A = "input x\ninput y\noutput z = sin(x) * y + 2"


def test_text_is_stable():
    a = compile_(SRC_A).graph.text()
    b = compile_(SRC_A).graph.text()
    assert a == b
    assert "sin" in a and "mul" in a and "add" in a


def test_key_is_sha256_and_equal_for_equal_programs():
    k1 = compile_(SRC_A).graph.key()
    k2 = compile_(SRC_A).graph.key()
    assert re.fullmatch(r"[0-9a-f]{64}", k1)
    assert k1 == k2
    # Layout, comments and the order of commutative operands do not change the graph.
    k3 = compile_("# a comment\ninput x\ninput y\n\noutput z = 2 + y*sin(x)   # done\n").graph.key()
    assert k3 == k1


@pytest.mark.parametrize("other", [
    "input x\ninput y\noutput z = cos(x) * y + 2",
    "input x\ninput y\noutput z = sin(x) * y + 3",
    "input x\ninput y\noutput w = sin(x) * y + 2",
    "input x\ninput q\noutput z = sin(x) * q + 2",
    "input x\ninput y\noutput z = sin(y) * x + 2",
    "input x\ninput y\noutput z = sin(x) * y - 2",
    "input x\ninput y\noutput z = sin(x) * y + 2\noutput u = x",
])
def test_key_differs_for_different_programs(other):
    assert compile_(other).graph.key() != compile_(SRC_A).graph.key()


# --- call memoisation -------------------------------------------------------------------------

DET = """const n = {K}
input A[n, n]

def det(M) =
    if rows(M) == 1 then M[0, 0]
    else sum((-1)**j * M[0, j] * det(minor(M, 0, j)) for j in range(cols(M)))

output d = det(A)
"""


def det_source(k):
    return DET.format(K=k)


@pytest.fixture
def call_counter(monkeypatch):
    """Counts calls of defs made while lowering, and how many of them were expanded."""
    counts = {"calls": 0, "expanded": 0}
    original = lower_module._Lowerer.call

    def counting(self, fn, args, e):
        counts["calls"] += 1
        before = len(self.memo)
        result = original(self, fn, args, e)
        counts["expanded"] += len(self.memo) > before
        return result

    monkeypatch.setattr(lower_module._Lowerer, "call", counting)
    return counts


def test_det_node_count_grows_like_n_2_to_n():
    counts = {k: len(compile_(det_source(k)).graph.nodes) for k in range(3, 9)}
    for k in range(5, 8):
        assert counts[k + 1] / counts[k] < 2.5, counts
    assert counts[8] < 8 * 2**8 * 4, counts


def test_det_calls_are_memoised(call_counter):
    k = 8
    compile_(det_source(k))
    # One expansion per distinct minor: the submatrices keep the last rows and a subset of
    # the columns, so there are at most 2**k - 1 of them, not k! calls.
    assert call_counter["expanded"] <= 2**k
    assert call_counter["calls"] <= k * 2**k
    assert call_counter["calls"] < math.factorial(k) / 10


def test_det_values():
    rng = np.random.default_rng(7)
    for k in (1, 2, 3, 5, 6):
        prog = compile_(det_source(k))
        a = rng.uniform(-1, 1, size=(k, k)) + 2 * np.eye(k)
        assert prog(A=a) == pytest.approx(np.linalg.det(a), rel=1e-11)


def test_det_10_lowers():
    prog = compile_(det_source(10))
    assert prog.inputs == {"A": (10, 10)}
    assert prog.outputs == {"d": ()}


def test_same_call_twice_is_expanded_once(call_counter):
    src = """
input x
input y
def f(a, b) {
    t = sin(a) * exp(b)
    u = t * t + a
    return u / (1 + b * b)
}
output z = f(x, y) + f(x, y) * 2
"""
    prog = compile_(src)
    assert call_counter["calls"] == 2
    assert call_counter["expanded"] == 1
    assert ops(prog)["sin"] == 1
    assert ops(prog)["exp"] == 1
    assert ops(prog)["div"] == 1
    x, y = 0.4, -0.3
    t = math.sin(x) * math.exp(y)
    f = (t * t + x) / (1 + y * y)
    assert prog(x=x, y=y) == pytest.approx(3 * f, rel=1e-14)


def test_calls_with_different_args_are_expanded_separately(call_counter):
    src = "input x\ninput y\ndef f(a) = sin(a) * 2\noutput z = f(x) + f(y) + f(x)"
    prog = compile_(src)
    assert call_counter["calls"] == 3
    assert call_counter["expanded"] == 2
    assert ops(prog)["sin"] == 2
    assert prog(x=0.2, y=0.9) == pytest.approx(4 * math.sin(0.2) + 2 * math.sin(0.9))


def test_memo_distinguishes_int_and_real_static_args():
    # f(1.0) is a real and f(1) an integer, usable as an index: one must not answer the other.
    src = "input v[3]\ndef f(a) = a\noutput z = v[0] * f(1.0) + v[f(1)]"
    prog = compile_(src)
    assert prog(v=[2.0, 3.0, 5.0]) == 5.0
    with pytest.raises(diffdsl.TypeMismatchError):
        compile_("input v[3]\ndef f(a) = a\noutput z = v[0] * f(1) + v[f(1.0)]")


# --- static and dynamic `if` ------------------------------------------------------------------


def test_static_if_expression_picks_one_branch():
    prog = compile_("const k = 2\ninput x\noutput z = if k > 1 then sin(x) else cos(x)")
    assert ops(prog) == {"input": 1, "sin": 1}
    assert prog(x=0.5) == math.sin(0.5)


def test_static_if_does_not_lower_the_branch_not_taken():
    # The branch not taken would be an index error if it were lowered.
    prog = compile_("input v[2]\nconst k = 0\noutput z = if k > 0 then v[5] else v[1]")
    assert prog(v=[1.0, 2.0]) == 2.0


def test_dynamic_if_expression_gives_select():
    prog = compile_("input x\noutput z = if x > 1 then sin(x) else cos(x)")
    counts = ops(prog)
    assert counts["select"] == 1 and counts["gt"] == 1
    assert counts["sin"] == 1 and counts["cos"] == 1
    assert prog(x=2.0) == math.sin(2.0)
    assert prog(x=0.5) == math.cos(0.5)


def test_static_if_statement_has_no_select():
    prog = compile_("const k = 1\ninput x\ny = x\nif k == 1 { y = 2 * x } else { y = 3 * x }\n"
                    "output z = y")
    assert "select" not in ops(prog)
    assert prog(x=1.5) == 3.0


def test_dynamic_if_statement_merges_names():
    src = "input x\ny = 1\nw = 5\nif x > 0 { y = 2; w = 6 } else { y = 3 }\n" \
          "output a = y * x\noutput b = w"
    prog = compile_(src)
    assert ops(prog)["select"] == 2
    assert prog(x=1.0) == {"a": 2.0, "b": 6.0}
    assert prog(x=-1.0) == {"a": -3.0, "b": 5.0}


def test_dynamic_if_without_else_keeps_old_value():
    prog = compile_("input x\ny = 1\nif x > 0 { y = 2 }\noutput z = y * x")
    assert prog(x=2.0) == 4.0
    assert prog(x=-2.0) == -2.0


def test_dynamic_elif_chain():
    src = "input x\nif x > 1 { y = 1 } else if x > 0 { y = 2 } else { y = 3 }\noutput y"
    prog = compile_(src)
    assert prog(x=2.0) == 1.0
    assert prog(x=0.5) == 2.0
    assert prog(x=-0.5) == 3.0


def test_mixed_static_dynamic_elif_chain():
    src = "const k = 0\ninput x\ny = 0\nif x > 1 { y = x } else if k == 1 { y = 2 * x }\n" \
          "else { y = 3 * x }\noutput y"
    prog = compile_(src)
    assert prog(x=2.0) == 2.0
    assert prog(x=0.5) == 1.5


@pytest.mark.parametrize("src", [
    "input x\nif x > 0 { y = 2 } else { w = 1 }\noutput z = y * x",
    "input x\nif x > 0 { y = 2 }\noutput z = y * x",
    "input x\nif x > 0 { w = 2 } else { y = 1 }\noutput z = y * x",
])
def test_name_defined_in_only_some_branches_is_undefined(src):
    with pytest.raises(diffdsl.UnknownNameError):
        compile_(src)


def test_name_defined_in_every_branch_is_defined_after():
    prog = compile_("input x\nif x > 0 { y = 2 } else { y = 1 }\noutput z = y * x")
    assert prog(x=3.0) == 6.0
    assert prog(x=-3.0) == -3.0


def test_dynamic_if_in_loop():
    src = """
input v[4]
s = 0
c = 0
for i in range(4) {
    if v[i] > 0 {
        s += v[i]
        if v[i] > 1 { c += 1 }
    } else { s -= 1 }
}
output s
output c
"""
    prog = compile_(src)
    v = np.array([0.5, -2.0, 3.0, 1.0])
    assert prog(v=v) == {"s": 3.5, "c": 1.0}
    out = prog(v=np.stack([v, -v]))
    np.testing.assert_array_equal(out["s"], [3.5, -1.0])
    np.testing.assert_array_equal(out["c"], [1.0, 1.0])


def test_dynamic_if_in_def():
    src = "def f(a) {\n  r = a\n  if a < 0 { r = -a }\n  return r\n}\ninput x\noutput z = f(x)"
    prog = compile_(src)
    assert prog(x=-2.5) == 2.5
    assert prog(x=1.5) == 1.5


# --- values and scopes ------------------------------------------------------------------------


def test_arrays_are_values():
    src = "input x[3]\ny = x\ny[0] = 1\noutput a = x\noutput b = y"
    prog = compile_(src)
    out = prog(x=[4.0, 5.0, 6.0])
    np.testing.assert_array_equal(out["a"], [4.0, 5.0, 6.0])
    np.testing.assert_array_equal(out["b"], [1.0, 5.0, 6.0])


def test_arrays_are_values_for_locals_and_augassign():
    src = "input x\ny = [x, 2 * x]\nz = y\nz[1] += 1\nz[0] *= 3\noutput a = y\noutput b = z"
    out = compile_(src)(x=2.0)
    np.testing.assert_array_equal(out["a"], [2.0, 4.0])
    np.testing.assert_array_equal(out["b"], [6.0, 5.0])


def test_arrays_are_values_across_calls():
    src = "def f(a) {\n  a[0] = 0\n  return sum(a)\n}\ninput v[2]\noutput s = f(v)\noutput w = v"
    out = compile_(src)(v=[3.0, 4.0])
    assert out["s"] == 4.0
    np.testing.assert_array_equal(out["w"], [3.0, 4.0])


def test_for_loop_assignments_persist():
    src = "input x\ns = 0\nfor i in range(3) { s = s + x * i; t = i * 10 }\noutput z = s + t"
    prog = compile_(src)
    assert prog(x=2.0) == 2.0 * 3 + 20


def test_for_loop_ranges():
    src = "input v[6]\ns = 0\nfor i in range(1, 6, 2) { s += v[i] }\n" \
          "for j in range(5, 0, -2) { s += 10 * v[j] }\noutput s"
    v = np.arange(6.0) + 1
    assert compile_(src)(v=v) == (2 + 4 + 6) + 10 * (6 + 4 + 2)


def test_for_over_array_rows():
    src = "input A[2, 3]\ns = zeros(3)\nfor r in A { s = s + r }\noutput s"
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(compile_(src)(A=a), a.sum(axis=0))


@pytest.mark.parametrize("src", [
    "input x\na = [x * i for i in range(3)]\noutput z = i",
    "input x\na = sum(x * i for i in range(3))\noutput z = i * x",
    "input x\na = [[x * i * j for i in range(2)] for j in range(2)]\noutput z = j",
])
def test_comprehension_variables_do_not_leak(src):
    with pytest.raises(diffdsl.UnknownNameError):
        compile_(src)


def test_comprehension_variable_shadows_only_inside():
    src = "input x\ni = 10\na = sum(x * i for i in range(3))\noutput z = a + i"
    assert compile_(src)(x=1.0) == 3.0 + 10


def test_functions_cannot_see_inputs():
    with pytest.raises(diffdsl.UnknownNameError):
        compile_("input x\ndef f(a) = a + x\noutput z = f(1)")


def test_functions_cannot_see_top_level_locals():
    with pytest.raises(diffdsl.UnknownNameError):
        compile_("input x\ny = 2 * x\ndef f(a) = a + y\noutput z = f(x)")


def test_functions_see_consts_and_other_defs():
    src = "const k = 3\ndef g(a) = a * 2\ndef f(a) = g(a) + k\ninput x\noutput z = f(x)"
    assert compile_(src)(x=2.0) == 7.0


def test_def_may_call_a_def_defined_later():
    src = "def f(a) = g(a) + 1\ndef g(a) = a * a\ninput x\noutput z = f(x)"
    assert compile_(src)(x=3.0) == 10.0


def test_def_shadows_builtin():
    prog = compile_("def sin(a) = a * 2\ninput x\noutput z = sin(x)")
    assert "sin" not in ops(prog)
    assert prog(x=2.0) == 4.0


def test_local_shadows_builtin_constant():
    assert compile_("input x\npi = 3\noutput z = pi * x")(x=2.0) == 6.0


def test_inputs_and_consts_cannot_be_rebound():
    for src in ("input x\nx = 2\noutput z = x",
                "const k = 1\ninput x\nk = 2\noutput z = x",
                "input x[2]\nx[0] = 2\noutput z = x"):
        with pytest.raises(diffdsl.AssignmentError):
            compile_(src)


# --- indexing ---------------------------------------------------------------------------------


def test_static_integer_array_as_index():
    prog = compile_("const rows = [2, 0]\ninput x[3]\noutput z = x[rows[1]] - x[rows[0]]")
    assert prog(x=[1.0, 2.0, 4.0]) == -3.0


def test_static_integer_array_indexes_many():
    prog = compile_("const ix = [2, 0, 2]\ninput x[3]\noutput z = x[ix]")
    np.testing.assert_array_equal(prog(x=[1.0, 2.0, 4.0]), [4.0, 1.0, 4.0])


def test_row_of_a_matrix():
    prog = compile_("input A[2, 3]\noutput z = A[0]")
    assert prog.outputs == {"z": (3,)}
    np.testing.assert_array_equal(prog(A=np.arange(6.0).reshape(2, 3)), [0.0, 1.0, 2.0])


@pytest.mark.parametrize("expr, expected", [
    ("A[-1, -2]", 4.0),
    ("A[-2, 0]", 0.0),
    ("A[-1][-1]", 5.0),
])
def test_negative_indices(expr, expected):
    prog = compile_(f"input A[2, 3]\noutput z = {expr}")
    assert prog(A=np.arange(6.0).reshape(2, 3)) == expected


@pytest.mark.parametrize("expr", [
    "v[1::2]", "v[::-3]", "v[-3:]", "v[:-2]", "v[5:1:-2]", "v[::2][1:]", "v[2:2]", "v[::-1]",
])
def test_slices_with_steps(expr):
    v = np.arange(7.0) * 1.5
    prog = compile_(f"input v[7]\noutput z = {expr}")
    expected = eval(expr, {"v": v})
    assert prog.outputs["z"] == expected.shape
    np.testing.assert_array_equal(prog(v=v), expected)


@pytest.mark.parametrize("expr", ["A[1:, :]", "A[:, 1]", "A[::2, ::-1]", "A[:, -1:]"])
def test_matrix_slices(expr):
    a = np.arange(12.0).reshape(3, 4)
    prog = compile_(f"input A[3, 4]\noutput z = {expr}")
    np.testing.assert_array_equal(prog(A=a), eval(expr, {"A": a}))


@pytest.mark.parametrize("stmt", [
    "w[1:4] = [0, 0, 0]",
    "w[::2] = 9",
    "w[1:3] = [v[4], v[0]]",
    "w[-2:] = [7, 8]",
    "w[::-2] = [1, 2, 3]",
])
def test_slice_assignment(stmt):
    v = np.arange(5.0) + 1
    prog = compile_(f"input v[5]\nw = v\n{stmt}\noutput w")
    w = v.copy()
    exec(stmt, {"w": w, "v": v})
    np.testing.assert_array_equal(prog(v=v), w)


def test_matrix_row_assignment():
    a = np.arange(6.0).reshape(2, 3)
    prog = compile_("input A[2, 3]\nB = A\nB[1] = A[0] * 2\nB[:, 0] = [5, 6]\noutput B")
    expected = a.copy()
    expected[1] = a[0] * 2
    expected[:, 0] = [5, 6]
    np.testing.assert_array_equal(prog(A=a), expected)


@pytest.mark.parametrize("expr", ["v[3]", "v[-4]", "A[2, 0]", "A[0, -4]"])
def test_index_out_of_range(expr):
    with pytest.raises(diffdsl.IndexRangeError):
        compile_(f"input v[3]\ninput A[2, 3]\noutput z = {expr}")


def test_slice_assignment_shape_mismatch():
    with pytest.raises(diffdsl.ShapeError):
        compile_("input v[5]\nw = v\nw[1:3] = [1, 2, 3]\noutput w")


def test_dynamic_index_is_an_error():
    with pytest.raises(diffdsl.StaticValueError):
        compile_("input v[3]\ninput i\noutput z = v[i]")


# --- batches and dtypes -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_program_without_inputs(backend):
    """A program of constants only is valid and evaluates with no arguments on every backend."""
    if backend == "cpu":
        pytest.importorskip("numba")
    prog = compile_("output z = [2 ** -1, 1.5, 7 // 2]")
    assert prog.inputs == {}
    np.testing.assert_array_equal(prog(backend=backend), [0.5, 1.5, 3.0])


BATCH_SRC = "input A[3, 3]\ninput s\noutput z = s * trace(A) + A[0, 1]"


def batch_expected(a, s):
    return s * np.trace(a, axis1=-2, axis2=-1) + a[..., 0, 1]


def test_batch_one_dim():
    prog = compile_(BATCH_SRC)
    a = np.random.default_rng(0).normal(size=(5, 3, 3))
    out = prog(A=a, s=2.0)
    assert out.shape == (5,)
    np.testing.assert_allclose(out, batch_expected(a, 2.0), rtol=1e-14)


def test_batch_two_dims():
    prog = compile_(BATCH_SRC)
    a = np.random.default_rng(1).normal(size=(2, 4, 3, 3))
    out = prog(A=a, s=-1.5)
    assert out.shape == (2, 4)
    np.testing.assert_allclose(out, batch_expected(a, -1.5), rtol=1e-14)


def test_batch_both_inputs():
    prog = compile_(BATCH_SRC)
    rng = np.random.default_rng(2)
    a = rng.normal(size=(5, 3, 3))
    s = rng.normal(size=5)
    out = prog(A=a, s=s)
    assert out.shape == (5,)
    np.testing.assert_allclose(out, batch_expected(a, s), rtol=1e-14)


def test_batch_rows_equal_single_evaluations():
    prog = compile_(BATCH_SRC)
    rng = np.random.default_rng(3)
    a = rng.normal(size=(4, 3, 3))
    s = rng.normal(size=4)
    out = prog(A=a, s=s)
    for k in range(4):
        assert out[k] == prog(A=a[k], s=s[k])


def test_batch_of_array_output():
    prog = compile_("input A[3, 3]\ninput s\noutput z = A[0] * s")
    a = np.random.default_rng(4).normal(size=(2, 5, 3, 3))
    out = prog(A=a, s=3.0)
    assert out.shape == (2, 5, 3)
    np.testing.assert_allclose(out, a[..., 0, :] * 3.0)


@pytest.mark.parametrize("a_shape, s_shape", [
    ((5, 3, 3), (4,)),
    ((2, 4, 3, 3), (4, 2)),
    ((2, 4, 3, 3), (8,)),
    ((5, 3, 3), (5, 1)),
])
def test_mismatched_batches_raise(a_shape, s_shape):
    prog = compile_(BATCH_SRC)
    with pytest.raises(diffdsl.InputError):
        prog(A=np.ones(a_shape), s=np.ones(s_shape))


@pytest.mark.parametrize("a_shape", [(3,), (3, 4), (5, 3, 4), (9,)])
def test_wrong_input_shape_raises(a_shape):
    prog = compile_(BATCH_SRC)
    with pytest.raises(diffdsl.InputError):
        prog(A=np.ones(a_shape), s=1.0)


def test_float32_evaluation():
    prog = compile_(BATCH_SRC)
    a = np.random.default_rng(5).normal(size=(3, 3))
    single = prog(A=a, s=2.0, dtype="float32")
    assert np.asarray(single).dtype == np.float32
    batch = prog(A=np.stack([a, a]), s=2.0, dtype="float32")
    assert batch.dtype == np.float32
    assert batch.shape == (2,)
    np.testing.assert_allclose(batch, batch_expected(a, 2.0), rtol=1e-5)
    prog2 = compile_("input x\noutput z = [sin(x), if x > 0 then x else 0, max(x, 1)]")
    out = prog2(x=np.float32(0.5), dtype="float32")
    assert out.dtype == np.float32
    out = prog2.evaluate({"x": [0.5, -1.0]}, dtype="float32")["z"]
    assert out.dtype == np.float32 and out.shape == (2, 3)
