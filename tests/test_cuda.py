"""The CUDA backend through the public API (`backend="cuda"`), under Numba's CUDA simulator
where no GPU is: every op at special values on both paths (straight-line module and device
tape), both dtypes, device arrays in and out, batches in chunks, the kernel cache, the forum
cases. tests/test_backends.py compares every example with the numpy interpreter. Where NVVM
(libnvvm of the CUDA toolkit) is installed, the generated code is also compiled for a real GPU
(PTX), which the simulator alone cannot show: it runs the kernels as Python.
"""

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from compare import compare_with_reference, draw_inputs, path

import diffdsl
from diffdsl.backends import cuda as cb
from diffdsl.backends import cuda_tape, tape
from diffdsl.backends import numpy as reference
from diffdsl.graph import autodiff
from diffdsl.graph.ir import Builder, Port
from diffdsl.graph.ops import OPS
from diffdsl.graph.ufuncs import FUNCTIONS

ROOT = Path(__file__).parent.parent
PATHS = ["cuda", "cuda-tape"]

pytestmark = pytest.mark.skipif(not cb.available(), reason="no CUDA GPU and no simulator")


def _cuda():
    from numba import cuda
    return cuda


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
@pytest.mark.parametrize("backend", PATHS)
def test_every_op_at_special_values(backend, dtype):
    """NaN, infinities, signed zeros, domain errors: the IEEE results, as on a GPU, for every
    op's value and its derivatives (forward mode)."""
    graph = _every_op_graph()
    assert {graph.nodes[i].op for i in graph.outputs["out"].ids} >= set(OPS) - {"input"}
    prog = diffdsl.Program(graph, cache=False)
    with np.errstate(over="ignore"):  # 1e300 is inf in float32
        values = SPECIAL.astype(dtype)
    inputs = {name: values[:, k] for k, name in enumerate("xyz")}
    rtol = 1e-12 if dtype == "float64" else 2e-6
    with path(backend) as name, np.errstate(all="ignore"):
        got = {"out": prog(inputs, backend=name, dtype=dtype)}
        want = {"out": prog(inputs, backend="numpy", dtype=dtype)}
        got.update(prog.jacobian(inputs, mode="forward", backend=name, dtype=dtype))
        want.update(prog.jacobian(inputs, mode="forward", backend="numpy", dtype=dtype))
    # On a real GPU libdevice's functions may be an ulp from NumPy's, and a derivative written
    # as 1 - tanh(x)**2 (as JAX and PyTorch write it too) turns an ulp of tanh into an
    # absolute error of an ulp of 1: 3e-17 at x = -8, where it is 4.5e-7 (seen on an H200).
    # The simulator computes with NumPy's own functions: exact there, and values stay exact.
    atol = 0 if cb.simulated() else 4 * np.finfo(dtype).eps
    for key, value in want.items():
        assert got[key].dtype == np.dtype(dtype)
        np.testing.assert_allclose(got[key], value, rtol=rtol, atol=0 if key == "out" else atol,
                                   equal_nan=True, err_msg=key)
        zero = value == 0
        assert (np.signbit(got[key][zero]) == np.signbit(value[zero])).all(), key


# device arrays -------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", PATHS)
def test_device_inputs_give_device_outputs(backend):
    cuda = _cuda()
    prog = diffdsl.load(ROOT / "examples" / "matrix.dd")
    inputs = draw_inputs(prog, (5,), seed=8, shared=("v",))
    want = prog.jacobian(inputs, of="q", backend="numpy")
    with path(backend) as name:
        got = prog.jacobian({k: cuda.to_device(v) for k, v in inputs.items()}, of="q",
                            backend=name)
        for k, value in want.items():
            assert cb.is_device_array(got[k]) and not isinstance(got[k], np.ndarray)
            assert tuple(got[k].shape) == value.shape
            np.testing.assert_allclose(got[k].copy_to_host(), value, rtol=1e-12)
        # one input on the host: the results come back to the host
        mixed = prog.jacobian({"A": cuda.to_device(inputs["A"]), "v": inputs["v"]}, of="q",
                              backend=name)
    for k, value in want.items():
        assert isinstance(mixed[k], np.ndarray)
        np.testing.assert_allclose(mixed[k], value, rtol=1e-12)


@pytest.mark.parametrize("backend", PATHS)
def test_no_rows(backend):
    prog = diffdsl.load(ROOT / "examples" / "det3.dd")
    with path(backend) as name:
        value, grad = prog.value_and_grad(A=np.zeros((0, 3, 3)), backend=name)
    assert np.shape(value) == (0,) and grad["A"].shape == (0, 3, 3)


def test_tape_runs_big_batches_in_chunks(monkeypatch):
    monkeypatch.setattr(cb, "SCRATCH_BYTES", 1)  # one row a chunk
    compare_with_reference(ROOT / "examples" / "special.dd", "cuda-tape", "float64", (7,),
                           seed=9, shared=("y",))


def test_device_tape_reuses_slots_of_dead_values():
    """Slots are reused once a value is dead, and never before: the slot program run in Python
    (each node read from and written to the slots the tape gives) gives the interpreter's
    values."""
    graph = autodiff.hessian(diffdsl.load(ROOT / "examples" / "special.dd").graph, "h")
    device_tape = cuda_tape.DeviceTape(graph, np.float64)
    assert device_tape.n_slots < len(graph.nodes) // 2
    rng = np.random.default_rng(4)
    inputs = {name: rng.uniform(0.5, 1.5, port.size) for name, port in graph.inputs.items()}
    V = np.zeros(device_tape.n_slots)
    for slots, name in zip(device_tape.in_slots, graph.inputs, strict=True):
        V[slots] = inputs[name]
    names = list(OPS)
    for i, code in enumerate(device_tape.code):
        op = names[code]
        if op == "const":
            V[device_tape.dest[i]] = device_tape.consts[i]
        elif op != "input":
            args = [V[device_tape.args[i, k]] for k in range(OPS[op].arity)]
            V[device_tape.dest[i]] = FUNCTIONS[op](*args)
    want = reference.evaluate(graph, inputs)
    for slots, name in zip(device_tape.out_slots, graph.outputs, strict=True):
        np.testing.assert_allclose(V[slots], want[name], rtol=1e-14, err_msg=name)


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
@pytest.mark.parametrize("backend", PATHS)
@pytest.mark.parametrize("name", ["det2.dd", "det3.dd", "det3_forum.dd"])
def test_det_gradients_are_the_cofactors(name, backend, dtype):
    prog = diffdsl.load(ROOT / "examples" / name)
    ((matrix, (n, _)),) = prog.inputs.items()
    A = np.random.default_rng(10).uniform(-1.0, 1.0, (5, n, n)).astype(dtype)
    with path(backend) as engine_name:
        g = prog.grad({matrix: A}, backend=engine_name, dtype=dtype)[matrix]
    assert g.dtype == np.dtype(dtype)
    want = _cofactors(A.astype(np.float64))
    eps = np.finfo(dtype).eps
    err = np.abs(g - want).max()
    assert err <= 99 * eps * max(1.0, np.abs(want).max()), err


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", PATHS)
def test_forum_scalar_gradient_is_60(backend, dtype):
    """y = 2*x + 3; z = y*y*3 at x = 1: dz/dx = 6*y*2 = 60 (and 84 at x = 2)."""
    prog = diffdsl.load(ROOT / "examples" / "forum_scalar.dd")
    with path(backend) as name:
        z, g = prog.value_and_grad(x=np.array([[1.0]]), backend=name, dtype=dtype)
        assert z == 75.0 and g["x"].tolist() == [[60.0]]
        _, g = prog.value_and_grad(x=np.array([[[1.0]], [[2.0]]]), backend=name, dtype=dtype)
    assert g["x"].reshape(-1).tolist() == [60.0, 84.0]


# the generated modules -----------------------------------------------------------------------

def _imports(source: str) -> set:
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {f"{node.module}.{a.name}" for a in node.names}
    return imported


def test_module_imports_only_math_numpy_and_numba_cuda():
    graph = _every_op_graph()
    source = cb.module_source(graph, "float32", "K" * 64, "0.0")
    assert source.startswith(f"# diffdsl cuda kernel for graph {'K' * 64}\n")
    assert _imports(source) == {"math", "numpy", "numba.cuda"}
    assert "np.cbrt" not in source and "np.sign" not in source  # no CUDA version of either
    assert "def body(x0, x1, x2, y0, r):" in source
    assert "def batch(x0, x1, x2, y0, rows):" in source
    assert _imports(cuda_tape.source()) == {"math", "numba.cuda"}
    assert _imports(tape.source()) == {"math", "numpy", "numba.njit", "numba.prange"}


def test_kernels_are_modules_in_the_cache_folder(tmp_path, monkeypatch):
    """The kernel is the cache entry's `kernel.py`, whose header names its key, imported under
    that key (Numba keeps its machine code beside it)."""
    monkeypatch.setenv("DIFFDSL_CACHE_DIR", str(tmp_path))
    prog = diffdsl.compile("input x[2]\noutput f = (x[0] - 0.123) ** 2 * x[1]\n")
    x = np.array([[0.5, 2.0], [1.5, -1.0]])
    got = prog.grad(x=x, backend="cuda")["x"]
    np.testing.assert_allclose(got, prog.grad(x=x, backend="numpy")["x"], rtol=1e-14)
    (entry,) = tmp_path.rglob("kernel.py")
    key = entry.parent.name  # the entry's key: graph, dtype, target and versions
    assert entry.read_text().startswith(f"# diffdsl cuda kernel for graph {key}\n")
    assert f"{len(prog.derivative('grad', value=False).nodes)} nodes" in entry.read_text()
    assert sys.modules[f"diffdsl_cuda_kernel_{key[:32]}"].__file__ == str(entry)


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
    from diffdsl.graph import autodiff
    from diffdsl.backends import cuda as cb, cuda_tape as ct, emit

    det = diffdsl.compile(open(sys.argv[2]).read(), backend="numpy").graph
    ptxs = []
    for graph in (_every_op_graph(), autodiff.hessian(det)):
        for dtype in ("float64", "float32"):
            module = emit.module_in_memory("m" + graph.key()[:16] + dtype,
                                           cb.module_source(graph, dtype, "K", "test"))
            array = types.Array(getattr(types, dtype), 2, "C")
            sig = (array,) * (len(graph.inputs) + len(graph.outputs)) + (types.int64,)
            ptxs.append(cuda.compile_ptx(module.batch.py_func, sig, cc=(8, 0))[0])
    i1, i2 = types.Array(types.int32, 1, "C"), types.Array(types.int32, 2, "C")
    interpreter = emit.module_in_memory("tape", ct.source())
    for t in (types.float64, types.float32):
        a2, a1 = types.Array(t, 2, "C"), types.Array(t, 1, "C")
        sigs = ((interpreter.tape_run, (i1, i2, i1, a1, a2, types.int64, t, t)),
                (interpreter.tape_load, (types.Array(t, 2, "A"), a2, i1, types.int64,
                                         types.int64)),
                (interpreter.tape_store, (a2, a2, i1, types.int64, types.int64)))
        for fn, sig in sigs:
            ptxs.append(cuda.compile_ptx(fn.py_func, sig, cc=(8, 0))[0])
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


def test_a_kernel_compiles_on_a_deep_stack(monkeypatch):
    """Numba's type inference recurses once a block, and a graph of selects has thousands of
    blocks in a row: on a real GPU examples/gauss.dd's kernel (23,490) raised RecursionError
    at the default limit. `warm` compiles, by a one-row launch, on a deep stack."""
    def deep(k):
        return 0 if k == 0 else 1 + deep(k - 1)

    depth = {}
    monkeypatch.setattr(cb.Kernel, "run", lambda self, *a, **k: depth.update(d=deep(50_000)))
    kernel = cb.Kernel.__new__(cb.Kernel)
    kernel.dtype, kernel.in_sizes = np.dtype("float64"), [1]
    assert kernel.warm() is kernel and depth["d"] == 50_000
