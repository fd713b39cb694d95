"""`diffdsl export` (issue 24, item 3): C source and shared libraries of a program's value and
derivatives, compiled by the system's compiler at -O2, loaded through ctypes and compared with
the API; every op, loops kept as loops (a sum and a scan), float32, the rows ABI with a shared
input, finite differences and a closed form as oracles independent of the engine, the LLVM
IR, the C `main` of examples/export, and the command line's errors (exit 2).
(tests/test_export_examples.py runs every example.)"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from exported import compare, compile_all, compile_commands, export_both, load
from fuzzing import programs
from hypothesis import HealthCheck, assume, given, settings

import diffdsl
from diffdsl.backends import shared
from diffdsl.backends.c import C_OPS
from diffdsl.export import export
from diffdsl.graph.ops import BINARY_BUILTINS, OPS, UNARY_BUILTINS

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("cc") is None or sys.platform == "win32",
                                reason="needs a C compiler (cc)")


def _every_op() -> str:
    """Every builtin op on arguments inside and outside its domain (NaN must match NaN), and
    the operators, comparisons, logic and selects, into one vector output."""
    terms = []
    for f in UNARY_BUILTINS:
        terms += [f"{f}(x[0] * 0.5)", f"{f}(1 + x[1])", f"{f}(-x[0])"]
    for f in BINARY_BUILTINS:
        terms += [f"{f}(x[0], y[0])", f"{f}(x[1], -y[1])"]
    terms += ["-x[0] / y[1] - x[1]", "min(x[0], y[0])", "max(x[1], y[1])",
              "if x[0] < y[0] and not (x[1] >= y[1]) or x[0] == y[1] then x[0] * y[0] "
              "else x[1] - y[1]", "if x[0] != y[0] and x[0] <= y[1] then 1 else x[0] > y[1]",
              "x[0] ** 3", "1 / 0 * x[0]", "0 * -1 + x[1]",
              # NaN conditions are true (selects without a branch in C), NaN in min and max
              "if log(-x[0]) then x[0] else y[0]", "if x[0] - x[0] then x[0] else y[0]",
              "min(log(-x[0]), y[0])", "max(y[1], log(-x[1]))", "min(y[0], -0.0 * y[0])"]
    return "input x[2]\ninput y[2]\noutput u = [" + ", ".join(terms) + "]\n"


SCAN = """const n = 60
input x[n]
input a
def step(s, t) = s * 0.5 + sin(t * s)
s = a
for i in range(n) {
    s = step(s, x[i])
}
output y = s
"""

# name: (program, kinds, of, wrt)
PROGRAMS = {
    "ops": (_every_op(), ["jacobian", "vjp", "jvp"], None, None),
    "special": (ROOT / "examples" / "special.dd", ["grad", "hessian", "hvp"], "h", None),
    "piecewise": (ROOT / "examples" / "piecewise.dd", ["grad", "hessian"], None, None),
    "logsumexp": (ROOT / "examples" / "logsumexp.dd", ["grad", "hessian_diagonal"], "lse",
                  None),
    "kmeans": (ROOT / "examples" / "data" / "kmeans.dd", ["grad", "jvp"], None, ["C"]),
    "scan": (SCAN, ["grad", "jvp", "vjp"], None, None),
    "rosen": (ROOT / "examples" / "rosenbrock.dd", ["grad", "hessian"], None, None),
}


def _program(source) -> diffdsl.Program:
    return diffdsl.load(source) if isinstance(source, Path) else diffdsl.compile(source)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every program of PROGRAMS exported, its C compiled (two compilers at a time)."""
    folder = tmp_path_factory.mktemp("export")
    progs, commands = {}, []
    for name, (source, kinds, of, wrt) in PROGRAMS.items():
        progs[name] = _program(source)
        commands.append(export_both(progs[name], folder, name, kinds, of, wrt))
    compile_all(commands)
    return folder, progs


def test_every_op_has_a_c_spelling():
    assert {name for name, row in OPS.items() if row.ll} <= set(C_OPS)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_c_and_shared_library_agree_with_the_api(built, name):
    folder, progs = built
    _, kinds, of, wrt = PROGRAMS[name]
    for lib in load(folder, name):
        for kind in ["value", *kinds]:
            compare(lib, progs[name], name, kind, of, wrt, rows=3)


def test_gradient_against_finite_differences_and_a_closed_form(built):
    """Oracles the engine has no part in: the exported value's central differences, and
    Rosenbrock's gradient by hand."""
    folder, _ = built
    lib = load(folder, "rosen")[0]
    x = np.array([1.2, 0.9, 0.7, 1.1])
    f, g, d = np.zeros(1), np.zeros(1), np.zeros(4)
    lib.rosen_grad(*(a.ctypes.data_as(ctypes.c_void_p) for a in (x, g, d)))
    expected = np.zeros(4)
    expected[:-1] += -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    expected[1:] += 200 * (x[1:] - x[:-1] ** 2)
    np.testing.assert_allclose(d, expected, rtol=1e-13)
    h = 1e-6
    for k in range(4):
        values = []
        for step in (h, -h):
            xs = x.copy()
            xs[k] += step
            lib.rosen_value(*(a.ctypes.data_as(ctypes.c_void_p) for a in (xs, f)))
            values.append(f[0])
        assert abs((values[0] - values[1]) / (2 * h) - d[k]) < 1e-6 * max(1, abs(d[k]))


def test_rows_with_a_shared_input(built):
    """The kernels' ABI: an input of stride 0 is one value shared by every row."""
    folder, progs = built
    prog = progs["kmeans"]
    rng = np.random.default_rng(3)
    P, C = rng.uniform(size=(1000, 8)), rng.uniform(size=(4, 10, 8))
    for lib in load(folder, "kmeans"):
        value, grad = np.zeros(4), np.zeros((4, 10, 8))
        ports = (ctypes.c_void_p * 4)(*(a.ctypes.data for a in (P, C, value, grad)))
        strides = (ctypes.c_int64 * 4)(0, 80, 1, 80)
        scratch = np.zeros(_scratch(folder, "kmeans_grad"))
        lib.kmeans_grad_rows(ports, strides, ctypes.c_int64(0), ctypes.c_int64(4),
                             scratch.ctypes.data_as(ctypes.c_void_p))
        want = prog.grad(P=P, C=C, wrt="C", backend="cpu")["C"]
        np.testing.assert_allclose(grad, want, rtol=1e-12)


def _scratch(folder: Path, fn: str) -> int:
    for line in (folder / "kmeans.h").read_text().splitlines():
        if line.startswith(f"#define {fn.upper()}_SCRATCH "):
            return int(line.split()[-1])
    raise AssertionError(f"no scratch size of {fn}")


def test_float32(tmp_path):
    prog = diffdsl.load(ROOT / "examples" / "special.dd", dtype="float32")
    compile_all([export_both(prog, tmp_path, "sp32", ["grad"], "h", dtype="float32")])
    assert "float" in (tmp_path / "sp32.h").read_text()
    for lib in load(tmp_path, "sp32"):
        for kind in ("value", "grad"):
            compare(lib, prog, "sp32", kind, "h", dtype="float32", rtol=1e-6)


def test_llvm_ir_is_what_the_library_is_made_of(tmp_path):
    """--llvm writes each function's module (the text the shared library is compiled from),
    the header and the wrappers; the modules parse and verify in LLVM."""
    import llvmlite.binding as llvm
    prog = diffdsl.load(ROOT / "examples" / "det3.dd")
    written = export(prog, llvm=tmp_path, kinds=["grad"], name="det")
    assert sorted(p.name for p in written) == ["det.h", "det_api.c", "det_grad.ll",
                                               "det_value.ll"]
    text = (tmp_path / "det_grad.ll").read_text()
    assert text == shared.module_text(prog.derivative("grad"), "det_grad", "float64")[0]
    assert "define void @det_grad_rows(" in text and "Py_" not in text
    llvm.parse_assembly(text).verify()
    assert '#include "det.h"' in (tmp_path / "det_api.c").read_text()


def test_example_main_builds_and_runs(tmp_path):
    """examples/export: a C program calling an exported gradient, built by its Makefile."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    folder = tmp_path / "export"
    shutil.copytree(ROOT / "examples" / "export", folder)
    done = subprocess.run(["make", "-C", str(folder), f"DIFFDSL={sys.executable} -m diffdsl",
                           f"EXAMPLES={ROOT / 'examples'}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    run = subprocess.run([str(folder / "det_grad")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    A = np.array([[2.0, 0, 1], [1, 3, 2], [1, 1, 2]])
    numbers = [float(w) for w in re.findall(r"-?[0-9][0-9.e+-]*", run.stdout)]
    np.testing.assert_allclose(numbers[0], np.linalg.det(A))
    np.testing.assert_allclose(numbers[1:10], np.linalg.det(A) * np.linalg.inv(A).T.ravel())
    np.testing.assert_allclose(numbers[10:], [np.linalg.det(A), 1.0])


@pytest.mark.parametrize("args, says", [
    (["--grad"], "somewhere to write"),
    (["--grad", "--c", "{tmp}", "--name", "3d"], "cannot name exported C functions"),
    (["--grad", "--c", "{tmp}", "--name", "int"], "cannot name exported C functions"),
    (["--grad", "--wrt", "B", "--c", "{tmp}"], "'B' is not an input"),
    (["--grad", "--of", "q", "--c", "{tmp}"], "'q' is not an output"),
    (["--shared", "{tmp}/lib.dll" if sys.platform != "win32" else "{tmp}/lib.so"],
     "shared library here is named"),
    (["--shared", "{tmp}"], "is a folder"),
    (["--c", "{tmp}/file.txt/sub"], "cannot make the folder"),
    (["--dtype", "float16", "--c", "{tmp}"], "invalid choice"),
])
def test_bad_arguments_exit_2(tmp_path, args, says):
    (tmp_path / "file.txt").write_text("")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = subprocess.run([sys.executable, "-m", "diffdsl", "export",
                           str(ROOT / "examples" / "det3.dd"), *args],
                          capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr


def test_errors_in_python_and_for_the_program(tmp_path):
    matrix = diffdsl.load(ROOT / "examples" / "matrix.dd")
    with pytest.raises(diffdsl.errors.UsageError, match="pick one"):
        export(matrix, c=tmp_path, kinds=["grad"])
    with pytest.raises(diffdsl.errors.UsageError, match="one element"):
        export(matrix, c=tmp_path, kinds=["hessian"], of="w")
    with pytest.raises(diffdsl.errors.UsageError, match="unknown derivative"):
        export(matrix, c=tmp_path, kinds=["gradient"])
    bad = tmp_path / "bad.dd"
    bad.write_text("input x\noutput y = x +\n")
    done = subprocess.run([sys.executable, "-m", "diffdsl", "export", str(bad), "--c",
                           str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and "bad.dd:2:" in done.stderr


def test_the_command_line_lists_what_it_wrote(tmp_path):
    done = subprocess.run([sys.executable, "-m", "diffdsl", "export",
                           str(ROOT / "examples" / "det2.dd"), "--grad", "--c", str(tmp_path),
                           "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith('"' + str(tmp_path / "det2.c") + '"]}')
    header = (tmp_path / "det2.h").read_text()
    assert "int det2_grad(const double *A, double *value, double *d_A);" in header


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(source=programs(mutate=False))
def test_random_programs(source):
    """Programs of the fuzzer's grammar (tests/fuzzing.py): the exported C's value and
    gradient of `y` against the API."""
    try:
        prog = diffdsl.compile(source)
        prog.derivative("grad", "y")
    except diffdsl.errors.DiffDSLError:
        assume(False)  # a program the language refuses is no export's business
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        export(prog, c=folder, kinds=["grad"], of="y", name="r")
        compile_all([compile_commands(folder, "r")])
        lib = ctypes.CDLL(str(folder / "libr_c.so"))
        for kind in ("value", "grad"):
            compare(lib, prog, "r", kind, "y", rows=2)
