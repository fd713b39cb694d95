"""The kernel engine: the LLVM emitter op by op, block fills and segments, the single-point
path, warm starts from the source-keyed plan, and kernels freed with their programs."""

from __future__ import annotations

import gc
import json
import math
import os
import re
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

import diffdsl
from diffdsl.backends import cpu, llvm
from diffdsl.graph.ir import Builder, Port
from diffdsl.graph.ops import OPS

ROOT = Path(__file__).resolve().parent.parent

# Values where ops misbehave if spelled wrong: signed zeros, infinities, NaN, domain edges.
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.25, 1e-300, 1e300, math.inf, -math.inf,
           math.nan, 0.9999999, 7.0]


def _op_program(name: str):
    row = OPS[name]
    b = Builder()
    args = [b.input("x", k) for k in range(row.arity)]
    out = b.op(name, *args)
    inputs = {"x": Port((row.arity,), tuple(args))}
    return diffdsl.Program(b.graph(inputs, {"y": Port((), (out,))}), cache=False)


def _grid(arity: int) -> np.ndarray:
    cols = np.meshgrid(*[np.array(SPECIAL)] * arity, indexing="ij")
    return np.stack([c.ravel() for c in cols], axis=-1)


@pytest.mark.parametrize("name", [n for n, r in OPS.items() if r.arity])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("tape", [False, True], ids=["llvm", "tape"])
def test_every_op_matches_the_interpreter_on_special_values(name, dtype, tape, monkeypatch):
    """Each row's `ll` spelling (and the tape's branch) against its NumPy spelling, NaN and
    signed zeros included."""
    if tape:
        monkeypatch.setattr(cpu, "TAPE_THRESHOLD", 0)
    prog = _op_program(name)
    with np.errstate(all="ignore"):
        X = _grid(OPS[name].arity).astype(dtype)  # 1e300 is inf in float32
        got = prog(x=X, backend="cpu", dtype=dtype)
        want = prog(x=X, backend="numpy", dtype=dtype)
    assert got.dtype == want.dtype == np.dtype(dtype)
    same_nan = np.isnan(got) == np.isnan(want)
    assert same_nan.all(), X[~same_nan]
    ok = np.isnan(want) | np.isclose(got, want, rtol=2e-6 if dtype == "float32" else 1e-14,
                                     atol=0)
    assert ok.all(), (X[~ok], got[~ok], want[~ok])
    exact = want == 0
    assert (np.signbit(got[exact]) == np.signbit(want[exact])).all()  # -0.0 stays -0.0


@pytest.mark.parametrize("name", ["floor", "ceil", "sign", "cbrt", "abs", "not"])
@pytest.mark.parametrize("tape", [False, True], ids=["module", "tape"])
def test_cuda_spellings_on_special_values(name, tape, monkeypatch):
    """The CUDA backend's own spellings (floor and ceil as floats, not Numba's integers),
    run by Numba's simulator: NaN, infinities, signed zeros and values past 2**63."""
    from diffdsl.backends import cuda
    if not cuda.available():
        pytest.skip("no numba.cuda (simulator or GPU)")
    if tape:
        monkeypatch.setattr(cuda, "TAPE_THRESHOLD", 0)
    prog = _op_program(name)
    X = _grid(1)
    with np.errstate(all="ignore"):
        got = np.asarray(prog(x=X, backend="cuda"))
        want = prog(x=X, backend="numpy")
    assert (np.isnan(got) == np.isnan(want)).all()
    ok = np.isnan(want) | np.isclose(got, want, rtol=1e-15, atol=0)
    assert ok.all(), (X[~ok], got[~ok], want[~ok])
    exact = want == 0
    assert (np.signbit(got[exact]) == np.signbit(want[exact])).all()


def test_every_op_has_an_llvm_spelling():
    for name, row in OPS.items():
        assert row.ll or name in ("input", "const"), name
        if row.ll:
            assert "{r}" in row.ll and all(f"{{{k}}}" in row.ll for k in range(row.arity))
            # temporaries are `{r}.` and one letter: the emitter's own names are `.ptr`
            assert set(re.findall(r"\{r\}\.(\w+)", row.ll)) <= set("abcdefghijklmnopqrstuvwxyz")


def test_emitted_text_is_plain_with_stable_names():
    prog = diffdsl.compile("input x\noutput y = sin(x) * x\n", cache=False)
    g = prog.derivative("grad")
    text, slots = cpu.emit(g, "float64", g.key())
    assert text.startswith(f"; diffdsl kernel {g.key()}\n")
    assert "%v1 = call double @llvm.sin.f64(double %v0)" in text
    assert "declare double @llvm.cos.f64(double) nounwind" in text
    assert slots == 1


@pytest.mark.parametrize("segment", [1, 2, 7, 1000])
def test_segments_and_slots_give_the_same_results(segment, monkeypatch):
    """Values crossing segments go through scratch slots; any cut gives the same numbers."""
    monkeypatch.setattr(llvm, "SEGMENT", segment)
    src = (ROOT / "examples" / "det3.dd").read_text()
    prog = diffdsl.compile(src, backend="cpu", cache=False)
    ref = diffdsl.compile(src, backend="numpy", cache=False)
    X = np.random.default_rng(segment).normal(size=(5, 3, 3))
    for x in (X, X[0]):
        np.testing.assert_allclose(prog.hessian(A=x)["A"]["A"], ref.hessian(A=x)["A"]["A"],
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [n for n, r in OPS.items() if r.arity])
def test_every_op_through_a_scratch_slot(name, monkeypatch):
    """One node a segment: each op's value crosses to the next segment through a slot, so
    its temporaries meet the emitter's own names (a clash was once a parse error)."""
    monkeypatch.setattr(llvm, "SEGMENT", 1)
    row = OPS[name]
    b = Builder()
    args = [b.input("x", k) for k in range(row.arity)]
    out = b.op("neg", b.op(name, *args))
    prog = diffdsl.Program(b.graph({"x": Port((row.arity,), tuple(args))},
                                   {"y": Port((), (out,))}), cache=False)
    X = _grid(row.arity)[:50]
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(prog(x=X, backend="cpu"), prog(x=X, backend="numpy"),
                                   rtol=1e-14, atol=0)


def test_constant_blocks_of_a_big_jacobian():
    """A Jacobian of a million elements, mostly constant: zeroed and copied as blocks."""
    prog = diffdsl.compile("input x[1000]\noutput y = x * 2\n", backend="cpu", cache=False)
    J = prog.jacobian(x=np.arange(1000.0))["x"]
    assert np.array_equal(J, 2 * np.eye(1000))
    table = diffdsl.compile("input x[70]\nconst c = [k + 1 for k in range(70)]\n"
                            "output y = [x[i] * c[j] for i in range(70) for j in range(70)]\n",
                            backend="cpu", cache=False)
    want = np.zeros((4900, 70))
    for i in range(70):
        want[i * 70:(i + 1) * 70, i] = np.arange(1.0, 71.0)
    assert np.array_equal(table.jacobian(x=np.ones(70))["x"], want)  # a table of constants


def test_single_points_take_arrays_in_place_and_python_floats():
    prog = diffdsl.compile("input x\ninput v[2]\noutput y = x * sum(v)\n", backend="cpu",
                           cache=False)
    v = np.array([1.0, 2.0])
    assert prog.grad(x=2.0, v=v) == {"x": 3.0, "v": pytest.approx([2.0, 2.0])}
    assert prog.grad(x=np.float64(2.0), v=[1, 2])["x"] == 3.0  # other types: the general path
    strided = np.array([1.0, 9.0, 2.0])[::2]
    assert prog.grad(x=2.0, v=strided)["x"] == 3.0  # not contiguous: converted, not misread
    g1 = prog.grad(x=1.0, v=v)["v"]
    g2 = prog.grad(x=5.0, v=v)["v"]
    assert g1 is not g2 and g1.tolist() == [1.0, 1.0]  # results are new arrays


def test_batch_outputs_are_written_once_into_new_arrays():
    prog = diffdsl.compile("input x[3]\ninput s\noutput y = x * s\n", backend="cpu",
                           cache=False)
    X = np.arange(12.0).reshape(4, 3)
    out = prog(x=X, s=2.0)
    assert out.shape == (4, 3) and np.array_equal(out, X * 2)
    assert not np.shares_memory(out, X)
    assert np.array_equal(prog(x=X.astype(np.float32), s=2.0), X * 2)  # converted once


def test_kernels_are_freed_with_their_programs():
    prog = diffdsl.compile("input x\noutput y = exp(x) * 3\n", backend="cpu", cache=False)
    assert prog.grad(x=0.0)["x"] == 3.0
    kernel = prog.kernel(prog.derivative("grad"))
    library = weakref.ref(kernel._lib)
    del prog, kernel
    gc.collect()
    assert library() is None


def test_many_programs_in_one_process():
    """Distinct kernels load and unload side by side (bench/engine.py runs 2,000 and measures
    the memory; 300 here keep the suite quick)."""
    x = np.array([0.5, 1.5])
    for k in range(300):
        prog = diffdsl.compile(f"input x[2]\noutput y = sum(x * {k})\n", backend="cpu",
                               cache=False)
        assert prog.grad(x=x)["x"].tolist() == [float(k), float(k)]


WARM = """
import json, sys
import numpy as np
import diffdsl
prog = diffdsl.load(sys.argv[1], backend="cpu")
g = prog.grad(A=np.arange(9.0).reshape(3, 3) ** 2)["A"]
print(json.dumps({"graphs": prog.stats.graphs_built, "kernels": prog.stats.kernels_built,
                  "numba": "numba" in sys.modules, "lark": "lark" in sys.modules,
                  "g": g.tolist()}))
"""


def _warm_run(cache_dir):
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(cache_dir))
    env.pop("DIFFDSL_BACKEND", None)
    done = subprocess.run([sys.executable, "-c", WARM, str(ROOT / "examples" / "det3.dd")],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_warm_process_parses_derives_and_compiles_nothing(tmp_path):
    cold = _warm_run(tmp_path)
    warm = _warm_run(tmp_path)
    assert cold["graphs"] == 2 and cold["kernels"] == 1
    assert warm["graphs"] == 0 and warm["kernels"] == 0
    assert not warm["numba"] and not warm["lark"]
    assert warm["g"] == cold["g"]
    for plan in tmp_path.rglob("plan.json"):
        plan.write_text('{"graphs": {"program": {"nodes": [["nope", 1]]}}}')  # damaged
    again = _warm_run(tmp_path)
    assert again["g"] == cold["g"] and again["graphs"] == 2


PORTS = """
import json, sys
import numpy as np
import diffdsl
prog = diffdsl.compile(sys.argv[1], backend="cpu")
x = np.linspace(0.5, 2.0, 70)
value, grads = prog.value_and("hessian_diagonal", {"x": x, "b": 1.5}, of="zeta")
out = prog.evaluate({"x": x, "b": 1.5})
print(json.dumps({"graphs": prog.stats.graphs_built, "order": list(out),
                  "ports": list(prog.derivative("hessian_diagonal", of="zeta").outputs),
                  "d": {k: v.tolist() for k, v in grads.items()}, "v": float(value)}))
"""


def test_a_plan_keeps_each_graph_as_it_was_written(tmp_path):
    """Several graphs in one plan entry (the program's, a derivative's), ports out of
    alphabetical order: a warm process reads them in their own order (a kernel from the
    cache takes its ports in that order) and computes the same."""
    source = ("input x[70]\ninput b\n"
              "output zeta = sum(sin(x[i] * b) ** 2 for i in range(70))\n"
              "output alpha = x * b\n")
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(tmp_path))
    env.pop("DIFFDSL_BACKEND", None)
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", PORTS, source], capture_output=True,
                              text=True, env=env, check=False)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout))
    cold, warm = runs
    assert cold["graphs"] >= 2 and warm["graphs"] == 0
    assert warm["order"] == cold["order"] == ["zeta", "alpha"]
    assert warm["ports"] == cold["ports"] and warm["ports"][0] == "value"
    assert warm["d"] == cold["d"] and warm["v"] == cold["v"]
