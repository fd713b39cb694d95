"""Shared libraries of the JIT's own object code (`diffdsl export --shared`, `--llvm`).

A kernel's module is the LLVM emitter's text (llvm.py), compiled by the engine's compiler
(native.compile_ir: the same passes, the same code generator, for this CPU), with two
changes that let a C program link it: its row entry `diffdsl_rows` is renamed `NAME_rows`
(so that several kernels live in one library), and the two CPython builtins beside it,
which only a Python process can call, are left out. The system's C compiler links the
objects with the wrappers of c_api.py into one library.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import UsageError
from ..files import atomic_path
from ..graph.loops import has_regions
from . import llvm, native
from .cpu import code_size

# The emitter's entries a C program cannot call, and what they need of CPython; the entry
# that splits loops over the pool's threads is Python's too (llvm_spread).
_PYTHON_ENTRIES = ("define ptr @diffdsl_point(", "define ptr @diffdsl_batch(",
                   "define void @diffdsl_spread(", "define i64 @diffdsl_spread_bytes(")
_PYTHON_DECLARATIONS = ("@_Py_NoneStruct = external global i8", "declare void @Py_IncRef(ptr)")
SUFFIXES = {"linux": ".so", "darwin": ".dylib", "win32": ".dll"}


def library_suffix() -> str:
    return SUFFIXES.get(sys.platform, ".so")


def module_text(graph, name: str, dtype: str) -> tuple[str, int]:
    """The LLVM IR of `graph` with its row entry named `NAME_rows` and no CPython entries;
    the scratch it needs."""
    text, scratch = llvm.emit(graph, dtype, 0, header=name, straight=native.STRAIGHT)
    lines, skipping = [], False
    for line in text.splitlines():
        if line.startswith(_PYTHON_ENTRIES):
            skipping = True
        if not skipping and line not in _PYTHON_DECLARATIONS:
            lines.append(line)
        if skipping and line == "}":
            skipping = False
    text = "\n".join(lines) + "\n"
    if text.count("@diffdsl_rows(") != 1 or "Py_" in text or "diffdsl_point" in text:
        raise RuntimeError("the LLVM emitter's entries are not as the export expects")
    return text.replace("@diffdsl_rows(", f"@{name}_rows("), scratch


def object_code(graph, name: str, dtype: str) -> tuple[bytes, int]:
    """Object code of `module_text`, compiled as the engine compiles its kernels."""
    text, scratch = module_text(graph, name, dtype)
    return native.compile_ir(text, code_size(graph), loops=has_regions(graph)), scratch


def compiler() -> list[str]:
    """The C compiler: $CC (it may hold flags), else cc."""
    command = shlex.split(os.environ.get("CC", "") or "cc")
    if shutil.which(command[0]) is None:
        raise UsageError(f"no C compiler found ('{command[0]}') to link a shared library",
                         hint="install one (gcc or clang) or name it in $CC; --c writes C "
                              "source without one")
    return command


def link(objects: list[bytes], wrappers: str, header_name: str, header: str,
         out: Path) -> None:
    """`out`, a shared library of the object code `objects` and the C `wrappers` (which
    include `header_name`, whose text is `header`), linked by the system's C compiler."""
    cc = compiler()
    flags = ["-dynamiclib"] if sys.platform == "darwin" else ["-shared"]
    with tempfile.TemporaryDirectory(prefix="diffdsl-export-") as tmp:
        folder = Path(tmp)
        (folder / header_name).write_text(header, encoding="utf-8")
        (folder / "wrappers.c").write_text(wrappers, encoding="utf-8")
        paths = []
        for k, obj in enumerate(objects):
            paths.append(folder / f"kernel{k}.o")
            paths[-1].write_bytes(obj)
        built = folder / out.name
        command = [*cc, *flags, "-fPIC", "-O2", "-std=c99", "-o", str(built),
                   str(folder / "wrappers.c"), *map(str, paths), "-lm"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise UsageError(f"the C compiler could not link {out.name}: "
                             f"{(done.stderr or done.stdout).strip()[-2000:]}",
                             hint=f"the command was: {shlex.join(command)}")
        try:  # written whole, never over a library a running program has mapped
            with atomic_path(out) as target:
                shutil.copyfile(built, target)
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
