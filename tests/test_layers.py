"""The layout rules of DESIGN.md: import direction, light `import diffdsl`, a complete wheel.

Every module under `diffdsl/` has a layer (DESIGN.md, "Layout and import direction") and may
import only diffdsl modules of lower layers, wherever the import stands (function-local imports
count). The exceptions are that `backends/cpu.py` and `backends/cuda.py` may import
`backends/tape.py` beside them, and `__main__.py` runs `cli.py`. `from . import __version__`
imports the package's `__init__` (layer 7) like any other name from it. A new module fails
`test_every_module_has_a_layer` until it is placed in `LAYERS`.

The command line (`cli.py`, `cli_*.py`) goes further: it calls the API and the report modules
only (`CLI_MAY_IMPORT`), so whatever it needs from the modules below becomes part of the API.
"""

from __future__ import annotations

import ast
import fnmatch
import os
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
    "files": 0,  # files written whole or not at all
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
    "report_formulas": 3.6,  # SymPy's formulas printed; below oracle, whose dicts show as LaTeX
    "oracle": 3.75,  # SymPy's derivatives of an exported program beside ours; 50 digits
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
    "check": 5,  # uses symbolic, autodiff and the numpy interpreter
    "report": 5.1,  # check's report worded for people
    "objective": 5.5,  # a program as a function of a flat vector (duck-typed Program)
    "chunked": 5.5,  # Dask arrays: a kernel call per chunk (duck-typed Program)
    "sparse": 5.5,  # sparse Jacobians and Hessians of a (duck-typed) Program, by colouring
    "calls": 5.5,  # a derivative call's extra inputs and its results, for Program
    "api": 6,
    "report_results": 6.5,  # values, derivatives, sparse matrices, the cache: text and JSON
    "cli_examples": 6.6,  # the examples that end each command's --help
    "cli_specs": 6.6,  # --inputs, --seed, --domain values
    "cli_args": 6.7,  # the argument parser
    "cli_output": 6.7,  # stdout, --output .npz, graph -o
    "cli_files": 6.8,  # chunked .npy and Zarr files for the command line
    "cli_commands": 6.9,  # a function per command: the API called, the result printed
    "cli": 7,
    "__main__": 7,
    "__init__": 7,
}

# Same-layer imports that DESIGN.md allows: the compiled backends use the tape beside them,
# and `python -m diffdsl` is the command line.
ALLOWED_SAME_LAYER = {
    ("__main__", "cli"),
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


# What the command line may import: the API, the report modules, its own modules, and the few
# below them that know nothing of programs (errors, files, limits, progress bars, data files).
CLI_MAY_IMPORT = ("api", "report", "report_*", "cli", "cli_*", "errors", "files", "limits",
                  "progress", "version", "datafiles")


def is_cli(name: str) -> bool:
    return name == "cli" or name.startswith("cli_")


def past_the_api(name: str) -> list[str]:
    """The imports of command-line module `name` that reach past the API and the reports."""
    return [f"line {line}: `{what}` imports {target}"
            for target, line, what in imports_of(name)
            if not any(fnmatch.fnmatchcase(target, allowed) for allowed in CLI_MAY_IMPORT)]


@pytest.mark.parametrize("name", [n for n in module_names() if is_cli(n)])
def test_the_command_line_calls_the_api_and_the_reports_only(name):
    bad = past_the_api(name)
    assert not bad, (f"diffdsl/{name}.py reaches past the API: " + "; ".join(bad) +
                     " (make what it needs a function or method of api.py)")


def test_a_command_line_import_past_the_api_is_caught(tmp_path, monkeypatch):
    """The rule itself: an import planted in a copy of cli_commands.py, at the top or inside
    a function, is reported; the copy as it is passes."""
    fake = tmp_path / "diffdsl"
    fake.mkdir()
    for path in PACKAGE.glob("*.py"):
        (fake / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert past_the_api("cli_commands") == []
    text = (fake / "cli_commands.py").read_text(encoding="utf-8")
    (fake / "cli_commands.py").write_text(
        text + "\n\ndef planted():\n    from .autodiff import grad\n    from . import symbolic\n",
        encoding="utf-8")
    found = past_the_api("cli_commands")
    assert len(found) == 2 and "imports autodiff" in found[0] and "imports symbolic" in found[1]
    (fake / "cli_examples.py").write_text("from .cache import KernelCache\n", encoding="utf-8")
    assert past_the_api("cli_examples") == ["line 1: `from .cache import KernelCache` imports "
                                            "cache"]


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


def test_a_warm_command_line_run_is_light(tmp_path):
    """`diffdsl grad` run again (its plan and kernel in the cache) loads neither Lark, SymPy
    nor Numba: the command line imports no more than the API it calls."""
    code = ("import sys; from diffdsl import cli; "
            "status = cli.main(['grad', 'examples/det3.dd', "
            "'--inputs', 'A=[[2,0,1],[1,3,2],[1,1,1]]']); "
            "print([m for m in ('lark', 'sympy', 'numba') if m in sys.modules], file=sys.stderr); "
            "sys.exit(status)")
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(tmp_path))
    env.pop("DIFFDSL_BACKEND", None)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           cwd=ROOT, env=env, timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert runs[0].stdout == runs[1].stdout and "\u2202d/\u2202A" in runs[1].stdout
    assert runs[1].stderr.strip() == "[]", f"a warm run loads {runs[1].stderr.strip()}"


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
