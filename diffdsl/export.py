"""A program and its derivatives taken out of Python: C source, a shared library, LLVM IR.

    from diffdsl.export import export
    export(diffdsl.load("det3.dd"), c="out", kinds=["grad", "hessian"])

writes `out/det3.h` and `out/det3.c`: C99 that needs only the C library and libm, with
`det3_value`, `det3_grad` and `det3_hessian` (and their `_batch` and `_rows` forms) as the
header documents them (backends/c_api.py). `shared="libdet3.so"` links the engine's own
object code for this CPU into a library with the same header beside it; `llvm="dir"` writes
the LLVM IR of each function, the header and the wrappers, from which `clang -shared` makes
that library. `diffdsl export` is the command line's door to it (docs/export.md).
"""

from __future__ import annotations

from pathlib import Path

from .errors import UsageError
from .files import write_atomic

KINDS = ("grad", "jacobian", "hessian", "hessian_diagonal", "vjp", "jvp", "hvp")
_DOCS = {
    "grad": "the value of output '{of}' and its gradient by {wrt} (d_X: d {of} / dX)",
    "jacobian": "the value of output '{of}' and its Jacobian by {wrt} (d_X: shape of '{of}' "
                "+ shape of X)",
    "hessian": "the value of output '{of}' and its Hessian by {wrt} (d_X_Y: d2 {of} / dX dY, "
               "shape of X + shape of Y)",
    "hessian_diagonal": "the value of output '{of}' and the diagonal of its Hessian by {wrt} "
                        "(d_X: d2 {of} / dX2 element by element)",
    "vjp": "the value of output '{of}' and seed (its shape) times its Jacobian by {wrt}",
    "jvp": "the value of output '{of}' and its Jacobian times the tangents t_X of {wrt}",
    "hvp": "the value of output '{of}' and its Hessian by {wrt} times the tangents t_X",
}


def export(program, *, c=None, shared=None, llvm=None, kinds=(), of: str | None = None,
           wrt=None, name: str | None = None, dtype: str | None = None) -> list[Path]:
    """Write the program's value and the derivatives `kinds` (of `KINDS`) of output `of` by
    inputs `wrt` (all by default) as C source into folder `c`, as the shared library `shared`
    (a path; without a suffix, the platform's: .so, .dylib, .dll) and as LLVM IR into folder
    `llvm`; the files written. Functions are named NAME_value, NAME_grad, ...: `name`, by
    default the program file's name as a C identifier. The numbers are `dtype` (the
    program's by default: float64 is C's double, float32 its float)."""
    from .backends import c as c_source
    from .backends import c_api
    if c is None and shared is None and llvm is None:
        raise UsageError("export needs somewhere to write: --c OUTDIR, --shared LIBRARY or "
                         "--llvm OUTDIR (in Python: c=, shared=, llvm=)",
                         hint="e.g. diffdsl export f.dd --grad --c out")
    dtype = program.dtype if dtype is None else dtype
    if dtype not in c_source.TYPES:
        raise UsageError(f"unknown dtype '{dtype}'; choose float64 or float32")
    name = c_api.check_name(name) if name is not None else \
        c_api.c_identifier(Path(program.filename).stem)
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    functions = _functions(program, kinds, of, wrt, name)
    source = Path(program.filename).name
    written = []
    if c is not None:
        written += _write_c(functions, Path(c), name, dtype, source)
    if shared is not None:
        written += _write_shared(functions, Path(shared), name, dtype, source)
    if llvm is not None:
        written += _write_llvm(functions, Path(llvm), name, dtype, source)
    return written


def _functions(program, kinds: list[str], of, wrt, name: str) -> list:
    from .backends.c_api import Function
    for kind in kinds:
        if kind not in KINDS:
            raise UsageError(f"unknown derivative '{kind}'; choose from {', '.join(KINDS)}")
    outputs = ", ".join(f"'{o}'" for o in program.graph.outputs)
    functions = [Function(f"{name}_value", program.graph, f"the outputs {outputs}")]
    for kind in dict.fromkeys(kinds):
        graph = program.derivative(kind, of, wrt)
        chosen = program.output_name(of)
        names = wrt if wrt is not None else list(program.graph.inputs)
        names = [names] if isinstance(names, str) else list(names)
        doc = _DOCS[kind].format(of=chosen, wrt=", ".join(names))
        functions.append(Function(f"{name}_{kind}", graph, doc))
    return functions


def _ready(folder: Path) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make the folder {folder}: {exc.strerror or exc}") from None
    return folder


def _write(path: Path, text: str) -> Path:
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def _header(functions, name: str, dtype: str, source: str, scratches: list[int]) -> str:
    from .backends import c_api
    parts = [c_api.declarations(fn, dtype, s) for fn, s in zip(functions, scratches,
                                                                 strict=True)]
    return c_api.header(f"DIFFDSL_{name.upper()}_H", source, dtype, parts)


def _preamble(name: str, what: str) -> list[str]:
    return [f"/* {what} Generated by diffdsl export: do not edit. */", "",
            f'#include "{name}.h"', "", "#include <math.h>", "#include <stdlib.h>",
            "#include <string.h>", ""]


def _write_c(functions, folder: Path, name: str, dtype: str, source: str) -> list[Path]:
    from .backends import c as c_source
    from .backends import c_api
    kernels, scratches, used = [], [], []
    for fn in functions:
        text, scratch, helpers = c_source.kernel(fn.graph, fn.name, dtype)
        kernels.append(text)
        scratches.append(scratch)
        used += helpers
    build = f"cc -O2 -std=c99 -c {name}.c (a program using it: cc -O2 main.c {name}.c -lm)"
    body = _preamble(name, f"{source} as C99 (libm only). Build: {build}.")
    body += [c_source.helpers(used, dtype), *kernels]
    body += [c_api.wrappers(fn, dtype, s) for fn, s in zip(functions, scratches, strict=True)]
    folder = _ready(folder)
    header = _header(functions, name, dtype, source, scratches)
    return [_write(folder / f"{name}.h", header),
            _write(folder / f"{name}.c", "\n".join(body))]


def _objects(functions, dtype: str):
    from .backends import shared as shared_lib
    return [shared_lib.object_code(fn.graph, fn.name, dtype) for fn in functions]


def _api_source(functions, name: str, dtype: str, scratches: list[int], what: str) -> str:
    from .backends import c_api
    return "\n".join(_preamble(name, what) + [
        c_api.wrappers(fn, dtype, s) for fn, s in zip(functions, scratches, strict=True)])


def _write_shared(functions, path: Path, name: str, dtype: str, source: str) -> list[Path]:
    from .backends import shared as shared_lib
    suffix = shared_lib.library_suffix()
    if path.suffix in shared_lib.SUFFIXES.values() and path.suffix != suffix:
        raise UsageError(f"a shared library here is named {suffix}, not {path.suffix}: {path}",
                         hint=f"name it {path.with_suffix(suffix).name}, or leave the suffix "
                              "out and it is added")
    if path.is_dir() or path.name in ("", ".", ".."):
        raise UsageError(f"{path} is a folder; --shared names the library file",
                         hint=f"e.g. {path / ('libNAME' + suffix)}")
    if path.suffix != suffix:
        path = path.with_name(path.name + suffix)
    built = _objects(functions, dtype)
    scratches = [s for _, s in built]
    header = _header(functions, name, dtype, source, scratches)
    wrappers = _api_source(functions, name, dtype, scratches, "Wrappers of the kernels.")
    _ready(path.parent)
    shared_lib.link([obj for obj, _ in built], wrappers, f"{name}.h", header, path)
    return [_write(path.parent / f"{name}.h", header), path]


def _write_llvm(functions, folder: Path, name: str, dtype: str, source: str) -> list[Path]:
    from .backends import shared as shared_lib
    texts = [shared_lib.module_text(fn.graph, fn.name, dtype) for fn in functions]
    scratches = [s for _, s in texts]
    folder = _ready(folder)
    build = (f"clang -O2 -shared -fPIC -o lib{name}{shared_lib.library_suffix()} "
             f"{name}_api.c {' '.join(f'{fn.name}.ll' for fn in functions)} -lm")
    written = [_write(folder / f"{name}.h", _header(functions, name, dtype, source,
                                                    scratches)),
               _write(folder / f"{name}_api.c", _api_source(
                   functions, name, dtype, scratches, f"Wrappers of the kernels in "
                   f"{name}_*.ll. Build: {build}."))]
    for fn, (text, _) in zip(functions, texts, strict=True):
        written.append(_write(folder / f"{fn.name}.ll", text))
    return written
