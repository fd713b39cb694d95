"""Every example exported (issue 24, item 3: "exported C and shared libraries agree with the
API to 1e-12 relative on every example"): for each `.dd` file under examples/ and each of
its outputs, the value and first derivatives (the gradient of a one-element output; the
Jacobian of any other, or a vjp where the program is big), and the Hessian of small programs,
as C compiled at -O2 and as the shared library of the engine's object code, both against the
API on three random rows.

Cost (CI): the C compiler takes most of it (gcc -O2 takes 1,000 to 6,000 lines of
C a second), so every file is exported first and compiled two at a time; Jacobians and
Hessians are left to programs of up to `HESSIAN_NODES` nodes (a big program's Hessian is
hundreds of thousands of lines of C); data examples are differentiated by their parameters,
not their data. tests/test_export.py holds the tests of every kind of derivative.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from exported import compare, compile_all, export_both, load

import diffdsl

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").rglob("*.dd"))
HESSIAN_NODES = 300
# The data examples: derivatives by the parameters (a gradient by the data is a gradient like
# any other, and as large as the data).
PARAMETERS = {"gmm": ["alpha", "mu", "q"], "kmeans": ["C"], "mlp": ["W1", "b1", "w2", "b2"]}
PARAMETERS.update({f"{name}_arrays": PARAMETERS[name] for name in ("gmm", "mlp")})
pytestmark = pytest.mark.skipif(shutil.which("cc") is None or sys.platform == "win32",
                                reason="needs a C compiler (cc)")


def _cases() -> list[tuple]:
    """(example, output, C name, kinds, wrt) for every output of every example."""
    cases = []
    for path in EXAMPLES:
        prog = diffdsl.load(path)
        wrt = PARAMETERS.get(path.stem) if path.parent.name == "data" else None
        for of, shape in prog.outputs.items():
            scalar = all(n == 1 for n in shape)
            small = wrt is None and len(prog.graph.nodes) <= HESSIAN_NODES
            kinds = ["grad"] if scalar else ["jacobian"] if small else ["vjp"]
            if scalar and small:
                kinds.append("hessian")
            name = re.sub(r"\W", "_", f"{path.parent.name}_{path.stem}_{of}")
            cases.append((path, of, name, kinds, wrt))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("examples")
    progs = {}
    commands = []
    for path, of, name, kinds, wrt in CASES:
        progs[path] = progs.get(path) or diffdsl.load(path)
        commands.append(export_both(progs[path], folder, name, kinds, of, wrt))
    compile_all(commands)
    return folder, progs


@pytest.mark.parametrize("path, of, name, kinds, wrt", CASES,
                         ids=[f"{c[0].relative_to(ROOT / 'examples')}:{c[1]}" for c in CASES])
def test_example_exports_agree_with_the_api(built, path, of, name, kinds, wrt):
    folder, progs = built
    for lib in load(folder, name):
        for kind in ["value", *kinds]:
            compare(lib, progs[path], name, kind, of, wrt, rows=3, seed=len(name))


def test_every_example_is_swept():
    assert {c[0] for c in CASES} == set(EXAMPLES) and len(EXAMPLES) >= 20
