"""`check` that never says ok about nothing, and check at given points (issue 23, item 2).

A Gaussian log-likelihood through a Cholesky factor (examples/gauss.dd) is defined only where
its covariance is positive definite, which no box of independent ranges describes: at random
points its value is NaN everywhere and SymPy skips its formulas (too big), so check compared
nothing and said `ok`, exit 0. Now such a check has status "unchecked" (exit 4), and points can
be given: `Program.check(points={...})`, `diffdsl check FILE --inputs ...`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import multivariate_normal

import diffdsl
from diffdsl.cli import main
from diffdsl.graph import ops
from diffdsl.symbolic import domains

ROOT = Path(__file__).resolve().parent.parent
GAUSS = ROOT / "examples" / "gauss.dd"
SIGMA = [[2, 1, 0], [1, 2, 1], [0, 1, 2]]
AT_SIGMA = ["S=" + json.dumps(SIGMA), "x=[1,0,1]", "mu=[0,0,0]"]


def _covariance(rng, n=3):
    """A positive definite matrix, and the same with junk above the diagonal, which
    cholesky (as NumPy's) does not read."""
    b = rng.uniform(-1, 1, (n, n))
    sigma = b @ b.T + n * np.eye(n)
    junk = np.tril(sigma) + np.triu(rng.uniform(-9, 9, (n, n)), 1)
    return sigma, junk


def test_gauss_is_the_gaussian_log_density_and_its_gradient():
    prog = diffdsl.load(GAUSS)
    rng = np.random.default_rng(3)
    for _ in range(3):
        sigma, given = _covariance(rng)
        x, mu = rng.normal(size=3), rng.normal(size=3)
        value = prog(S=given, x=x, mu=mu)
        assert value == pytest.approx(multivariate_normal(mu, sigma).logpdf(x), rel=1e-12)
        # d/dmu = inv(S) r, d/dx = -inv(S) r; d/dS of the symmetric S is
        # G = (inv(S) r r' inv(S) - inv(S)) / 2, and through the lower triangle that cholesky
        # reads: G on the diagonal, 2 G below it, 0 above.
        grads = prog.grad(S=given, x=x, mu=mu)
        inv = np.linalg.inv(sigma)
        w = inv @ (x - mu)
        g = (np.outer(w, w) - inv) / 2
        want_s = np.tril(2 * g, -1) + np.diag(np.diag(g))
        np.testing.assert_allclose(grads["mu"], w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(grads["x"], -w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(grads["S"], want_s, rtol=1e-10, atol=1e-12)


# Nothing compared is no pass ---------------------------------------------------------------


def test_check_of_gauss_at_random_points_compares_nothing_and_says_so(capsys):
    report = diffdsl.load(GAUSS).check()
    assert (report["ok"], report["status"], report["checked"]) == (False, "unchecked", 0)
    assert report["unchecked"] == [["ll", "S"], ["ll", "x"], ["ll", "mu"]]
    assert main(["check", str(GAUSS)]) == 4
    lines = capsys.readouterr().out.splitlines()
    assert "ok" not in lines
    assert lines[-2].startswith("NOT CHECKED: nothing was compared for d/dS of ll, d/dx of "
                                "ll, d/dmu of ll")
    assert "--inputs" in lines[-1]
    assert main(["check", str(GAUSS), "--json"]) == 4
    got = json.loads(capsys.readouterr().out)
    assert (got["ok"], got["status"], got["checked"]) == (False, "unchecked", 0)


PARTLY = """input x
y = x
for i in range(400) { y = sin(y) + x }
output good = y
output bad = y + sqrt(-1 - x * x)
"""


def test_one_derivative_compared_nowhere_is_enough_to_say_so(capsys, tmp_path):
    # Both outputs are too deep for SymPy; `bad` is NaN everywhere, so its derivative is
    # compared nowhere, while `good`'s finite differences are.
    prog = diffdsl.compile(PARTLY)
    report = prog.check(points=2)
    assert report["status"] == "unchecked" and report["unchecked"] == [["bad", "x"]]
    assert report["numeric"]["good"]["x"]["checked"] > 0 and report["checked"] > 0
    assert report["symbolic"]["good"]["x"]["status"] == "skipped"
    path = tmp_path / "partly.dd"
    path.write_text(PARTLY)
    assert main(["check", str(path)]) == 4
    assert "NOT CHECKED: nothing was compared for d/dx of bad:" in capsys.readouterr().out


def test_a_program_without_inputs_has_nothing_to_check(capsys, tmp_path):
    path = tmp_path / "c.dd"
    path.write_text("output c = 2 * pi\n")
    report = diffdsl.load(path).check()
    assert (report["status"], report["checked"], report["unchecked"]) == ("unchecked", 0, [])
    assert main(["check", str(path)]) == 4
    assert capsys.readouterr().out.splitlines()[-1].startswith("NOT CHECKED: the program has "
                                                               "no inputs")


# Points given ------------------------------------------------------------------------------


def test_check_at_given_points_compares_at_each(capsys):
    rng = np.random.default_rng(5)
    covariances = [_covariance(rng)[1] for _ in range(2)]
    points = {"S": np.stack(covariances), "x": rng.normal(size=(2, 3)), "mu": [0.5, 0.0, -1.0]}
    report = diffdsl.load(GAUSS).check(points=points)
    assert report["ok"] and report["status"] == "ok" and report.given == 2
    numeric = report["numeric"]["ll"]
    # every point, along 2 random directions and every element of the input
    assert {name: entry["checked"] for name, entry in numeric.items()} == \
        {"S": 2 * (2 + 9), "x": 2 * (2 + 3), "mu": 2 * (2 + 3)}
    assert report["checked"] == sum(entry["checked"] for entry in numeric.values())
    assert main(["check", str(GAUSS), "--inputs", *AT_SIGMA]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "at the point given" and lines[-1] == "ok"
    # a batch on the command line, and the .dd file after the values
    batch = ["S=" + json.dumps([SIGMA, np.asarray(covariances[0]).tolist()]),
             "x=[[1,0,1],[0,2,-1]]", "mu=[0,0,0]"]
    assert main(["check", "--json", "--inputs", *batch, str(GAUSS)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["status"] == "ok" and got["numeric"]["ll"]["x"]["checked"] == 2 * (2 + 3)


def test_given_points_catch_a_wrong_derivative_that_random_points_cannot(monkeypatch, capsys):
    wrong = dataclasses.replace(ops.OPS["log"], pullback=lambda g, a, out, ct: (g.mul(ct, a[0]),))
    monkeypatch.setitem(ops.OPS, "log", wrong)  # log' = x?
    prog = diffdsl.compile(GAUSS.read_text(), cache=False)
    assert prog.check()["status"] == "unchecked"  # no finite point: the bug goes unseen
    report = prog.check(points={"S": SIGMA, "x": [1, 0, 1], "mu": [0, 0, 0]})
    assert report["status"] == "mismatch" and report["ok"] is False
    assert report["numeric"]["ll"]["S"]["ok"] is False
    assert main(["check", str(GAUSS), "--inputs", *AT_SIGMA]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "FAILED: derivatives disagree"


@pytest.mark.parametrize("name", ["det3.dd", "rosenbrock.dd", "special.dd", "logsumexp.dd"])
def test_the_points_check_draws_given_back_are_checked_the_same(name):
    """Given as values, the points check would draw are compared as they were: SymPy's
    verdicts and the numbers of comparisons agree (the random directions differ)."""
    prog = diffdsl.load(ROOT / "examples" / name)
    drawn = prog.check(points=2, seed=4)
    ranges = domains.sampling_ranges(prog.graph, {})
    rng = np.random.default_rng(4)  # as check draws them, input by input
    points = {n: rng.uniform(ranges[n]["low"], ranges[n]["high"], size=(2, port.size))
              .reshape((2, *port.shape)) for n, port in prog.graph.inputs.items()}
    given = prog.check(points=points, seed=4)
    assert given["symbolic"] == drawn["symbolic"]
    assert given["status"] == drawn["status"] == "ok"
    for out, per_input in drawn["numeric"].items():
        for n, entry in per_input.items():
            assert given["numeric"][out][n]["checked"] == entry["checked"] > 0


@pytest.mark.parametrize("points, error, words", [
    ("3", diffdsl.UsageError, "a number of random points or a dict of input values, not str"),
    ({"S": SIGMA, "x": [1, 0, 1]}, diffdsl.InputError, "missing value for input 'mu'"),
    ({"S": SIGMA, "x": [1, 0], "mu": [0, 0, 0]}, diffdsl.InputError, "shape [3]"),
    ({"S": np.zeros((0, 3, 3)), "x": [1, 0, 1], "mu": [0, 0, 0]}, diffdsl.UsageError,
     "holds no point"),
])
def test_bad_points_are_refused(points, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        diffdsl.load(GAUSS).check(points=points)


def test_given_points_with_a_domain_are_refused(capsys):
    with pytest.raises(diffdsl.UsageError, match="the points are given"):
        diffdsl.load(GAUSS).check(points={"S": SIGMA, "x": [1, 0, 1], "mu": [0, 0, 0]},
                                  domain={"x": (0, 1)})
    for extra in (["--points", "2"], ["--domain", "x=0:1"]):
        assert main(["check", str(GAUSS), "--inputs", *AT_SIGMA, *extra]) == 2
        assert "but --inputs gives the points" in capsys.readouterr().err
