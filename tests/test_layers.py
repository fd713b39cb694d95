"""The layout rules of DESIGN.md: import direction, light `import diffdsl`, a complete wheel.

Every module under `diffdsl/` has a layer (DESIGN.md, "Layout and import direction") and may
import only diffdsl modules of lower layers, wherever the import stands (function-local imports
count). The exceptions are that `backends/cpu.py` and `backends/cuda.py` may import
`backends/tape.py` beside them, and `__main__.py` runs `cli.py`. `from . import __version__`
imports the package's `__init__` (layer 7) like any other name from it. A new module fails
`test_every_module_has_a_layer` until it is placed in `LAYERS`.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "diffdsl"

# Module path (relative to diffdsl/, without .py) -> layer. `values` and `builtins` are
# helpers of `lower`: below it, above `ir`, `ops` and `errors`; `builtins` (and the two
# modules it gathers) works on the values of `values`, so it sits just above it. A package's
# `__init__` sits just above the modules it may gather.
LAYERS = {
    "errors": 0,
    "version": 0,
    "limits": 0.5,  # reads the environment; raises errors' LimitError
    "progress": 0.5,  # bars on stderr (tqdm when installed)
    "special": 0.75,  # libm's lgamma, digamma as a graph: for the op table
    "cache": 1,  # content-addressed kernels on disk: backends keep generated modules there
    "datafiles": 0.5,  # .npy and Zarr arrays read and written in pieces of rows
    "syntax": 1,
    "ops": 1,
    "rewrites": 1,  # the builder's identities, beside the op table
    "ufuncs": 1.5,  # each op as a NumPy function, from its row
    "colouring": 1,  # graph colouring and recovery on CSR index arrays (numpy only)
    "parse": 2,
    "ir": 2,
    "static": 2.25,  # builtins of static numbers, folded through the rows
    "values": 2.5,
    "builtins_common": 2.6,  # argument checks; scalar arithmetic that folds static operands
    "builtins_linalg": 2.7,  # dot, transpose, trace, minor, det, inv, solve, cholesky
    "builtins": 2.75,  # the table of builtins: elementwise, reductions, shapes, and the above
    "deepstack": 0,  # deep recursion on a thread with a large stack: lowering, SymPy
    "lower": 3.2,  # the state of a lowering and its dispatch to the rules of the modules below
    "lower_statements": 3.13,  # declarations and statements; loops and ifs
    "lower_calls": 3.13,  # calls: defs (memoised), builtins, derivatives, generators
    "lower_exprs": 3.12,  # expressions but calls
    "lower_names": 3.11,  # what a name means; suggestions for a misspelled one
    "lower_static": 3.11,  # indices, slice bounds and loop ranges, which must be static
    "lower_structure": 3.11,  # where each statement may stand
    "while_loop": 3.1,
    "inner_derivs": 3.1,  # grad(e, x) inside a program: autodiff's sweeps in the builder
    "autodiff": 3,
    "passes/*": 3,
    "passes/__init__": 3.5,
    "sympy_atoms": 3,  # constants and input symbols as SymPy
    "sympy_ops": 3,  # each op as SymPy, from its row
    "sparsity": 3.25,  # patterns from the graph, compressed derivative graphs (autodiff)
    "symbolic": 3.5,  # exports the derivative graphs autodiff makes
    "oracle": 3.75,  # SymPy's derivatives of an exported program beside ours
    "dot": 3,
    "backends/emit": 3,
    "backends/numba_text": 3,  # Numba's text of the rows: expressions, tape dispatch
    "backends/cudasim": 3,  # IEEE math for the CUDA simulator
    "backends/llvm": 3,  # the LLVM IR emitter: text from a graph
    "backends/native": 3,  # llvmlite: object code from text, loaded into the JIT
    "backends/numpy": 4,
    "backends/cpu": 4,
    "backends/cuda": 4,
    "backends/cuda_tape": 4,
    "backends/tape": 4,
    "backends/__init__": 4.5,
    "inputs": 4.5,  # checks values against a graph's inputs, for every backend
    "engine": 5,
    "plans": 5,  # graphs on disk by source text
    "domains": 3,  # where check draws points: intervals read from a graph
    "report": 4.9,  # check's report printed for people
    "check": 5,  # uses symbolic, autodiff and the numpy interpreter
    "objective": 5.5,  # a program as a function of a flat vector (duck-typed Program)
    "chunked": 5.5,  # Dask arrays: a kernel call per chunk (duck-typed Program)
    "sparse": 5.5,  # sparse Jacobians and Hessians of a (duck-typed) Program, by colouring
    "api": 6,
    "cli": 7,
    "cli_examples": 7,
    "cli_files": 7,  # chunked .npy and Zarr files for the command line
    "__main__": 7,
    "__init__": 7,
}

# Same-layer imports that DESIGN.md allows: the compiled backends use the tape beside them,
# and `python -m diffdsl` is the command line.
ALLOWED_SAME_LAYER = {
    ("__main__", "cli"),
    ("cli", "cli_examples"),
    ("cli", "cli_files"),
    ("backends/cpu", "backends/tape"),
    ("backends/cuda", "backends/tape"),
    ("backends/cuda", "backends/cuda_tape"),
    ("backends/cuda_tape", "backends/tape"),
}


def module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        names.append(path.relative_to(PACKAGE).with_suffix("").as_posix())
    return names


def layer_of(name: str):
    if name in LAYERS:
        return LAYERS[name]
    folder = name.rsplit("/", 1)[0] if "/" in name else None
    if folder and f"{folder}/*" in LAYERS and not name.endswith("__init__"):
        return LAYERS[f"{folder}/*"]
    return None


def is_module(name: str) -> bool:
    """Whether `name` (a path relative to diffdsl/) is a module or a package of diffdsl."""
    return (PACKAGE / f"{name}.py").is_file() or (PACKAGE / name / "__init__.py").is_file()


def as_target(parts: list[str]) -> str:
    """The module that dotted `parts` (below diffdsl) names: a package means its __init__."""
    name = "/".join(parts)
    if not parts:
        return "__init__"
    if (PACKAGE / name / "__init__.py").is_file():
        return f"{name}/__init__"
    return name


def imports_of(name: str) -> list[tuple[str, int, str]]:
    """The diffdsl modules that module `name` imports anywhere in it: (module, line, what)."""
    path = PACKAGE / f"{name}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name.split("/")[:-1]  # the package that holds the module, below diffdsl
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "diffdsl":
                    found.append((as_target(parts[1:]), node.lineno, alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(package):
                    raise AssertionError(f"{name}: relative import beyond diffdsl")
                base = package[: len(package) - (node.level - 1)]
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "diffdsl":
                parts = node.module.split(".")[1:]
            else:
                continue
            what = "." * node.level + (node.module or "")
            for alias in node.names:
                sub = parts + [alias.name]
                if is_module("/".join(sub)):
                    target = as_target(sub)  # `from . import ops`
                else:
                    target = as_target(parts)  # `from .ir import Graph`
                found.append((target, node.lineno, f"from {what} import {alias.name}"))
    return found


def test_every_module_has_a_layer():
    missing = [name for name in module_names() if layer_of(name) is None]
    assert not missing, f"modules with no layer in DESIGN.md's table (add them): {missing}"


def test_the_layer_table_knows_the_current_modules():
    names = module_names()
    for expected in ("errors", "ops", "ir", "lower", "values", "builtins", "api", "cli",
                     "__init__", "backends/numpy"):
        assert expected in names


@pytest.mark.parametrize("name", module_names())
def test_imports_go_down(name):
    own = layer_of(name)
    if own is None:
        pytest.fail(f"{name} has no layer")
    bad = []
    for target, line, what in imports_of(name):
        if target == name:
            continue
        theirs = layer_of(target)
        if theirs is None:
            bad.append(f"line {line}: `{what}` imports {target}, which has no layer")
        elif theirs > own or (theirs == own and (name, target) not in ALLOWED_SAME_LAYER):
            bad.append(f"line {line}: `{what}` imports {target} (layer {theirs}) "
                       f"from layer {own}")
    assert not bad, f"diffdsl/{name}.py: " + "; ".join(bad)


def test_import_parser_sees_relative_and_nested_imports(tmp_path, monkeypatch):
    """The checker itself: relative, parent-relative, absolute and function-local imports."""
    fake = tmp_path / "diffdsl"
    (fake / "backends").mkdir(parents=True)
    for name in ("__init__", "ir", "ops", "errors", "backends/__init__", "backends/numpy",
                 "backends/tape"):
        (fake / f"{name}.py").write_text("")
    (fake / "backends" / "cpu.py").write_text(
        "from ..ir import Graph\n"
        "from .. import ops\n"
        "from . import tape\n"
        "import diffdsl.errors\n"
        "def f():\n"
        "    from ..backends import numpy\n"
        "    from diffdsl import api_missing\n"
        "import numpy\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    found = [target for target, _, _ in imports_of("backends/cpu")]
    assert sorted(found) == sorted(["ir", "ops", "backends/tape", "errors", "backends/numpy",
                                    "__init__"])


def test_import_diffdsl_is_light():
    """DESIGN.md decision 8: Lark, SymPy and Numba load only when they are needed."""
    code = ("import diffdsl, sys; "
            "print([m for m in ('lark', 'sympy', 'numba') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"import diffdsl loads {result.stdout.strip()}"


def test_wheel_ships_the_grammar(tmp_path):
    """The wheel holds grammar/diffdsl.lark as diffdsl/grammar/diffdsl.lark."""
    # Build from a copy, so the build leaves nothing in the working tree.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis",
        ".ruff_cache", ".benchmarks", ".venv"))
    out = tmp_path / "dist"
    result = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out)],
                            cwd=src, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "diffdsl/grammar/diffdsl.lark" in names
    assert "diffdsl/__init__.py" in names
    assert "diffdsl/backends/numpy.py" in names
