"""Sparse derivatives in use: batches, dtypes, kernels built once, plans kept on disk, errors,
`Program.objective` handing a sparse Hessian to SciPy's trust-constr, and `--sparse` on the
command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_sparse import ROSENBROCK, dense_hessian, dense_jacobian

import diffdsl
from diffdsl.runtime import sparse

sp = pytest.importorskip("scipy.sparse", reason="sparse results are scipy.sparse matrices")
ROOT = Path(__file__).resolve().parent.parent
TRIDIAGONAL = "input x[6]\nF = [x[max(i - 1, 0)] * x[i] - sin(x[min(i + 1, 5)]) " \
              "for i in range(6)]\noutput F\noutput f = sum(F * F)\n"


def cuda_available() -> bool:
    from diffdsl.backends import cuda
    return cuda.available()


@pytest.mark.parametrize("backend", ["numpy", "cpu", "cuda"])
def test_a_batch_gives_one_matrix_per_row(backend):
    if backend == "cuda" and not cuda_available():
        pytest.skip("no CUDA GPU and no simulator")
    prog = diffdsl.compile(TRIDIAGONAL, backend=backend)
    xs = np.random.default_rng(0).uniform(-1, 1, (2, 3, 6))
    jacs = prog.jacobian(x=xs, of="F", sparse=True)
    hessians = prog.hessian(x=xs, of="f", sparse=True)
    assert len(jacs) == 2 and len(jacs[0]) == 3 and len(hessians[1]) == 3
    for a in range(2):
        for b in range(3):
            values = {"x": xs[a, b]}
            np.testing.assert_allclose(jacs[a][b].toarray(),
                                       dense_jacobian(prog, values, "F", ["x"]), rtol=1e-12)
            np.testing.assert_allclose(hessians[a][b].toarray(),
                                       dense_hessian(prog, values, "f", ["x"]), rtol=1e-12)
    flat = prog.jacobian(x=xs[0], of="F", sparse=True)
    assert isinstance(flat, list) and len(flat) == 3
    assert prog.jacobian(x=xs[:, :0], of="F", sparse=True) == [[], []]


def test_float32_and_shared_inputs_in_a_batch():
    prog = diffdsl.compile("input x[3]\ninput s\noutput y = s * sum(x * x)\n", backend="cpu")
    H = prog.hessian(x=np.ones(3), s=2.0, sparse=True, dtype="float32")
    assert H.dtype == np.float32
    np.testing.assert_array_equal(H.toarray(), np.block([[4 * np.eye(3), 2 * np.ones((3, 1))],
                                                         [2 * np.ones((1, 3)), np.zeros((1, 1))]]))
    rows = prog.hessian(x=np.ones(3), s=np.array([1.0, 3.0]), wrt="x", sparse=True)
    assert [m.toarray()[0, 0] for m in rows] == [2.0, 6.0]


def test_kernels_are_built_once_and_sweeps_are_the_colours():
    n = 60
    prog = diffdsl.compile(ROSENBROCK.format(n=n), backend="cpu", cache=False)
    rng = np.random.default_rng(4)
    prog.hessian(x=rng.normal(size=n), sparse=True)
    built = prog.builds
    for _ in range(3):
        prog.hessian(x=rng.normal(size=n), sparse=True)
        prog.sparsity(hessian=True)
    assert prog.builds == built
    plan = sparse.plan(prog, "hessian")
    assert plan.sweeps == 3 and plan.graph.outputs["compressed"].shape == (3, n)


def test_the_compressed_graph_is_kept_in_the_plan_on_disk():
    source = ROSENBROCK.format(n=17)  # a text no other test uses: its own plan entry
    first = diffdsl.compile(source, filename="warm.dd")
    x = np.linspace(-1, 1, 17)
    want = first.hessian(x=x, sparse=True).toarray()
    again = diffdsl.compile(source, filename="warm.dd")
    assert np.array_equal(again.hessian(x=x, sparse=True).toarray(), want)
    assert again.stats.graphs_built == 0  # neither lowered nor differentiated again


def test_a_derivative_that_is_zero_everywhere():
    prog = diffdsl.compile("input x[3]\noutput y = [floor(x[0]), 2, x[1] > x[2]]\n")
    J = prog.jacobian(x=[1.5, 2, 3], sparse=True)
    assert J.shape == (3, 3) and J.nnz == 0 and sparse.plan(prog, "jacobian").sweeps == 0
    lin = diffdsl.compile("input x[4]\noutput y = sum(x) * 3\n")
    H = lin.hessian(x=np.ones(4), sparse=True)
    assert H.shape == (4, 4) and H.nnz == 0


@pytest.mark.parametrize("call, words", [
    (lambda p: p.hessian(x=np.ones(4), of="F", sparse=True), "one element"),
    (lambda p: p.hessian(x=np.ones(4), of="f", sparse=True, diagonal=True), "not both"),
    (lambda p: p.jacobian(x=np.ones(4), of="F", sparse=True, mode="sideways"), "sideways"),
    (lambda p: p.jacobian(x=np.ones(4), of="F", wrt="z", sparse=True), "'z'"),
    (lambda p: p.sparsity(of="G"), "'G'"),
    (lambda p: p.value_and("grad", {"x": np.ones(4)}, of="f", sparse=True), "not grad"),
    (lambda p: p.jacobian(x=np.ones(3), of="F", sparse=True), "shape"),
])
def test_mistakes_raise_clear_errors(call, words):
    prog = diffdsl.compile("input x[4]\noutput F = x * x\noutput f = sum(x)\n")
    with pytest.raises(diffdsl.DiffDSLError, match=words):
        call(prog)


# Program.objective -----------------------------------------------------------------------
def test_trust_constr_solves_chained_rosenbrock_with_the_sparse_hessian():
    from scipy.optimize import minimize
    n = 1000
    prog = diffdsl.compile(ROSENBROCK.format(n=n), backend="cpu")
    o = prog.objective(wrt="x", x=np.random.default_rng(0).uniform(0, 2, n))
    assert o.sparse_hessian
    H = o.hess(o.x0)
    assert sp.issparse(H) and H.shape == (n, n) and H.nnz == 3 * n - 2
    result = minimize(o.fun, o.x0, jac=o.jac, hess=o.hess, method="trust-constr")
    assert result.status in (1, 2), result.message
    np.testing.assert_allclose(result.x, 1.0, atol=1e-6)


def test_objective_sparse_rule_and_override():
    small = diffdsl.compile(ROSENBROCK.format(n=4))
    o = small.objective(wrt="x", x=np.zeros(4))
    assert not o.sparse_hessian and isinstance(o.hess(o.x0), np.ndarray)
    forced = small.objective(wrt="x", x=np.zeros(4), sparse=True)
    np.testing.assert_array_equal(forced.hess(o.x0 + 0.5).toarray(), o.hess(o.x0 + 0.5))
    big = diffdsl.compile(ROSENBROCK.format(n=120))
    assert big.objective(wrt="x", x=np.zeros(120)).sparse_hessian
    dense = big.objective(wrt="x", x=np.zeros(120), sparse=False)
    assert isinstance(dense.hess(np.zeros(120)), np.ndarray)
    with pytest.raises(diffdsl.UsageError, match="sparse"):
        small.objective(wrt="x", x=np.zeros(4), sparse="yes")


# the command line ------------------------------------------------------------------------
def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "diffdsl", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_cli_sparse_writes_csr_parts_that_scipy_loads(tmp_path):
    out = tmp_path / "h.npz"
    done = cli("hessian", "examples/rosenbrock.dd", "--inputs", "x=[1.2, 1, 0.8, 1]",
               "--sparse", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert "sparse 4x4, 10 stored" in done.stdout
    prog = diffdsl.load(ROOT / "examples" / "rosenbrock.dd")
    want = prog.hessian(x=[1.2, 1, 0.8, 1])["x"]["x"]
    np.testing.assert_allclose(sp.load_npz(out).toarray(), want, rtol=1e-14)
    with np.load(out) as saved:
        assert sorted(saved.files) == ["data", "format", "indices", "indptr", "shape", "value"]


def test_cli_sparse_json_and_batches(tmp_path):
    spec = tmp_path / "inputs.json"
    spec.write_text(json.dumps({"A": np.eye(3).tolist(), "v": [[1, 2, 3], [4, 5, 6]]}))
    done = cli("jacobian", "examples/matrix.dd", "--of", "w", "--wrt", "v,A", "--inputs",
               str(spec), "--sparse", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["jacobian"]
    assert result["wrt"] == ["v", "A"] and result["shape"] == [3, 12]
    prog = diffdsl.load(ROOT / "examples" / "matrix.dd")
    for row, v in enumerate(([1, 2, 3], [4, 5, 6])):
        matrix = sp.csr_matrix((result["data"][row], result["indices"], result["indptr"]),
                               shape=result["shape"])
        want = dense_jacobian(prog, {"A": np.eye(3), "v": np.array(v, float)}, "w", ["v", "A"])
        np.testing.assert_allclose(matrix.toarray(), want, rtol=1e-14)


@pytest.mark.parametrize("args", [
    ["grad", "examples/rosenbrock.dd", "--inputs", "x=[1,1,1,1]", "--sparse"],
    ["hessian", "examples/matrix.dd", "--of", "w", "--inputs", "A=[[1,0,0],[0,1,0],[0,0,1]]",
     "v=[1,2,3]", "--sparse"],
])
def test_cli_sparse_mistakes_exit_2(args):
    done = cli(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error" in done.stderr
