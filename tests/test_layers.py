"""The layout rules of DESIGN.md: import direction, light `import diffdsl`, a complete wheel.

`diffdsl/` holds a folder per stage of the pipeline and a few shared modules at its top. The
stages stand in an order (`FOLDERS`, lowest first): a module may import from the shared
modules and from stages below its own, never from a stage above it. Inside a folder, every
module has a layer (`LAYERS`) and may import only modules of lower layers, wherever the import
stands (function-local imports count). The exceptions are that `backends/cpu.py` and
`backends/cuda.py` may import `backends/tape.py` beside them, and `__main__.py` runs the
command line. A new module fails `test_every_module_has_a_layer` until it is placed in
`LAYERS`.

The command line (`cli/`) goes further: it calls the API and the report modules only
(`CLI_MAY_IMPORT`), so whatever it needs from the modules below becomes part of the API.
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

# The stages, lowest first. "" is the shared modules at the top of the package (errors,
# limits, files, the cache, ...), which every stage may use; "top" is the API and the
# package's own `__init__` and `__main__`, which stand above the stages they gather.
FOLDERS = ["", "graph", "language", "backends", "symbolic", "runtime", "api", "cli", "top"]

# Module path (relative to diffdsl/, without .py) -> layer, compared inside its folder. A
# package's `__init__` sits just above the modules it may gather.
LAYERS = {
    # shared modules at the top of the package
    "errors": 0,
    "version": 0,
    "files": 0,  # files written whole or not at all
    "deepstack": 0,  # deep recursion on a thread with a large stack: lowering, SymPy
    "limits": 0.5,  # reads the environment; raises errors' LimitError
    "progress": 0.5,  # bars on stderr (tqdm when installed)
    "datafiles": 0.5,  # .npy and Zarr arrays read and written in pieces of rows
    "cache": 1,  # content-addressed kernels on disk: backends keep generated modules there
    # graph/
    "graph/special": 0.75,  # libm's lgamma, digamma as a graph: for the op table
    "graph/ops": 1,
    "graph/rewrites": 1,  # the builder's identities, beside the op table
    "graph/colouring": 1,  # graph colouring and recovery on CSR index arrays (numpy only)
    "graph/ufuncs": 1.5,  # each op as a NumPy function, from its row
    "graph/region": 1.75,  # the attribute of a region node: a loop kept as a loop
    "graph/verify": 1.9,  # well-formed graphs: what backends and builders check
    "graph/ir": 2,
    "graph/loops": 2.75,  # regions: built, unrolled, inlined, differentiated
    "graph/hoist": 2.76,  # work a loop repeats in every iteration, done once before it
    "graph/ports": 2.5,  # derivative graphs' port names; which output and inputs
    "graph/stencils": 2.78,  # gradients of inputs read at overlapping windows: gathered
    "graph/wholes": 2.8,  # gradients with respect to inputs read whole: kept whole
    "graph/loop_sweeps": 2.9,  # derivatives of regions: regions over the body's derivative
    "graph/unread": 2.84,  # loop outputs nothing reads, dropped from their bodies
    "graph/share_sums": 2.85,  # a gradient's loop of sums run forwards once
    "graph/reroll": 2.87,  # a gradient's adds of two loops' values: a loop again
    "graph/fuse": 2.86,  # two loops over the same iterations as one (a gradient, its tangent)
    "graph/shared_part": 2.1,  # what a batch's rows share, split off to run once
    "graph/checkpoints": 2.91,  # a scan's pullback in segments, from checkpoints
    "graph/scan_sweeps": 2.92,  # derivatives of scans: a scan backwards over stored states
    "graph/reach": 2.05,  # what a forward sweep from seeds reaches: users listed once
    "graph/sweeps": 2.95,  # the reverse and forward sweeps, with select guards
    "graph/autodiff": 3,
    "graph/dot": 3,
    "graph/pattern_walk": 3.2,  # dependence and Hessian pairs, loops walked once
    "graph/sparsity": 3.25,  # patterns from the graph, compressed derivative graphs
    "graph/__init__": 4,
    # language/
    "language/syntax": 1,
    "language/numbers": 1.2,  # long array literals of numbers, read in bulk
    "language/postlex": 1.2,  # the grammar's post-lexer: newlines, `max`
    "language/lalr": 1.3,  # the parser's fast path on Lark's tables
    "language/parse": 2,
    "language/static": 2.25,  # builtins of static numbers, folded through the rows
    "language/loop_index": 2.4,  # the variable of a loop kept as a loop
    "language/values": 2.5,
    "language/builtins/common": 2.6,  # argument checks; scalar arithmetic of static operands
    "language/builtins/linalg": 2.7,  # dot, transpose, trace, minor, det, inv, solve, ...
    "language/builtins/eigen": 2.71,  # eigvalsh, eigh: Jacobi sweeps written out
    "language/builtins/expm": 2.72,  # expm: scaling and squaring, Pade 13
    "language/builtins/table": 2.75,  # the table: elementwise, reductions, shapes, the above
    "language/builtins/__init__": 2.8,
    "language/lower/bindings": 3.05,  # the bindings grad(e, x) differentiates by, tagged
    "language/lower/wholes": 3.104,  # inputs read in place by loops: one array node
    "language/lower/regions": 3.105,  # loops kept as loops: bodies lowered once
    "language/lower/mapped": 3.1052,  # comprehensions kept as loops, their rows fused
    "language/lower/padded": 3.1053,  # vectors whose tail is one value (zeros(n) filled in)
    "language/lower/stream_reads": 3.1055,  # A[i, ...] in a body: a stream's window
    "language/lower/rows": 3.106,  # array expressions over inputs read in place, by rows
    "language/lower/scans": 3.107,  # `for` loops kept as loops: a carried state
    "language/lower/derivatives": 3.1,  # grad(e, x) inside a program: autodiff's sweeps
    "language/lower/while_loop": 3.108,
    "language/lower/names": 3.11,  # what a name means; suggestions for a misspelled one
    "language/lower/indices": 3.11,  # indices, slice bounds and loop ranges (static)
    "language/lower/structure": 3.11,  # where each statement may stand
    "language/lower/exprs": 3.12,  # expressions but calls
    "language/lower/statements": 3.13,  # declarations and statements; loops and ifs
    "language/lower/axes": 3.125,  # keyword arguments: axis= of the reductions
    "language/lower/calls": 3.135,  # calls: defs (memoised), builtins, derivatives, generators
    "language/lower/__init__": 3.2,  # the state of a lowering and its dispatch to the rules
    "language/__init__": 4,
    # backends/
    "backends/emit": 3,
    "backends/numba_text": 3,  # Numba's text of the rows: expressions, tape dispatch
    "backends/cudasim": 3,  # IEEE math for the CUDA simulator
    "backends/llvm_powers": 2.89,  # powers of a loop's index as running products
    "backends/llvm_loops": 2.9,  # a region as a loop of LLVM IR calling its body
    "backends/llvm_gather": 2.85,  # a loop's scattered stream gathered before it runs
    "backends/llvm_lanes": 2.95,  # short loops run several iterations at once
    "backends/llvm_blocks": 2.89,  # values copied in blocks at a step (memcpy loops)
    "backends/llvm_cold": 2.89,  # code outside the loops left unoptimised
    "backends/llvm_vector": 2.9,  # libm calls the loop vectoriser may widen (libmvec)
    "backends/llvm_entries": 2.9,  # a kernel's entries: the row loop and CPython builtins
    "backends/llvm_spread": 2.91,  # a long loop split over threads in one evaluation
    "backends/llvm_segment": 2.92,  # one segment of a graph as an LLVM function's body
    "backends/llvm": 3,  # the LLVM IR emitter: text from a graph
    "backends/native": 3,  # llvmlite: object code from text, loaded into the JIT
    "backends/pool": 3.5,  # threads that spin between a batch's slices
    "backends/pool_ir": 2.9,  # the pool's machine code as LLVM IR text
    "backends/numpy": 4,
    "backends/c_loops": 2.95,  # a region as a C loop calling its body
    "backends/c": 3.1,  # C99 source of a graph, mirroring the LLVM emitter
    "backends/c_api": 3.2,  # exported functions' header and wrappers
    "backends/shared": 4.1,  # the JIT's object code as a shared library
    "backends/cpu": 4,
    "backends/cuda": 4,
    "backends/cuda_tape": 4,
    "backends/tape": 4,
    "backends/__init__": 4.5,
    # symbolic/
    "symbolic/atoms": 3,  # constants and input symbols as SymPy
    "symbolic/ops": 3,  # each op as SymPy, from its row
    "symbolic/domains": 3,  # where check draws points: intervals read from a graph
    "symbolic/export": 3.5,  # exports the derivative graphs autodiff makes
    "symbolic/loop_formulas": 3.52,  # a Sum without folding; an iteration put in, once each
    "symbolic/sums": 3.55, "symbolic/lines": 3.58,  # loops kept as Sums; runs as one line
    "symbolic/formulas": 3.6,  # SymPy's formulas printed; below oracle (LaTeX of its dicts)
    "symbolic/oracle": 3.75,  # SymPy's derivatives of an exported program beside ours
    "symbolic/check": 5,  # uses export, autodiff and the numpy interpreter
    "symbolic/report": 5.1,  # check's report worded for people
    "symbolic/__init__": 6,
    # runtime/
    "runtime/inputs": 4.5,  # checks values against a graph's inputs, for every backend
    "runtime/engine": 5,
    "runtime/plans": 5,  # graphs on disk by source text
    "runtime/objective": 5.5,  # a program as a function of a flat vector (duck-typed Program)
    "runtime/chunked": 5.5,  # Dask arrays: a kernel call per chunk (duck-typed Program)
    "runtime/sparse": 5.5,  # sparse Jacobians and Hessians of a (duck-typed) Program
    "runtime/calls": 5.5,  # a derivative call's extra inputs and its results, for Program
    "runtime/bridge": 5.5,  # a program's output as an op of PyTorch or JAX, and its derivatives
    "runtime/xla_call": 5.5,  # a CPU kernel as an XLA foreign function (an FFI handler in IR)
    "runtime/__init__": 6,
    # the API
    "api": 6,
    "export": 6.1,  # C source, shared libraries and LLVM IR of a program (duck-typed Program)
    # cli/
    "cli/results": 6.5,  # values, derivatives, sparse matrices, the cache: text and JSON
    "cli/examples": 6.6,  # the examples that end each command's --help
    "cli/specs": 6.6,  # --inputs, --seed, --domain values
    "cli/args": 6.7,  # the argument parser
    "cli/output": 6.7,  # stdout, --output .npz, graph -o
    "cli/files": 6.8,  # chunked .npy and Zarr files for the command line
    "cli/commands": 6.9,  # a function per command: the API called, the result printed
    "cli/main": 7,  # exit statuses and messages for every way a run ends
    "cli/__init__": 7.5,
    # the package itself
    "__main__": 8,
    "__init__": 8,
    "torch": 7,  # the PyTorch bridge: imports torch, so never imported by the package
    "jax": 7,  # the JAX bridge: imports jax, likewise
}

# Same-layer imports that DESIGN.md allows: the compiled backends use the tape beside them,
# and `python -m diffdsl` is the command line.
ALLOWED_SAME_LAYER = {
    ("__main__", "cli/__init__"),
    ("backends/cpu", "backends/tape"),
    ("backends/cuda", "backends/tape"),
    ("backends/cuda", "backends/cuda_tape"),
    ("backends/cuda_tape", "backends/tape"),
}


def folder_of(name: str) -> str:
    """The stage that module `name` belongs to: its first folder, or "" for a shared module."""
    if name in ("api", "export"):
        return "api"
    if name in ("__init__", "__main__", "torch", "jax"):  # the bridges stand beside the API
        return "top"
    return name.split("/", 1)[0] if "/" in name else ""


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
    for expected in ("errors", "graph/ops", "graph/ir", "language/lower/__init__",
                     "language/values", "language/builtins/table", "api", "cli/main",
                     "__init__", "backends/numpy"):
        assert expected in names


def test_every_folder_is_a_stage():
    folders = {folder_of(name) for name in module_names()}
    assert folders <= set(FOLDERS), folders - set(FOLDERS)


def test_no_file_is_long():
    """A module stays readable in one sitting: about 420 lines at most."""
    long = {name: n for name in module_names()
            if (n := len((PACKAGE / f"{name}.py").read_text(encoding="utf-8").splitlines()))
            > 420}
    assert not long, f"split these modules: {long}"


def upward_imports(name: str) -> list[str]:
    """The imports of module `name` that run up: to a later stage in `FOLDERS`, or inside its
    own folder to a layer not below its own."""
    own = layer_of(name)
    bad = []
    for target, line, what in imports_of(name):
        if target == name:
            continue
        theirs = layer_of(target)
        if theirs is None:
            bad.append(f"line {line}: `{what}` imports {target}, which has no layer")
            continue
        mine, other = FOLDERS.index(folder_of(name)), FOLDERS.index(folder_of(target))
        if other > mine:
            bad.append(f"line {line}: `{what}` imports {target}, in stage "
                       f"'{folder_of(target)}/' above this one ('{folder_of(name)}/')")
        elif other == mine and (theirs > own or (
                theirs == own and (name, target) not in ALLOWED_SAME_LAYER)):
            bad.append(f"line {line}: `{what}` imports {target} (layer {theirs}) "
                       f"from layer {own}")
    return bad


@pytest.mark.parametrize("name", module_names())
def test_imports_go_down(name):
    if layer_of(name) is None:
        pytest.fail(f"{name} has no layer")
    bad = upward_imports(name)
    assert not bad, f"diffdsl/{name}.py: " + "; ".join(bad)


def test_an_import_up_a_folder_is_caught(tmp_path, monkeypatch):
    """The rule itself, on a copy of the package: graph/autodiff.py importing the language (a
    stage above it), at the top or inside a function, is reported; the copy as it is passes;
    an import of a shared module at the top of the package is fine."""
    fake = tmp_path / "diffdsl"
    shutil.copytree(PACKAGE, fake, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert upward_imports("graph/autodiff") == []
    path = fake / "graph" / "autodiff.py"
    path.write_text(path.read_text(encoding="utf-8") +
                    "\n\ndef planted():\n    from ..language.lower import lower\n"
                    "    from ..runtime import engine\n    from .. import limits\n",
                    encoding="utf-8")
    found = upward_imports("graph/autodiff")
    assert len(found) == 2, found
    assert "stage 'language/' above this one ('graph/')" in found[0]
    assert "stage 'runtime/' above this one" in found[1]


# What the command line may import: the API, the report modules, its own modules, and the few
# below them that know nothing of programs (errors, files, limits, progress bars, data files).
CLI_MAY_IMPORT = ("api", "export", "symbolic/report", "symbolic/formulas", "cli/*", "errors",
                  "files", "limits", "progress", "version", "datafiles")


def is_cli(name: str) -> bool:
    return folder_of(name) == "cli"


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
    """The rule itself: an import planted in a copy of cli/commands.py, at the top or inside
    a function, is reported; the copy as it is passes."""
    fake = tmp_path / "diffdsl"
    shutil.copytree(PACKAGE, fake, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert past_the_api("cli/commands") == []
    text = (fake / "cli" / "commands.py").read_text(encoding="utf-8")
    (fake / "cli" / "commands.py").write_text(
        text + "\n\ndef planted():\n    from ..graph.autodiff import grad\n"
        "    from .. import symbolic\n", encoding="utf-8")
    found = past_the_api("cli/commands")
    assert len(found) == 2, found
    assert "imports graph/autodiff" in found[0] and "imports symbolic/__init__" in found[1]
    (fake / "cli" / "examples.py").write_text("from ..cache import KernelCache\n",
                                              encoding="utf-8")
    assert past_the_api("cli/examples") == ["line 1: `from ..cache import KernelCache` imports "
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
    for stage in ("graph", "language", "language/lower", "language/builtins", "symbolic",
                  "runtime", "cli"):
        assert f"diffdsl/{stage}/__init__.py" in names
