"""Loops kept as loops call glibc's vector math (backends/llvm_vector.py): every function the
vectoriser may widen agrees with NumPy to a few ulp, special values included, in both
dtypes and at every position (the widened iterations and the ones left over); and a sum over
a loop, vectorised in its own order, is the sum written out, to the bit."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from draws import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl.backends import llvm_vector, native

UNARY = ["exp", "log", "log1p", "expm1", "log2", "log10", "cbrt", "sin", "cos", "tan", "asin",
         "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf"]
BINARY = ["x ** z", "atan2(x, z)", "hypot(x, z)"]
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 1e308, -1e308, 1.0,
           -1.0, 0.5, -0.5, 2.0, 700.0, 710.0, -745.5, 89.0, 1e6, -1e6, 3.141592653589793]
N = 203  # past every vector width, with iterations left over


def _data(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.normal(scale=3.0, size=N // 2), rng.uniform(-1, 1, size=N)])[:N]
    at = rng.choice(N, size=len(SPECIAL), replace=False)  # specials at random lanes
    x[at] = SPECIAL
    return x


def _agree(got: np.ndarray, want: np.ndarray, ulps: int) -> None:
    """Equal NaNs and infinities where NumPy has them; elsewhere within `ulps` units in the
    last place of the larger magnitude."""
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    a, b = got[finite], want[finite]
    gap = np.abs(a.astype(np.float64) - b.astype(np.float64))
    unit = np.spacing(np.maximum(np.abs(a), np.abs(b))).astype(np.float64)
    worst = np.max(gap / unit) if len(a) else 0.0
    assert worst <= ulps, f"{worst} ulps"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("expr", [f"{f}(x)" for f in UNARY] + BINARY)
def test_a_widened_function_agrees_with_numpy(expr, dtype):
    source = f"input x[{N}]\ninput z[{N}]\noutput y = {expr}"
    prog = diffdsl.compile(source, backend="cpu", cache=False, dtype=dtype)
    given = {"x": _data(1), "z": _data(2)}
    with np.errstate(all="ignore"):
        got = prog(given)
        want = prog(given, backend="numpy")
    _agree(np.asarray(got), np.asarray(want), ulps=8)


def test_the_loops_call_the_vector_versions():
    """Where this process has glibc's libmvec, a loop's exp is the named function that the
    vectoriser widens, with its vector versions listed; code without loops keeps libm's."""
    if not native.vector_math():
        pytest.skip("no vector math library in this process")
    from diffdsl.backends import cpu
    looped = diffdsl.compile("input x[200]\noutput y = sum(exp(x))", cache=False)
    text, _ = cpu.emit(looped.graph, "float64")
    assert "@diffdsl_vm_exp(" in text and "vector-function-abi-variant" in text
    assert "call double @llvm.exp.f64(" not in text
    straight = diffdsl.compile("input x[3]\noutput y = sum(exp(x))", cache=False)
    text, _ = cpu.emit(straight.graph, "float64")
    assert "diffdsl_vm" not in text and "@llvm.exp.f64(" in text


def test_widen_rewrites_the_calls_it_has_versions_of():
    text = ("  %a = call double @llvm.exp.f64(double %x)\n"
            "  %b = call double @atan2(double %a, double %y)\n"
            "  %c = call double @llvm.fabs.f64(double %b)\n"
            "  %d = call float @llvm.exp.f32(float %f)\n")
    variants = {"exp": (("d", "_ZGVdN4v_exp", 4),),
                "atan2": (("b", "_ZGVbN2vv_atan2", 2), ("d", "_ZGVdN4vv_atan2", 4))}
    out = llvm_vector.widen(text, variants)
    assert "call double @diffdsl_vm_exp(double %x) #9000" in out
    assert "call double @diffdsl_vm_atan2(double %a, double %y) #9001" in out
    assert "@llvm.fabs.f64(double %b)" in out and "@llvm.exp.f32(float %f)" in out  # no expf
    assert "declare <4 x double> @_ZGVdN4vv_atan2(<4 x double>, <4 x double>)" in out
    assert ('"vector-function-abi-variant"="_ZGVbN2vv_diffdsl_vm_atan2(_ZGVbN2vv_atan2),'
            '_ZGVdN4vv_diffdsl_vm_atan2(_ZGVdN4vv_atan2)"') in out
    assert "[3 x ptr] [ptr @_ZGVdN4v_exp, ptr @_ZGVbN2vv_atan2, ptr @_ZGVdN4vv_atan2]" in out
    assert llvm_vector.widen(text, {}) == text
    assert llvm_vector.widen(text, {"sin": (("d", "_ZGVdN4v_sin", 4),)}) == text


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n", [1000, 1003])
def test_a_sum_over_a_loop_adds_in_order(dtype, n):
    """The vectorised sum adds its terms one after another, as the program written out does:
    the same bits as a sequential sum, not merely close (terms of mixed magnitudes, where
    another order gives another sum)."""
    rng = np.random.default_rng(n)
    x = (rng.normal(size=n) * 10.0 ** rng.integers(-8, 9, size=n)).astype(dtype)
    prog = diffdsl.compile(f"input x[{n}]\noutput s = sum(x * 3)", backend="cpu",
                           cache=False, dtype=dtype)
    terms = x * np.asarray(3, dtype=dtype)
    def in_order(values):
        return functools.reduce(lambda a, b: a + b, values, np.asarray(-0.0, dtype=dtype))

    want = in_order(terms)
    assert in_order(terms[::-1]) != want  # the data tell the orders apart
    assert prog(x=x) == want


WRITTEN_IN_PLACE = [
    "input x[200]\ninput a\noutput s = logsumexp(x * a)",
    "input x[200]\ninput a\nr = exp(x * a)\noutput y = r\noutput s = sum(r) + r[3]",
    "input x[200]\ninput a\ny = sin(x) * a\noutput w = y\noutput z = y + 1\n"
    "output s = sum(y * 2)",
    "input X[100, 3]\ninput w[3]\noutput s = sum(exp(X @ w))\noutput h = tanh(X @ w)",
]


@pytest.mark.parametrize("source", WRITTEN_IN_PLACE)
def test_rows_written_straight_to_the_outputs(source):
    """A loop whose stacked values all go to one output writes them there as it runs (no copy
    after it), unless something else reads them; values, gradients and batches as NumPy's."""
    prog = diffdsl.compile(source, backend="cpu", cache=False)
    rng = np.random.default_rng(4)
    given = {n: rng.normal(size=s) for n, s in prog.inputs.items()}
    batch = {n: rng.normal(size=(3, *s)) for n, s in prog.inputs.items()}

    def agree(a, b):
        for k in b:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-13, atol=1e-13)

    for values in (given, batch):
        agree(prog.evaluate(values), prog.evaluate(values, backend="numpy"))
        agree(prog.grad(values, of="s"), prog.grad(values, of="s", backend="numpy"))


def test_a_gradient_by_an_input_read_in_place_is_not_copied():
    from diffdsl.backends import cpu
    prog = diffdsl.compile(WRITTEN_IN_PLACE[0], cache=False)
    text, _ = cpu.emit(prog.derivative("grad"), "float64")
    assert "@llvm.memcpy" not in text.split("declare")[0]


def test_a_large_loop_state_stays_off_the_stack():
    """A loop's captures, sums and carried state live on the stack only when small: a scan
    carrying 40,000 values (320 KB) runs on a thread with a 256 KB stack (it overflowed it,
    a segmentation fault, while they were all stack allocations). In a child process, so a
    crash fails this test alone."""
    import subprocess
    import sys
    script = (
        "import threading, diffdsl\n"
        "src = '''input k\ny = zeros(40000) + k\nfor t in range(100) {\n"
        "    y = y * 0.5 + k * y[0]\n}\noutput out = y[39999]\n'''\n"
        "p = diffdsl.compile(src, cache=False, backend='cpu')\n"
        "want = p(k=0.1)\n"
        "threading.stack_size(256 * 1024)\n"
        "got = []\n"
        "t = threading.Thread(target=lambda: got.append(p(k=0.1)))\n"
        "t.start(); t.join()\n"
        "assert got == [want] and want > 0, (got, want)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("expr", [f + "({a})" for f in UNARY] +
                         ["{a} ** {b}", "atan2({a}, {b})", "hypot({a}, {b})"])
def test_every_call_of_a_function_takes_one_versions_value(expr, dtype):
    """Equal arguments give equal values wherever the call is: a widened lane, an element
    left over after them, straight-line code beside the loop (llvm_vector.lanes). Before,
    the left-over elements took libm's value and the rest libmvec's, up to 4 ulp apart, and
    two loops that computed one body disagreed (a logsumexp's maximum and its sum)."""
    source = (f"input x[{N}]\ninput z[{N}]\ninput c\ninput d\n"
              f"output y = {expr.format(a='x', b='z')}\noutput one = {expr.format(a='c', b='d')}")
    prog = diffdsl.compile(source, backend="cpu", cache=False, dtype=dtype)
    rng = np.random.default_rng(len(expr))
    points = np.concatenate([rng.normal(scale=3.0, size=12), rng.uniform(-1, 1, size=12)])
    for c, d in zip(points, rng.permutation(points), strict=True):
        with np.errstate(all="ignore"):
            got = prog(x=np.full(N, c), z=np.full(N, d), c=c, d=d)
        values = np.append(got["y"], got["one"])
        same = values == values[0]
        assert same.all() or np.isnan(values).all(), (c, d, np.unique(values))


HUGE = {  # a body and the argument that makes it about 10^k
    "exp": ("exp(y[i])", lambda k: k * np.log(10)),
    "sinh": ("sinh(y[i])", lambda k: k * np.log(10) + np.log(2)),
    "exp of exp": ("exp(exp(y[i] + y[i]))", lambda k: np.log(k * np.log(10)) / 2),
    "pow": ("y[i] ** 7", lambda k: 10 ** (k / 7)),
}


@settings(max_examples=examples(20), deadline=None)
@given(st.sampled_from(sorted(HUGE)), st.integers(1, 300), st.integers(1, 6),
       st.floats(-2.0, 2.0), st.randoms(use_true_random=False))
def test_logsumexp_of_huge_terms_is_finite_and_exact(body, power, ties, x, rnd):
    """logsumexp over a loop of terms near 10^power, a few of them close to the largest:
    its value is NumPy's, and its derivative by a shift x of every term is 1 (the weights
    sum to one). Its maximum and its sum compute each term in two loops; with libm in one
    and libmvec in the other, exp(term - max) of a term near 10^35 overflowed to inf."""
    expr, arg = HUGE[body]
    n = 100
    source = f"input x\ninput y[{n}]\noutput v = logsumexp({expr} + x for i in range({n}))"
    prog = diffdsl.compile(source, backend="cpu", cache=False)
    top = arg(power)
    y = np.full(n, arg(max(power // 2, 1)) - 1.0)
    for k in rnd.sample(range(n), ties):
        y[k] = top * (1 - 1e-9 * rnd.random())
    with np.errstate(over="ignore"):
        want = prog(x=x, y=y, backend="numpy")
    if not np.isfinite(want):
        return  # past the double range: both overflow
    got = prog(x=x, y=y)
    assert np.isfinite(got) and abs(got - want) <= 1e-12 * abs(want), (got, want)
    assert abs(prog.grad(x=x, y=y, wrt="x")["x"] - 1.0) < 1e-9
