"""Dask arrays through every evaluating method of `Program`, locally and on a LocalCluster.

Each Dask result is compared with the same call on NumPy arrays in one process (the path the
rest of the suite checks against finite differences, SymPy and the interpreter), and det3's
gradient with its closed form det(A)·inv(A)ᵀ. The cluster tests start two worker processes
once for the module: results there, a worker killed in the middle of a computation, and the
command line's --scheduler.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import diffdsl

da = pytest.importorskip("dask.array", reason="dask is not installed (the 'dask' extra)")
import dask  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DET3 = ROOT / "examples" / "det3.dd"

FIT = """
input x[3]      # one data point
input t         # its target
input w[3]      # shared by every row
input b
r = dot(w, x) + b - t
output loss = r * r
output both = [r, w[0] * x[1]]
"""

rng = np.random.default_rng(12)
X = rng.normal(size=(37, 3))
T = rng.normal(size=37)
W = np.array([0.5, -1.0, 2.0])
B = 0.25


@pytest.fixture(scope="module")
def fit():
    return diffdsl.compile(FIT, filename="fit.dd", backend="cpu")


def lazy(*values):
    """The batched values as Dask arrays in chunks of 10 rows (the last one shorter)."""
    return [da.from_array(v, chunks=(10,) + v.shape[1:]) for v in values]


def leaves(tree) -> list:
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in leaves(v)]
    if isinstance(tree, tuple):
        return [leaf for v in tree for leaf in leaves(v)]
    return [tree]


CALLS = {
    "call": lambda p, **kw: p(**kw),
    "evaluate": lambda p, **kw: p.evaluate(kw),
    "grad": lambda p, **kw: p.grad(of="loss", **kw),
    "value_and_grad": lambda p, **kw: p.value_and_grad(of="loss", wrt=["w", "x"], **kw),
    "jacobian": lambda p, **kw: p.jacobian(of="both", **kw),
    "jacobian reverse": lambda p, **kw: p.jacobian(of="both", mode="reverse", **kw),
    "hessian": lambda p, **kw: p.hessian(of="loss", **kw),
    "hessian diagonal": lambda p, **kw: p.hessian(of="loss", diagonal=True, **kw),
    "vjp": lambda p, **kw: p.vjp(np.array([1.0, -2.0]), of="both", **kw),
    "jvp": lambda p, **kw: p.jvp({"w": np.ones(3), "b": 2.0}, of="both", **kw),
    "hvp": lambda p, **kw: p.hvp({"w": np.array([1.0, 0.0, -1.0])}, of="loss", **kw),
    "grad sum": lambda p, **kw: p.grad(of="loss", reduce="sum", **kw),
    "value_and_grad mean": lambda p, **kw: p.value_and_grad(of="loss", reduce="mean", **kw),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_every_method_gives_dask_arrays_equal_to_numpy(fit, name):
    call = CALLS[name]
    x, t = lazy(X, T)
    result = call(fit, x=x, t=t, w=W, b=B)
    got = leaves(result)
    assert got and all(isinstance(leaf, da.Array) for leaf in got)
    for leaf in got:  # per-row results keep the batch's chunks; reductions are one value
        assert leaf.shape[:1] != (37,) or leaf.chunks[0] == (10, 10, 10, 7)
    expected = leaves(call(fit, x=X, t=T, w=W, b=B))
    computed = dask.compute(*got)
    assert len(computed) == len(expected)
    for a, b in zip(computed, expected, strict=True):
        assert np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def test_batched_seed_and_tangents_as_dask_arrays(fit):
    seeds = rng.normal(size=(37, 2))
    tangents = rng.normal(size=(37, 3))
    x, t, s, v = lazy(X, T, seeds, tangents)
    got = fit.vjp(s, of="both", x=x, t=t, w=W, b=B)
    want = fit.vjp(seeds, of="both", x=X, t=T, w=W, b=B)
    for name in want:
        np.testing.assert_allclose(got[name].compute(), want[name], rtol=1e-13)
    np.testing.assert_allclose(fit.jvp({"x": v}, of="both", x=x, t=t, w=W, b=B).compute(),
                               fit.jvp({"x": tangents}, of="both", x=X, t=T, w=W, b=B),
                               rtol=1e-13)


def test_det3_gradient_over_two_chunked_batch_axes():
    prog = diffdsl.load(DET3, backend="cpu")
    A = rng.normal(size=(4, 5, 3, 3))
    value, g = prog.value_and_grad(A=da.from_array(A, chunks=(2, 3, 3, 3)))
    assert g["A"].chunks[:2] == ((2, 2), (3, 2))
    det = np.linalg.det(A)
    np.testing.assert_allclose(value.compute(), det, rtol=1e-12)
    np.testing.assert_allclose(g["A"].compute(),
                               det[..., None, None] * np.linalg.inv(A).swapaxes(-1, -2),
                               rtol=1e-10, atol=1e-12)


def test_numpy_batch_with_a_dask_shared_input(fit):
    got = fit.grad(of="loss", wrt="w", x=X, t=T, w=da.from_array(W), b=B)["w"]
    assert isinstance(got, da.Array)
    np.testing.assert_allclose(got.compute(), fit.grad(of="loss", wrt="w", x=X, t=T, w=W,
                                                      b=B)["w"], rtol=1e-13)


def test_a_shared_input_is_one_key_not_a_copy_per_chunk():
    prog = diffdsl.compile("input x\ninput w[5000]\noutput y = x * sum(w)\n", backend="cpu")
    w = rng.normal(size=5000)
    x = da.from_array(rng.normal(size=400), chunks=10)  # 40 chunks
    y = prog(x=x, w=w)
    size = len(pickle.dumps(dict(y.__dask_graph__())))
    assert w.nbytes < size < 2 * w.nbytes  # 40 copies would be 1.6 MB
    np.testing.assert_allclose(y.compute(), x.compute() * w.sum(), rtol=1e-12)


def test_reduce_is_a_tree_of_partial_sums(fit):
    x, t = (da.from_array(v, chunks=(1,) + v.shape[1:]) for v in (X[:32], T[:32]))
    g = fit.grad(of="loss", x=x, t=t, w=W, b=B, reduce="sum")["w"]
    graph = g.__dask_graph__()
    fan_in = max(len(deps) for deps in graph.get_all_dependencies().values())
    assert fan_in < 16  # a gather of the 32 chunks would have one task with 32
    want = fit.grad(of="loss", x=X[:32], t=T[:32], w=W, b=B)["w"].sum(axis=0)
    np.testing.assert_allclose(g.compute(), want, rtol=1e-12)


def test_bad_dask_inputs_are_input_errors(fit):
    x, t = lazy(X, T)
    with pytest.raises(diffdsl.InputError, match=r"declared with shape \[3\]"):
        fit(x=da.ones((37, 4), chunks=10), t=t, w=W, b=B)
    with pytest.raises(diffdsl.InputError, match="batch shapes do not agree"):
        fit(x=x, t=da.ones(36, chunks=10), w=W, b=B)
    with pytest.raises(diffdsl.InputError, match="chunk sizes are unknown") as error:
        fit(x=x[x[:, 0] > 0], t=t, w=W, b=B)
    assert "compute_chunk_sizes" in error.value.hint
    with pytest.raises(diffdsl.InputError, match="expected real numbers"):
        fit(x=x.astype(complex), t=t, w=W, b=B)
    with pytest.raises(diffdsl.UsageError, match="unknown backend"):
        fit(x=x, t=t, w=W, b=B, backend="gpu")


def test_tasks_carry_the_source_and_options_not_the_compiled_program(fit):
    from diffdsl.runtime import chunked
    recipe = chunked.Recipe.of(fit, diffdsl.compile)
    assert len(pickle.dumps(recipe)) < len(FIT) + 1000  # the kernels would be ~100 KB
    rebuilt = pickle.loads(pickle.dumps(recipe)).build()
    assert rebuilt is not fit and rebuilt.graph.key() == fit.graph.key()
    assert (rebuilt.backend, rebuilt.dtype, rebuilt.filename) == ("cpu", "float64", "fit.dd")
    # A Program made from a graph (no source) sends its graph instead.
    bare = diffdsl.Program(fit.graph, cache=False)
    again = pickle.loads(pickle.dumps(chunked.Recipe.of(bare, diffdsl.compile))).build()
    assert again.graph.key() == fit.graph.key() and again.cache is False
    x, t = lazy(X, T)
    np.testing.assert_allclose(bare(x=x, t=t, w=W, b=B)["loss"].compute(),
                               fit(x=X, t=T, w=W, b=B)["loss"], rtol=1e-13)


def test_import_diffdsl_does_not_import_dask():
    code = "import diffdsl, sys; print('dask' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


# on a cluster of two worker processes ------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as c:
            yield c


def _built_programs():
    from diffdsl.runtime import chunked
    return [(p.stats.graphs_built, p.stats.kernels_built) for p in chunked._built.values()]


def test_cluster_results_and_workers_compile_from_the_disk_cache(client):
    prog = diffdsl.load(DET3, backend="cpu")
    A = rng.normal(size=(1000, 3, 3))
    want_value, want = prog.value_and_grad(A=A)  # puts the plan and kernel on disk
    value, g = prog.value_and_grad(A=da.from_array(A, chunks=(100, 3, 3)))
    got_value, got = dask.compute(value, g["A"])  # on the cluster: the default scheduler now
    np.testing.assert_array_equal(got_value, want_value)
    np.testing.assert_array_equal(got, want["A"])
    built = client.run(_built_programs)
    assert sum(len(programs) for programs in built.values()) >= 1
    assert all(stats == (0, 0) for programs in built.values() for stats in programs), built


def test_a_worker_killed_mid_computation_is_retried(client, tmp_path, fit):
    flag = str(tmp_path / "killed-once")

    def die_once(block, block_info=None):
        # The third chunk kills its worker process the first time it runs; Dask retries it.
        if block_info[0]["chunk-location"][0] == 2 and not os.path.exists(flag):
            open(flag, "w").close()
            os._exit(1)
        return block

    before = set(client.scheduler_info()["workers"])
    x = da.from_array(X, chunks=(5, 3)).map_blocks(die_once, dtype=float)
    value, g = fit.value_and_grad(of="loss", x=x, t=T, w=W, b=B, reduce="sum")
    got_value, got = dask.compute(value, g)
    assert os.path.exists(flag)
    client.wait_for_workers(2, timeout=60)  # the nanny starts a new worker in its place
    assert len(set(client.scheduler_info()["workers"]) - before) == 1
    want_value, want = fit.value_and_grad(of="loss", x=X, t=T, w=W, b=B, reduce="sum")
    np.testing.assert_allclose(got_value, want_value, rtol=1e-12)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12)


def test_cli_scheduler_runs_the_chunks_on_the_cluster(client, tmp_path):
    zarr = pytest.importorskip("zarr", reason="zarr is not installed")
    A = rng.normal(size=(500, 3, 3))
    np.save(tmp_path / "A.npy", A)
    out = tmp_path / "grad.zarr"
    done = subprocess.run(
        [sys.executable, "-m", "diffdsl", "grad", str(DET3), "--inputs",
         f"A={tmp_path / 'A.npy'}", "--output", str(out), "--chunk", "64", "--scheduler",
         client.scheduler.address], capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    group = zarr.open_group(str(out), mode="r")
    det = np.linalg.det(A)
    np.testing.assert_allclose(group["value"][...], det, rtol=1e-12)
    np.testing.assert_allclose(group["grad.A"][...],
                               det[:, None, None] * np.linalg.inv(A).transpose(0, 2, 1),
                               rtol=1e-9, atol=1e-12)
    assert group["grad.A"].chunks == (64, 3, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A.npy", "grad.zarr"]
