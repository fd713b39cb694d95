"""The kernel cache: a content-addressed folder of kernels (DESIGN.md, decision 5).

A CPU entry is `ROOT/KEY/kernel.o` (object code) with `kernel.json` (its size, sha256 and the
scratch it needs), where KEY is the sha256 of the graph's canonical text, the dtype, the
target (CPU name and features) and the versions of diffdsl and llvmlite: loading it compiles
nothing. A CUDA entry is `ROOT/KEY/kernel.py`, a generated module whose machine code Numba
keeps beside it (`__pycache__`). Writes are
atomic (a temporary file, then a rename), so two processes building one kernel both succeed.
An entry whose text differs from what diffdsl would write now (corrupt, truncated, foreign)
is rewritten, never trusted. Where the folder cannot be written, kernels are built in memory
with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

ENV = "DIFFDSL_CACHE_DIR"
MODULE_FILE = "kernel.py"
OBJECT_FILE = "kernel.o"
META_FILE = "kernel.json"
PLAN_FILE = "plan.json"  # written by plans.py


def default_root() -> Path:
    """The platform's cache folder for diffdsl; `DIFFDSL_CACHE_DIR` overrides it."""
    override = os.environ.get(ENV)
    if override:
        return Path(override).expanduser()
    system = platform.system()
    if system == "Windows":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
        return base / "diffdsl" / "Cache"
    if system == "Darwin":
        return Path.home() / "Library" / "Caches" / "diffdsl"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "diffdsl"


def versions() -> str:
    import numba
    import numpy

    from .version import __version__
    return (f"diffdsl {__version__}; numba {numba.__version__}; numpy {numpy.__version__}; "
            f"python {sys.version_info.major}.{sys.version_info.minor}")


def kernel_key(graph_key: str, backend: str, dtype: str, target: str | None = None) -> str:
    """The entry's key; `target` (the CPU and code generator) replaces the Numba versions."""
    if target is None:
        target = versions()
    else:
        from .version import __version__
        target = f"diffdsl {__version__}; {target}"
    text = f"{target}\nbackend {backend}\ndtype {dtype}\ngraph {graph_key}"
    return hashlib.sha256(text.encode()).hexdigest()


class CacheUnavailable(Exception):
    """The cache folder cannot be used; the caller builds in memory."""


class KernelCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else default_root()

    def module_path(self, key: str, source: str) -> Path:
        """The path of the entry for `key`, holding exactly `source`; written if needed."""
        folder = self.root / key
        path = folder / MODULE_FILE
        try:
            if path.is_file() and path.read_text(encoding="utf-8") == source:
                return path
            if path.exists():
                # Corrupt or foreign: drop it with Numba's stale machine code.
                shutil.rmtree(folder / "__pycache__", ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
            write_atomic(path, source)
            return path
        except (OSError, UnicodeDecodeError) as exc:
            raise CacheUnavailable(
                f"{self.root}: {getattr(exc, 'strerror', None) or exc}") from exc

    def load_object(self, key: str) -> tuple[bytes, dict] | None:
        """Object code and its facts, or None when absent or damaged (then it is dropped)."""
        folder = self.root / key
        try:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            obj = (folder / OBJECT_FILE).read_bytes()
            if meta.get("sha256") == hashlib.sha256(obj).hexdigest():
                return obj, meta
        except FileNotFoundError:
            return None
        except (OSError, ValueError, AttributeError):
            pass
        self.drop(key)
        return None

    def store_object(self, key: str, obj: bytes, meta: dict) -> None:
        """Write an entry: the object first, its facts last, so a reader that finds the facts
        finds the object they describe (checked by its hash all the same)."""
        folder = self.root / key
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_atomic(folder / OBJECT_FILE, obj)
            facts = dict(meta, sha256=hashlib.sha256(obj).hexdigest(), bytes=len(obj))
            write_atomic(folder / META_FILE, json.dumps(facts))
        except OSError as exc:
            raise CacheUnavailable(
                f"{self.root}: {getattr(exc, 'strerror', None) or exc}") from exc

    def drop(self, key: str) -> None:
        """Remove an entry that failed to load, so the next build starts clean."""
        shutil.rmtree(self.root / key, ignore_errors=True)

    def entries(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir()
                      if any((p / f).is_file() for f in (MODULE_FILE, META_FILE, PLAN_FILE)))

    def info(self) -> dict:
        entries = self.entries()
        size = sum(f.stat().st_size for e in entries for f in e.rglob("*") if f.is_file())
        return {"path": str(self.root), "entries": len(entries), "bytes": size}

    def clear(self) -> int:
        """Remove every entry; only folders that hold a diffdsl kernel are touched."""
        entries = self.entries()
        for entry in entries:
            shutil.rmtree(entry, ignore_errors=True)
        return len(entries)


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` so that readers see the old file or the new one, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w",
                       encoding=None if isinstance(data, bytes) else "utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class CacheWarning(RuntimeWarning):
    """The kernel cache folder cannot be used; kernels are kept in memory."""


_warned: set = set()


def warn_in_memory(reason: str) -> None:
    """Warn once per process and reason: a run of many kernels says it one time."""
    if reason in _warned:
        return
    _warned.add(reason)
    warnings.warn(f"kernel cache unavailable ({reason}); building in memory "
                  f"(set {ENV} to a writable folder, or pass --no-cache)", CacheWarning,
                  stacklevel=3)
