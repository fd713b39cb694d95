"""What the command line asks of the API, as Python users have it too: `Program.check`,
`to_dot`, `output_name`, `symbolic_jacobian(simplify=True)`, `diffdsl.cache_info` and
`cache_clear`, and a `Program` that pickles as its source.

Expected values come from outside the code under test: closed forms (det(A)·inv(A)ᵀ),
counts read off the graphs, SymPy's own simplification, the files in the cache folder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import diffdsl
from diffdsl.cli import main
from diffdsl.graph import ops

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TWO_OUTPUTS = "input x[2]\ninput y\noutput s = x[0] * y + sin(x[1])\noutput v = [x[1] * y, x[0]]\n"


# check ---------------------------------------------------------------------------------------
def test_check_reports_every_output_and_input_as_json():
    prog = diffdsl.compile(TWO_OUTPUTS)
    report = prog.check(points=2)
    assert report["ok"] is True
    assert json.loads(json.dumps(report)) == dict(report)  # JSON-ready as it is
    for part in ("symbolic", "numeric"):
        assert {out: sorted(per) for out, per in report[part].items()} == \
            {"s": ["x", "y"], "v": ["x", "y"]}
    assert report["symbolic"]["v"]["x"]["elements"] == 4  # output (2,) by input (2,)
    assert {report.ranges[n]["from"] for n in ("x", "y")} == {"default"}


def test_check_finds_a_wrong_derivative(monkeypatch):
    wrong = dataclasses.replace(
        ops.OPS["sin"], pullback=lambda g, a, out, ct: (g.mul(ct, g.op("sin", a[0])),))
    monkeypatch.setitem(ops.OPS, "sin", wrong)
    report = diffdsl.compile(TWO_OUTPUTS, cache=False).check(points=2)
    assert report["ok"] is False
    assert report["symbolic"]["s"]["x"]["status"] == "mismatch"
    assert report["symbolic"]["s"]["y"]["status"] == "proven"  # sin does not reach y's
    assert report["numeric"]["s"]["x"]["ok"] is False


def test_check_draws_from_the_domain_given():
    prog = diffdsl.compile("input x\noutput y = acosh(x)\n")
    entry = prog.check(points=1).ranges["x"]
    assert entry["from"] == "program" and entry["low"][0] > 1  # acosh: above 1
    report = prog.check(points=1, domain={"x": (4.0, 9.0)})
    entry = report.ranges["x"]
    assert entry["from"] == "given" and entry["low"].tolist() == [4.0]
    assert entry["high"].tolist() == [9.0]


@pytest.mark.parametrize("options, words", [
    ({"points": 0}, "check needs points >= 1, got 0"),
    ({"domain": {"z": (0, 1)}}, "domain= names 'z', which is not an input"),
    ({"domain": {"x": (1, 1)}}, "expected (low, high) with low < high"),
    ({"domain": {"x": (0, float("inf"))}}, "both finite"),
])
def test_check_refuses_bad_arguments_in_python_words(options, words):
    prog = diffdsl.compile("input x\noutput y = x * x\n")
    with pytest.raises(diffdsl.UsageError, match=re.escape(words)):
        prog.check(**options)


# to_dot --------------------------------------------------------------------------------------
def _dot_counts(text: str) -> tuple[int, int]:
    """(boxes and ellipses drawn, arrows) in DOT text."""
    return len(re.findall(r"^\s+\w+ \[label=", text, re.M)), text.count(" -> ")


def test_to_dot_draws_every_node_and_argument():
    prog = diffdsl.compile(TWO_OUTPUTS, filename="two.dd")
    graph = prog.graph
    elements = sum(port.size for port in graph.outputs.values())  # 1 + 2 output boxes
    text = prog.to_dot()
    assert text.startswith('digraph "two.dd" {')
    assert _dot_counts(text) == (len(graph.nodes) + elements,
                                 sum(len(n.args) for n in graph.nodes) + elements)


def test_to_dot_of_one_output_and_of_the_gradient():
    prog = diffdsl.compile(TWO_OUTPUTS)
    only_s = prog.to_dot(of="s")
    assert 'label="s"' in only_s and 'label="v[0]"' not in only_s
    # s reads x[0], x[1], y: 3 inputs, 2 products/sin, a sum: fewer nodes than the whole
    assert _dot_counts(only_s)[0] < _dot_counts(prog.to_dot())[0]
    grad = prog.derivative("grad", "s")
    text = prog.to_dot(of="s", grad=True)
    assert _dot_counts(text)[0] == len(grad.nodes) + 1 + 2 + 1  # value, d:x[0..1], d:y
    for label in ("value", "d:x[0]", "d:x[1]", "d:y"):
        assert f'label="{label}"' in text
    with pytest.raises(diffdsl.UsageError, match="'w' is not an output"):
        prog.to_dot(of="w")


# output_name ---------------------------------------------------------------------------------
def test_output_name_picks_and_checks():
    assert diffdsl.load(EXAMPLES / "det3.dd").output_name() == "d"
    prog = diffdsl.compile(TWO_OUTPUTS)
    assert prog.output_name("v") == "v"
    with pytest.raises(diffdsl.UsageError, match="2 outputs"):
        prog.output_name()
    with pytest.raises(diffdsl.UsageError, match="'vv' is not an output"):
        prog.output_name("vv")


# symbolic formulas, simplified ---------------------------------------------------------------
def test_symbolic_jacobian_simplified_is_the_same_function():
    prog = diffdsl.compile("input x[2]\noutput f = [sin(x[0]) * cos(x[0]), x[0] * x[1]]\n")
    plain = prog.symbolic_jacobian()
    simple = prog.symbolic_jacobian(simplify=True)
    assert simple.of == "f" and simple.out_shape == (2,)
    x0 = sp.IndexedBase("x", shape=(2,), real=True)[0]  # an input's base has its shape
    assert simple["x"][0, 0] == sp.cos(2 * x0)  # cos² - sin², as SymPy simplifies it
    assert plain["x"][0, 0] != simple["x"][0, 0]
    for a, b in zip(sp.flatten(plain["x"].tolist()), sp.flatten(simple["x"].tolist()),
                    strict=True):
        assert sp.simplify(a - b) == 0
    grad = diffdsl.compile("input t\noutput y = sin(t) * cos(t)\n").symbolic_grad(simplify=True)
    assert grad["t"] == sp.cos(2 * sp.Symbol("t", real=True))


# the kernel cache ----------------------------------------------------------------------------
def test_cache_info_and_clear(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "cache"
    monkeypatch.setenv("DIFFDSL_CACHE_DIR", str(folder))
    assert diffdsl.cache_info()["entries"] == 0
    prog = diffdsl.load(EXAMPLES / "det3.dd", backend="cpu")
    prog.grad(A=np.eye(3))
    info = diffdsl.cache_info()
    marked = [p for p in folder.iterdir() if (p / "diffdsl-entry").is_file()]
    assert info["path"] == str(folder) and info["entries"] == len(marked) >= 2  # plan, kernel
    sizes = sum(f.stat().st_size for p in marked for f in p.rglob("*") if f.is_file())
    assert info["bytes"] == sizes
    assert main(["cache", "info", "--json"]) == 0  # the command says what the API says
    assert json.loads(capsys.readouterr().out) == info
    mine = folder / "notes"  # not diffdsl's: stays
    mine.mkdir()
    (mine / "kernel.py").write_text("# mine\n")
    assert diffdsl.cache_clear() == {"path": str(folder), "removed": len(marked)}
    assert diffdsl.cache_info()["entries"] == 0 and (mine / "kernel.py").is_file()


# pickling ------------------------------------------------------------------------------------
DET_GRAD = """
import pickle, sys
import numpy as np
prog = pickle.loads(sys.stdin.buffer.read())
A = np.array([[2.0, 0, 1], [1, 3, 2], [1, 1, 1.5]])
print(prog.dtype, prog.backend, prog.filename, prog.limits)
print(repr(prog.grad(A=A)["A"].tolist()))
"""


def test_a_program_pickles_as_its_source():
    prog = diffdsl.load(EXAMPLES / "det3.dd", backend="numpy", dtype="float32",
                        limits={"nodes": 123_456})
    sent = pickle.dumps(prog)
    assert len(sent) < len(prog.source) + 1000  # no graphs, no kernels
    done = subprocess.run([sys.executable, "-c", DET_GRAD], input=sent, capture_output=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    options, grad = done.stdout.decode().splitlines()
    assert options == f"float32 numpy {EXAMPLES / 'det3.dd'} {{'nodes': 123456}}"
    A = np.array([[2.0, 0, 1], [1, 3, 2], [1, 1, 1.5]])
    want = np.linalg.det(A) * np.linalg.inv(A).T  # the cofactor matrix
    np.testing.assert_allclose(eval(grad), want, rtol=1e-6)  # float32 arithmetic


def test_unpickling_compiles_once_per_process():
    prog = diffdsl.compile("input x\noutput y = x ** 3\n", filename="cube.dd")
    first = pickle.loads(pickle.dumps(prog))
    assert first is not prog and pickle.loads(pickle.dumps(prog)) is first
    assert first.grad(x=2.0)["x"] == 12.0
    other = pickle.loads(pickle.dumps(diffdsl.compile("input x\noutput y = x ** 3\n",
                                                      filename="cube.dd", dtype="float32")))
    assert other is not first and other.dtype == "float32"  # options are part of the program


def test_a_program_made_from_a_graph_pickles_its_graph():
    graph = diffdsl.compile("input x[2]\noutput y = x[0] * exp(x[1])\n").graph
    prog = diffdsl.Program(graph, filename="made.dd")
    again = pickle.loads(pickle.dumps(prog))
    assert again.graph.key() == graph.key() and again.source is None
    assert again.grad(x=[2.0, 0.0])["x"].tolist() == [1.0, 2.0]
