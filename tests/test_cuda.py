"""The CUDA backend against the numpy interpreter, under Numba's CUDA simulator.

The simulator runs each GPU thread as a Python thread, so row counts stay small. Every example
runs through both paths (straight-line module and device tape), both dtypes, single rows and
batches with a shared input, host and device inputs. Where NVVM (libnvvm of the CUDA toolkit)
is installed, the generated code is also compiled for a real GPU (PTX), which the simulator
alone cannot show: it runs the kernels as Python.
"""

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import diffdsl
from diffdsl import autodiff
from diffdsl.backends import cuda as cb
from diffdsl.backends import numpy as reference
from diffdsl.ir import Builder, Port
from diffdsl.ops import OPS  # noqa: E402

ROOT = Path(__file__).parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.dd"))

pytestmark = pytest.mark.skipif(not cb.available(), reason="no CUDA GPU and no simulator")


def _cuda():
    from numba import cuda
    return cuda


def _program(path):
    return diffdsl.compile(Path(path).read_text(encoding="utf-8"), filename=str(path),
                           backend="numpy")


def _kernel(graph, dtype="float64", threshold=None):
    """What a caller does: straight-line module below the threshold, the tape above it."""
    if cb.uses_tape(graph, threshold):
        return cb.Kernel(graph, dtype)
    name = f"diffdsl_cuda_test_{graph.key()[:24]}_{dtype}"
    module = cb.module_in_memory(name, cb.module_source(graph, dtype, graph.key(), "test"))
    return cb.Kernel(graph, dtype, module)


PATHS = {"straight": None, "tape": 0}


def _draw(kernel, rows, rng, shared=()):
    """Inputs uniform(0.5, 1.5): (rows, size) each, (1, size) for the names in `shared`."""
    return [rng.uniform(0.5, 1.5, (1 if name in shared else rows, size))
            for name, size in zip(kernel.in_names, kernel.in_sizes, strict=True)]


def _want(graph, kernel, arrays, shared=(), dtype=np.float64):
    """The interpreter's outputs; a shared input is given as the 1-D (size,) it takes."""
    flat = {name: (a[0] if name in shared else a)
            for name, a in zip(kernel.in_names, arrays, strict=True)}
    return reference.evaluate(graph, flat, dtype)


def _check(graph, kernel, arrays, rows, shared=(), rtol=1e-12, atol=1e-13):
    got = kernel.run(arrays, rows)
    want = _want(graph, kernel, arrays, shared)
    assert len(got) == len(kernel.out_names)
    for name, out in zip(kernel.out_names, got, strict=True):
        assert isinstance(out, np.ndarray)
        assert out.dtype == kernel.dtype
        expect = np.asarray(want[name]).reshape(rows, -1)
        np.testing.assert_allclose(out, expect, rtol=rtol, atol=atol, err_msg=name)


def _derived(prog):
    """The Jacobian of every output, and the Hessian of each one-element output."""
    graphs = []
    for of, port in prog.graph.outputs.items():
        graphs.append(autodiff.jacobian(prog.graph, of))
        if port.size == 1:
            graphs.append(autodiff.grad(prog.graph, of))
            graphs.append(autodiff.hessian(prog.graph, of))
    return graphs


# every example -------------------------------------------------------------------------------

@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_match_the_interpreter(example, path):
    prog = _program(example)
    rng = np.random.default_rng(5)
    for graph in [prog.graph] + _derived(prog):
        kernel = _kernel(graph, "float64", PATHS[path])
        assert (kernel.tape is not None) == (path == "tape")
        _check(graph, kernel, _draw(kernel, 1, rng), 1)
        _check(graph, kernel, _draw(kernel, 5, rng), 5)
        if len(kernel.in_names) > 1:  # the first input shared by every row
            shared = kernel.in_names[:1]
            _check(graph, kernel, _draw(kernel, 5, rng, shared), 5, shared)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_float32(example, path):
    prog = _program(example)
    rng = np.random.default_rng(6)
    for graph in [prog.graph] + _derived(prog)[:2]:
        kernel = _kernel(graph, "float32", PATHS[path])
        arrays = _draw(kernel, 4, rng)
        got = kernel.run([a.astype(np.float32) for a in arrays], 4)
        want = _want(graph, kernel, [a.astype(np.float32).astype(np.float64) for a in arrays])
        for name, out in zip(kernel.out_names, got, strict=True):
            assert out.dtype == np.float32
            np.testing.assert_allclose(out, want[name].reshape(4, -1), rtol=2e-4, atol=2e-4,
                                       err_msg=name)


# every op, at special values -----------------------------------------------------------------

def _every_op_graph():
    """One output element per op of the table, on inputs x, y and a condition z."""
    b = Builder()
    x, y, z = b.input("x", 0), b.input("y", 0), b.input("z", 0)
    ids = []
    for name, row in OPS.items():
        if row.arity == 1:
            ids.append(b.op(name, x))
        elif row.arity == 2:
            ids.append(b.op(name, x, y))
        elif row.arity == 3:
            ids.append(b.op(name, z, x, y))
    ids.append(b.op("div", b.const(1.0), b.const(0.0)))  # not folded: inf at run time
    ids.append(b.const(float("nan")))
    ids.append(b.const(float("-inf")))
    ids.append(b.const(-0.0))
    inputs = {n: Port((), (i,)) for n, i in (("x", x), ("y", y), ("z", z))}
    return b.graph(inputs, {"out": Port((len(ids),), tuple(ids))})


SPECIAL = np.array([
    # x, y, z
    [0.7, 1.3, 1.0], [-1.5, 2.0, 0.0], [0.0, -0.0, 1.0], [-8.0, 3.0, 0.0], [2.0, 0.0, np.nan],
    [np.inf, -np.inf, 1.0], [np.nan, 1.0, 0.0], [1.0, 1.0, 1.0], [-0.5, -0.5, 2.0],
    [1e300, 1e-300, -1.0], [-np.inf, 0.25, 0.0],
])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("path", list(PATHS))
def test_every_op_at_special_values(path, dtype):
    """NaN, infinities, signed zeros, domain errors: the IEEE results, as on a GPU."""
    graph = _every_op_graph()
    assert {graph.nodes[i].op for i in graph.outputs["out"].ids} >= set(OPS) - {"input"}
    jac = autodiff.jacobian(graph, "out", mode="forward")
    dt = np.dtype(dtype)
    with np.errstate(over="ignore"):  # 1e300 is inf in float32
        values = SPECIAL.astype(dt)
    rows = len(values)
    for g in (graph, jac):
        kernel = _kernel(g, dtype, PATHS[path])
        arrays = [values[:, k:k + 1] for k in range(3)]
        with np.errstate(all="ignore"):
            got = kernel.run(arrays, rows)
            want = reference.evaluate(g, dict(zip("xyz", arrays, strict=True)), dt)
        rtol = 1e-12 if dtype == "float64" else 2e-6
        for name, out in zip(kernel.out_names, got, strict=True):
            np.testing.assert_allclose(out, want[name].reshape(rows, -1), rtol=rtol, atol=0,
                                       equal_nan=True, err_msg=name)


# device arrays -------------------------------------------------------------------------------

@pytest.mark.parametrize("path", list(PATHS))
def test_device_inputs_give_device_outputs(path):
    cuda = _cuda()
    prog = _program(ROOT / "examples" / "matrix.dd")
    graph = autodiff.jacobian(prog.graph, "q")
    kernel = _kernel(graph, "float64", PATHS[path])
    rng = np.random.default_rng(8)
    arrays = _draw(kernel, 5, rng, shared=("v",))
    want = _want(graph, kernel, arrays, shared=("v",))
    outs = kernel.run([cuda.to_device(a) for a in arrays], 5)
    for name, out in zip(kernel.out_names, outs, strict=True):
        assert cb.is_device_array(out) and not isinstance(out, np.ndarray)
        assert tuple(out.shape) == (5, graph.outputs[name].size)
        np.testing.assert_allclose(out.copy_to_host(), want[name].reshape(5, -1), rtol=1e-12)
    # one input on the host: the results come back to the host
    mixed = kernel.run([cuda.to_device(arrays[0]), arrays[1]], 5)
    assert all(isinstance(out, np.ndarray) for out in mixed)
    for name, out in zip(kernel.out_names, mixed, strict=True):
        np.testing.assert_allclose(out, want[name].reshape(5, -1), rtol=1e-12)
    # or as asked
    assert all(isinstance(o, np.ndarray) for o in kernel.run(
        [cuda.to_device(a) for a in arrays], 5, host=True))
    assert all(cb.is_device_array(o) for o in kernel.run(arrays, 5, host=False))


def test_device_input_of_the_wrong_dtype_is_refused():
    cuda = _cuda()
    graph = autodiff.grad(_program(ROOT / "examples" / "det2.dd").graph)
    kernel = _kernel(graph, "float64")
    with pytest.raises(TypeError, match="float32"):
        kernel.run([cuda.to_device(np.ones((2, 4), dtype=np.float32))], 2)


def test_bad_shapes_and_counts_are_refused():
    graph = autodiff.grad(_program(ROOT / "examples" / "det2.dd").graph)
    kernel = _kernel(graph, "float64")
    with pytest.raises(ValueError, match=r"\(3, 4\) or \(1, 4\)"):
        kernel.run([np.ones((2, 4))], 3)
    with pytest.raises(ValueError, match="expected 1 inputs"):
        kernel.run([], 1)


@pytest.mark.parametrize("path", list(PATHS))
def test_no_rows(path):
    graph = autodiff.grad(_program(ROOT / "examples" / "det3.dd").graph)
    kernel = _kernel(graph, "float64", PATHS[path])
    value, grad = kernel.run([np.zeros((0, 9))], 0)
    assert value.shape == (0, 1) and grad.shape == (0, 9)


def test_tape_runs_big_batches_in_chunks(monkeypatch):
    graph = autodiff.hessian(_program(ROOT / "examples" / "special.dd").graph, "h")
    kernel = _kernel(graph, "float64", 0)
    assert kernel.tape.n_slots < kernel.nodes  # slots are reused once values are dead
    monkeypatch.setattr(cb, "SCRATCH_BYTES", kernel.tape.n_slots * 8 * 3)  # 3 rows a chunk
    rng = np.random.default_rng(9)
    arrays = _draw(kernel, 7, rng, shared=("y",))
    _check(graph, kernel, arrays, 7, shared=("y",))


def test_point_takes_the_cpu_layout():
    graph = autodiff.grad(_program(ROOT / "examples" / "piecewise.dd").graph)
    kernel = _kernel(graph, "float64").warm()
    out = kernel.point(np.array([1.5, 0.5]))
    want = reference.evaluate(graph, {"x": np.array([1.5]), "b": np.array([0.5])})
    np.testing.assert_allclose(out, np.concatenate([want[n] for n in kernel.out_names]),
                               rtol=1e-12)


# the forum cases -----------------------------------------------------------------------------

def _cofactors(A):
    """Cofactor matrices of a batch of 2x2 or 3x3 matrices, by explicit products."""
    n = A.shape[-1]
    C = np.empty_like(A)
    if n == 2:
        C[:, 0, 0], C[:, 0, 1] = A[:, 1, 1], -A[:, 1, 0]
        C[:, 1, 0], C[:, 1, 1] = -A[:, 0, 1], A[:, 0, 0]
        return C
    for i in range(3):
        for j in range(3):
            r = [k for k in range(3) if k != i]
            c = [k for k in range(3) if k != j]
            minor = A[:, r[0], c[0]] * A[:, r[1], c[1]] - A[:, r[0], c[1]] * A[:, r[1], c[0]]
            C[:, i, j] = (-1) ** (i + j) * minor
    return C


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", ["det2.dd", "det3.dd", "det3_forum.dd"])
def test_det_gradients_are_the_cofactors(name, path, dtype):
    prog = _program(ROOT / "examples" / name)
    graph = autodiff.grad(prog.graph)
    kernel = _kernel(graph, dtype, PATHS[path])
    n = int(np.sqrt(kernel.in_sizes[0]))
    A = np.random.default_rng(10).uniform(-1.0, 1.0, (5, n, n)).astype(dtype)
    _, g = kernel.run([A.reshape(5, -1)], 5)
    want = _cofactors(A.astype(np.float64))
    eps = np.finfo(dtype).eps
    err = np.abs(g.reshape(5, n, n) - want).max()
    assert err <= 99 * eps * max(1.0, np.abs(want).max()), err


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("path", list(PATHS))
def test_forum_scalar_gradient_is_60(path, dtype):
    """y = 2*x + 3; z = y*y*3 at x = 1: dz/dx = 6*y*2 = 60 (and 84 at x = 2)."""
    graph = autodiff.grad(_program(ROOT / "examples" / "forum_scalar.dd").graph)
    kernel = _kernel(graph, dtype, PATHS[path])
    z, g = kernel.run([np.array([[1.0]])], 1)
    assert z[0, 0] == 75.0 and g[0, 0] == 60.0
    z, g = kernel.run([np.array([[1.0], [2.0]])], 2)
    assert g[:, 0].tolist() == [60.0, 84.0]


# the generated module ------------------------------------------------------------------------

def test_module_imports_only_math_numpy_and_numba_cuda():
    graph = _every_op_graph()
    source = cb.module_source(graph, "float32", "K" * 64, "0.0")
    assert source.startswith(f"# diffdsl cuda kernel for graph {'K' * 64}\n")
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {f"{node.module}.{a.name}" for a in node.names}
    assert imported == {"math", "numpy", "numba.cuda"}
    assert "np.cbrt" not in source and "np.sign" not in source  # no CUDA version of either
    assert "def body(x0, x1, x2, y0, r):" in source
    assert "def batch(x0, x1, x2, y0, rows):" in source


def test_module_from_a_file(tmp_path):
    graph = autodiff.grad(_program(ROOT / "examples" / "rosenbrock.dd").graph)
    path = tmp_path / "kernel.py"
    path.write_text(cb.module_source(graph, "float64", graph.key(), "test"), encoding="utf-8")
    name = f"diffdsl_cuda_file_{graph.key()[:24]}"
    module = cb.import_file(name, path)
    try:
        assert sys.modules[name] is module
        kernel = cb.Kernel(graph, "float64", module)
        _check(graph, kernel, _draw(kernel, 3, np.random.default_rng(1)), 3)
    finally:
        sys.modules.pop(name, None)


def test_import_needs_no_numba_cuda():
    """`available()` is False, not an exception, where numba.cuda cannot be imported."""
    code = ("import sys; sys.modules['numba.cuda'] = None\n"
            "import diffdsl.backends.cuda as c\n"
            "print(c.available(), c.simulated())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


PTX_SCRIPT = textwrap.dedent("""
    import shutil, subprocess, sys, tempfile
    try:
        from numba import cuda, types
        from numba.cuda.cudadrv import nvvm
        nvvm.NVVM()
        import numba.cuda.dispatcher as dispatcher
        dispatcher.get_current_device  # device functions ask the GPU for its compute capability
    except Exception as exc:
        print("SKIP", type(exc).__name__, exc)
        sys.exit(0)

    class Device:
        compute_capability = (8, 0)

    dispatcher.get_current_device = lambda: Device()
    sys.path.insert(0, sys.argv[1])
    from test_cuda import _every_op_graph
    import diffdsl
    from diffdsl import autodiff
    from diffdsl.backends import cuda as cb, cuda_tape as ct

    det = diffdsl.compile(open(sys.argv[2]).read(), backend="numpy").graph
    ptxs = []
    for graph in (_every_op_graph(), autodiff.hessian(det)):
        for dtype in ("float64", "float32"):
            module = cb.module_in_memory("m" + graph.key()[:16] + dtype,
                                         cb.module_source(graph, dtype, "K", "test"))
            array = types.Array(getattr(types, dtype), 2, "C")
            sig = (array,) * (len(graph.inputs) + len(graph.outputs)) + (types.int64,)
            ptxs.append(cuda.compile_ptx(module.batch.py_func, sig, cc=(8, 0))[0])
    i1, i2 = types.Array(types.int32, 1, "C"), types.Array(types.int32, 2, "C")
    for t in (types.float64, types.float32):
        a2, a1 = types.Array(t, 2, "C"), types.Array(t, 1, "C")
        ct.kernels(cb._cuda(), cb._math)  # binds the kernels' `cuda` and `math`
        sigs = ((ct._tape_run, (i1, i2, i1, a1, a2, types.int64, t, t)),
                (ct._tape_load, (types.Array(t, 2, "A"), a2, i1, types.int64, types.int64)),
                (ct._tape_store, (a2, a2, i1, types.int64, types.int64)))
        for fn, sig in sigs:
            ptxs.append(cuda.compile_ptx(fn, sig, cc=(8, 0))[0])
    ptxas = shutil.which("ptxas")
    if ptxas:
        with tempfile.TemporaryDirectory() as d:
            for k, ptx in enumerate(ptxs):
                path = f"{d}/k{k}.ptx"
                open(path, "w").write(ptx)
                done = subprocess.run([ptxas, "-arch=sm_80", path, "-o", path + ".cubin"],
                                      capture_output=True, text=True)
                assert done.returncode == 0, done.stderr
    print("OK", len(ptxs), "ptxas" if ptxas else "no ptxas")
""")


def test_generated_code_compiles_for_a_real_gpu(tmp_path):
    """The simulator runs kernels as Python; NVVM shows the same code compiles for a GPU."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", PTX_SCRIPT, str(ROOT / "tests"),
                           str(ROOT / "examples" / "det3.dd")],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if done.stdout.startswith("SKIP"):
        pytest.skip(f"no NVVM here: {done.stdout.strip()}")
    assert done.stdout.startswith("OK"), done.stdout


# Through the API and the command line ------------------------------------------------------

EXAMPLE_FILES = sorted((ROOT / "examples").glob("*.dd"))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_api_cuda_equals_cpu(path, dtype):
    gpu = diffdsl.load(path, backend="cuda", dtype=dtype)
    cpu = diffdsl.load(path, backend="cpu", dtype=dtype)
    rng = np.random.default_rng(8)
    tol = 1e-12 if dtype == "float64" else 2e-5
    for batch in ((), (3,)):
        inputs = {n: rng.uniform(0.5, 1.5, batch + s) for n, s in gpu.inputs.items()}
        for of in gpu.outputs:
            want = cpu.jacobian(inputs, of=of)
            got = gpu.jacobian(inputs, of=of)
            for k in want:
                assert np.asarray(got[k]).dtype == np.dtype(dtype)
                np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol)


def test_api_device_inputs_stay_on_the_device(monkeypatch):
    from numba import cuda
    monkeypatch.delenv("DIFFDSL_BACKEND", raising=False)
    prog = diffdsl.load(ROOT / "examples" / "det3.dd")  # auto: device inputs pick cuda
    a = np.random.default_rng(0).uniform(size=(6, 3, 3))
    grads = prog.grad(A=cuda.to_device(a))["A"]
    assert not isinstance(grads, np.ndarray) and tuple(grads.shape) == (6, 3, 3)
    expected = np.linalg.det(a)[:, None, None] * np.linalg.inv(a).transpose(0, 2, 1)
    np.testing.assert_allclose(grads.copy_to_host(), expected, atol=1e-13)
    with pytest.raises(diffdsl.InputError, match="float32"):
        prog.grad(A=cuda.to_device(a.astype(np.float32)))
    on_cpu = diffdsl.load(ROOT / "examples" / "det3.dd", backend="cpu")
    np.testing.assert_allclose(on_cpu.grad(A=cuda.to_device(a))["A"], expected, atol=1e-13)


def test_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-m", "diffdsl", "grad",
                           str(ROOT / "examples" / "det2.dd"), "--backend", "cuda",
                           "--inputs", "A=[[1,2],[3,4]]"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "needs an NVIDIA GPU" in done.stderr and "Traceback" not in done.stderr
