"""Import a generated Python module of kernels (the CUDA backend's; the CPU's kernels are LLVM
IR, backends/llvm.py): from its file in the cache, so Numba's `cache=True` keeps its machine
code, or from text in memory.
"""

from __future__ import annotations

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
