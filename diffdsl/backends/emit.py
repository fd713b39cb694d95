"""Generated Python modules of kernels (the CUDA backend's, and the tape interpreters; the CPU's
kernels are LLVM IR, backends/llvm.py): imported from their file in the kernel cache, so
Numba's `cache=True` keeps their machine code beside it, or built from text in memory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import types


def import_file(name: str, path) -> types.ModuleType:
    """Import a generated module from its file, so Numba can cache its machine code."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Numba's cache locator looks the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def module_in_memory(name: str, source: str) -> types.ModuleType:
    """The same module without a file: compiled in this process only, never cached."""
    module = types.ModuleType(name)
    exec(compile(source.replace("cache=True", "cache=False"), f"<{name}>", "exec"),
         module.__dict__)
    return module


def load_module(name: str, source: str, key: str | None, use=lambda module: module):
    """`use(module)` of the generated module `source`, imported as `name`.

    With a `key`, the module is the kernel cache's entry `key` (written if absent or damaged),
    and `use` runs on it there, so a first call that loads Numba's machine code does too: if
    anything fails, the entry is dropped and the module built in memory (the next process
    writes it afresh). With `key` None, or a cache folder that cannot be written (a warning
    says so once), the module is built in memory.
    """
    found = sys.modules.get(name)
    if found is not None:
        return use(found)
    if key is not None:
        from ..cache import CacheUnavailable, KernelCache, warn_in_memory
        try:
            return use(import_file(name, KernelCache().module_path(key, source)))
        except CacheUnavailable as exc:
            warn_in_memory(str(exc))
        except Exception:
            # Numba's files of the entry damaged while this run used them.
            sys.modules.pop(name, None)
            KernelCache().drop(key)
    return use(module_in_memory(name, source))


_interpreters: dict = {}  # (sha256 of the text, cache) -> module


def interpreter(kind: str, source: str, cache: bool) -> types.ModuleType:
    """A generated interpreter (the tapes'), made once per process: kept in the kernel cache,
    under the hash of its text, unless `cache` is False."""
    digest = hashlib.sha256(source.encode()).hexdigest()
    found = _interpreters.get((digest, cache))
    if found is None:
        key = None
        if cache:
            from ..cache import kernel_key
            key = kernel_key(digest, kind, "any")
        found = load_module(f"diffdsl_{kind}_{digest[:24]}", source, key)
        _interpreters[(digest, cache)] = found
    return found
