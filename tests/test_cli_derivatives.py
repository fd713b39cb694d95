"""The derivative commands of the command line: JSON shapes, batches, --of/--wrt, exit codes."""

import json
from pathlib import Path

import numpy as np
import pytest

from diffdsl.cli import main

EX = Path(__file__).parent.parent / "examples"
A = [[2.0, 0.0, 1.0], [1.0, 3.0, 2.0], [1.0, 1.0, 2.0]]


def run_json(capsys, *argv):
    code = main(list(argv) + ["--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def cofactors(a):
    a = np.asarray(a)
    return np.linalg.det(a) * np.linalg.inv(a).T


def test_grad_json(capsys):
    got = run_json(capsys, "grad", str(EX / "det3.dd"), "--inputs", f"A={json.dumps(A)}")
    assert set(got) == {"of", "value", "grad"} and got["of"] == "d"
    assert got["value"] == pytest.approx(np.linalg.det(A))
    np.testing.assert_allclose(got["grad"]["A"], cofactors(A), atol=1e-12)


def test_grad_batch(capsys):
    batch = np.random.default_rng(0).uniform(size=(4, 3, 3))
    got = run_json(capsys, "grad", str(EX / "det3.dd"), "--inputs",
                   f"A={json.dumps(batch.tolist())}")
    assert np.shape(got["value"]) == (4,)
    np.testing.assert_allclose(got["grad"]["A"], [cofactors(b) for b in batch], atol=1e-12)


def test_jacobian_of_and_wrt(capsys):
    a = [[1, 2, 3], [4, 5, 6], [7, 8, 10]]
    v = [1, 2, 3]
    got = run_json(capsys, "jacobian", str(EX / "matrix.dd"), "--of", "w", "--wrt", "v",
                   "--inputs", f"A={a}", f"v={v}")
    assert got["of"] == "w" and set(got["jacobian"]) == {"v"}
    # w = transpose(C) @ v with C[i, j] = A[i, j] v[j]: w_j = v_j * sum_i A[i, j] v_i
    a, v = np.array(a, float), np.array(v, float)
    expected = np.diag(a.T @ v) + v[:, None] * a.T
    np.testing.assert_allclose(got["jacobian"]["v"], expected)


def test_hessian_json(capsys):
    got = run_json(capsys, "hessian", str(EX / "rosenbrock.dd"), "--inputs", "x=[1,1,1,1]")
    h = np.array(got["hessian"]["x"]["x"])
    assert h.shape == (4, 4) and h[0, 0] == 802.0 and h[0, 1] == -400.0


def test_vjp_and_jvp(capsys):
    got = run_json(capsys, "vjp", str(EX / "forum_scalar.dd"), "--inputs", "x=[[1]]",
                   "--seed", "[[1]]")
    assert got == {"of": "z", "value": [[75.0]], "vjp": {"x": [[60.0]]}}
    got = run_json(capsys, "jvp", str(EX / "det2.dd"), "--inputs", "A=[[1,2],[3,4]]",
                   "--tangents", "A=[[1,0],[0,0]]")
    assert got == {"of": "d", "value": -2.0, "jvp": 4.0}


def test_human_output_labels_every_input(capsys):
    assert main(["grad", str(EX / "det3.dd"), "--inputs", f"A={json.dumps(A)}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("d = ") and "\u2202d/\u2202A =" in out


def test_output_npz(tmp_path, capsys):
    target = tmp_path / "g.npz"
    assert main(["grad", str(EX / "det3.dd"), "--inputs", f"A={json.dumps(A)}",
                 "--output", str(target)]) == 0
    with np.load(target) as data:
        np.testing.assert_allclose(data["grad.A"], cofactors(A), atol=1e-12)
        assert float(data["value"]) == pytest.approx(np.linalg.det(A))


@pytest.mark.parametrize("argv, fragment", [
    (["grad", "matrix.dd", "--inputs", "A=[[1,2,3],[4,5,6],[7,8,9]]", "v=[1,2,3]"], "--of"),
    (["grad", "forum_scalar.dd", "--inputs", "x=[[1],[2]]"], "shape"),
    (["grad", "det3.dd", "--wrt", "B", "--inputs", "A=[[1,2,3],[4,5,6],[7,8,9]]"],
     "not an input"),
    (["grad", "det3.dd", "--of", "e", "--inputs", "A=[[1,2,3],[4,5,6],[7,8,9]]"],
     "not an output"),
    (["vjp", "forum_scalar.dd", "--inputs", "x=[[1]]", "--seed", "[1, 2]"], "seed"),
    (["jvp", "det2.dd", "--inputs", "A=[[1,2],[3,4]]", "--tangents", "A=[1,2]"], "tangent"),
    (["hessian", "forum_scalar.dd", "--inputs", "x=[[1], [2]]"], "shape"),
])
def test_usage_errors_exit_2(argv, fragment, capsys):
    argv = [argv[0], str(EX / argv[1])] + argv[2:]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_grad_of_an_array_output_says_what_to_use(capsys):
    assert main(["grad", str(EX / "indexing.dd"), "--of", "y", "--inputs",
                 "A=[[1,2,3,4],[5,6,7,8],[9,10,11,12]]"]) == 2
    err = capsys.readouterr().err
    assert "one element" in err and "jacobian" in err


def test_hessian_diagonal(capsys, tmp_path):
    """`hessian --diagonal`: d²f/dx_k² by input, against the closed form of Rosenbrock's
    Hessian's diagonal; in text, in .npz, for a batch; with --sparse, exit 2."""
    x = np.array([1.2, 1.0, 0.8, 1.0])

    def closed_form(x):
        d = np.zeros_like(x)
        d[:-1] += 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
        d[1:] += 200
        return d

    got = run_json(capsys, "hessian", str(EX / "rosenbrock.dd"), "--inputs",
                   f"x={json.dumps(x.tolist())}", "--diagonal")
    assert set(got) == {"of", "value", "hessian_diagonal"}
    np.testing.assert_allclose(got["hessian_diagonal"]["x"], closed_form(x), rtol=1e-12)
    batch = np.random.default_rng(1).uniform(0.5, 1.5, size=(3, 4))
    got = run_json(capsys, "hessian", str(EX / "rosenbrock.dd"), "--inputs",
                   f"x={json.dumps(batch.tolist())}", "--diagonal")
    np.testing.assert_allclose(got["hessian_diagonal"]["x"], [closed_form(b) for b in batch],
                               rtol=1e-12)
    out = tmp_path / "h.npz"
    assert main(["hessian", str(EX / "rosenbrock.dd"), "--inputs", f"x={json.dumps(x.tolist())}",
                 "--diagonal", "--output", str(out)]) == 0
    np.testing.assert_allclose(np.load(out)["hessian_diagonal.x"], closed_form(x), rtol=1e-12)
    assert main(["hessian", str(EX / "rosenbrock.dd"), "--inputs", f"x={json.dumps(x.tolist())}",
                 "--diagonal"]) == 0
    assert "\u2202\u00b2f/\u2202x\u00b2 =" in capsys.readouterr().out
    assert main(["hessian", str(EX / "rosenbrock.dd"), "--inputs", f"x={json.dumps(x.tolist())}",
                 "--diagonal", "--sparse"]) == 2
    assert "--diagonal or --sparse" in capsys.readouterr().err
