"""Every program in examples/ against an independent NumPy implementation of the same math.

Each ``examples/*.dd`` file must have an entry in ``EXPECTED``: a function that takes the dict
of input arrays and returns a dict of output name -> expected value, written directly in NumPy
(not by translating the ``.dd`` source), so that the two can disagree.
"""

import math
from pathlib import Path

import numpy as np
import pytest

import diffdsl

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.dd"))

# The seed is fixed so failures reproduce. With it every matrix drawn below is well away from
# singular: expansion by minors and numpy.linalg.det both agree with exact rational arithmetic
# to about 1e-15 relative, so the 1e-12 tolerance for determinants leaves a wide margin.
SEED = 5
LOW, HIGH = 0.5, 1.5
DET_RTOL = 1e-12
RTOL = 1e-12
ATOL = 1e-13


def load(name):
    return diffdsl.load(str(EXAMPLES / name))


def draw_inputs(prog, seed=SEED):
    """Random inputs in [LOW, HIGH) for every declared input, in declaration order.

    Scalar inputs are passed as Python floats, arrays as NumPy arrays of the declared shape.
    """
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, shape in prog.inputs.items():
        value = rng.uniform(LOW, HIGH, size=tuple(shape))
        inputs[name] = float(value) if value.ndim == 0 else value
    return inputs


def evaluate(prog, inputs):
    """The program's outputs as a dict name -> numpy array, whatever their number."""
    result = prog(**inputs)
    if len(prog.outputs) == 1:
        (name,) = prog.outputs
        return {name: np.asarray(result, dtype=float)}
    assert isinstance(result, dict)
    return {name: np.asarray(value, dtype=float) for name, value in result.items()}


# --- independent NumPy implementations --------------------------------------------------------


def _det2(x):
    return {"d": np.linalg.det(x["A"])}


def _det3_forum(x):
    return {"az": np.linalg.det(x["ax"])}


def _det3(x):
    return {"d": np.linalg.det(x["A"])}


def _det_minors(x):
    return {"d": np.linalg.det(x["A"])}


def _rosenbrock(x):
    v = x["x"]
    return {"f": np.sum(100.0 * (v[1:] - v[:-1] ** 2) ** 2 + (1.0 - v[:-1]) ** 2)}


def _forum_scalar(x):
    y = 2.0 * x["x"] + 3.0
    return {"z": 3.0 * y**2}


def _sum_a(x):
    return {"s": x["a"].sum()}


def _logsumexp(x):
    v = x["x"]
    t = v - 1.0
    return {
        "lse": np.log(np.exp(v).sum()),
        "sp": np.log(1.0 + np.exp(t)).sum(),
    }


def _horner(x):
    c = [0.5, -1.0, 2.0, 0.25, 3.0]
    t = x["x"]
    return {"p": sum(ck * t**k for k, ck in enumerate(c))}


def _matrix(x):
    a, v = x["A"], x["v"]
    n = a.shape[0]
    i, j = np.indices((n, n))
    hilbert = 1.0 / (i + j + 1)
    return {
        "t": np.trace(a @ a.T @ hilbert) + n,
        "q": v @ a @ v,
        "w": (a * v[np.newaxis, :]).T @ v,
    }


def _piecewise_value(x, b):
    if x > 1.2:
        y = math.sqrt(x - 1.2)
    elif x > 0.8 and b < 1:
        y = (x - 0.8) * b
    else:
        y = -math.log(x)
    z = b * b if b > 1 else b
    return y + z


def _piecewise(x):
    return {"r": _piecewise_value(float(x["x"]), float(x["b"]))}


def _triangle_stats(x):
    a = x["A"]
    n = a.shape[0]
    lower = a[np.tril_indices(n, k=-1)]  # row-major order, as the comprehension builds it
    return {
        "offdiag": a.sum() - np.trace(a),
        "lower_max": lower.max(),
        "upper_min": a[np.triu_indices(n, k=1)].min(),
        "diag_prod": np.prod(np.diag(a)) / np.prod(a[0]),
        "row_max_sum": a.max(axis=1).sum(),
        "clipped": np.clip(np.diag(a), 0.8, 1.2),
        "lower": lower,
    }


def _indexing(x):
    a = x["A"]
    y = a[0].copy()
    y[0] = 2.0 * a[2, 2]
    y[1] = a[0, 3]
    y[2] = a[1, 3]
    last_col = a[:, 3]
    last_row_reversed = a[2, [3, 2, 1, 0]]
    return {
        "y": y,
        "s": a[1:].sum() + last_col @ last_col + last_row_reversed @ a[0] + a[0, 0],
    }


def _special(x):
    u, v = x["x"], x["y"]
    r = np.sqrt(u**2 + v**2)
    theta = np.arctan(v / u)  # u > 0, so atan2(v, u) is the plain arctangent
    erf = np.array([math.erf(w) for w in v / math.sqrt(2.0)])
    density = np.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)
    return {
        "f": v + erf + np.log(1.0 + u * v) + (np.exp(-v) - 1.0) + u ** (2.0 / 3.0),
        "h": np.sum(
            np.log(r + np.sqrt(r * r + 1.0))
            + np.tanh(theta)
            + 4.0 * density
            + 0.5 * np.log(u) / np.log(10.0)
            + np.arccos(v / 2.0)
        ),
    }


def _decay_fit(x):
    a, k, c = x["p"]
    return {"r": a * np.exp(-k * x["t"]) + c - x["y"]}


def _gauss(x):
    # numpy.linalg.cholesky reads the lower triangle too; where the symmetric matrix it
    # stands for is not positive definite, the program's factor and value are NaN.
    s = np.tril(x["S"]) + np.tril(x["S"], -1).T
    if np.linalg.eigvalsh(s).min() <= 0:
        return {"ll": np.nan}
    r = x["x"] - x["mu"]
    return {"ll": -0.5 * (r @ np.linalg.solve(s, r) + np.linalg.slogdet(s)[1]
                          + len(r) * np.log(2 * np.pi))}


EXPECTED = {
    "decay_fit.dd": _decay_fit,
    "gauss.dd": _gauss,
    "det2.dd": _det2,
    "det3_forum.dd": _det3_forum,
    "det3.dd": _det3,
    "det_minors.dd": _det_minors,
    "rosenbrock.dd": _rosenbrock,
    "forum_scalar.dd": _forum_scalar,
    "sum_a.dd": _sum_a,
    "logsumexp.dd": _logsumexp,
    "horner.dd": _horner,
    "matrix.dd": _matrix,
    "piecewise.dd": _piecewise,
    "triangle_stats.dd": _triangle_stats,
    "indexing.dd": _indexing,
    "special.dd": _special,
}

DETERMINANTS = {"det2.dd", "det3_forum.dd", "det3.dd", "det_minors.dd"}


# --- tests ------------------------------------------------------------------------------------


def test_examples_exist():
    assert EXAMPLE_FILES, f"no .dd files found in {EXAMPLES}"


def test_every_example_has_an_expectation():
    on_disk = {path.name for path in EXAMPLE_FILES}
    assert on_disk - EXPECTED.keys() == set(), "examples with no entry in EXPECTED"
    assert EXPECTED.keys() - on_disk == set(), "entries in EXPECTED with no example file"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_has_leading_comment(path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith(f"# {path.name}: "), first


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_matches_numpy(path):
    prog = load(path.name)
    inputs = draw_inputs(prog)
    got = evaluate(prog, inputs)
    expected = EXPECTED[path.name](inputs)
    want = {name: np.asarray(value, dtype=float) for name, value in expected.items()}

    assert set(prog.outputs) == set(want)
    assert set(got) == set(want)
    for name, expected in want.items():
        assert tuple(prog.outputs[name]) == expected.shape, name
        assert got[name].shape == expected.shape, name
        if path.name in DETERMINANTS:
            np.testing.assert_allclose(got[name], expected, rtol=DET_RTOL, atol=0, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected, rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.fixture(scope="module")
def piecewise():
    return load("piecewise.dd")


@pytest.mark.parametrize("x", [0.55, 0.7, 0.85, 1.0, 1.15, 1.3, 1.45])
@pytest.mark.parametrize("b", [0.6, 0.9, 1.1, 1.4])
def test_piecewise_every_branch(piecewise, x, b):
    # One random draw reaches only one branch of each dynamic if; this walks all of them,
    # re-evaluating one compiled program on new data.
    got = float(np.asarray(piecewise(x=x, b=b)))
    assert got == pytest.approx(_piecewise_value(x, b), rel=RTOL, abs=ATOL)


def test_det3_batch():
    prog = load("det3.dd")
    rng = np.random.default_rng(SEED)
    batch = rng.uniform(LOW, HIGH, size=(7, 3, 3))
    got = np.asarray(prog(A=batch), dtype=float)
    assert got.shape == (7,)
    np.testing.assert_allclose(got, np.linalg.det(batch), rtol=DET_RTOL, atol=0)
