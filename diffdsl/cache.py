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

Every entry folder holds a marker file, `diffdsl-entry`, whose text names diffdsl and the
entry's own key (the folder's name). `cache clear` removes only folders whose marker says so:
a folder the user put there, even one holding a `kernel.py`, is not diffdsl's to delete.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import pickletools
import platform
import shutil
import sys
import warnings
from pathlib import Path

from .files import write_atomic

ENV = "DIFFDSL_CACHE_DIR"
MODULE_FILE = "kernel.py"
OBJECT_FILE = "kernel.o"
META_FILE = "kernel.json"
PLAN_FILE = "plan.json"  # written by plans.py
MARKER_FILE = "diffdsl-entry"
MARKER_TEXT = "diffdsl cache entry {key}\n"


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
            if (not _in_the_way(folder) and _holds(path, source.encode("utf-8"))
                    and self.owns(folder)):
                if not _numba_files_load(folder / "__pycache__"):
                    # Numba raises on a damaged index or data file instead of recompiling:
                    # its machine code goes, and it compiles and writes it afresh.
                    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
                return path
        except OSError:
            pass  # unreadable: repaired below like any other damage
        # Absent, corrupt or foreign (any part of it): start the entry afresh, so Numba's
        # stale machine code in `__pycache__` goes with it.
        self.drop(key)
        self._write_entry(key, [(MODULE_FILE, source)])
        return path

    def load_object(self, key: str) -> tuple[bytes, dict] | None:
        """Object code and its facts, or None when absent or damaged (then it is dropped)."""
        folder = self.root / key
        if not os.path.lexists(folder):
            return None
        if _in_the_way(folder):
            self.drop(key)
            return None
        try:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            obj = (folder / OBJECT_FILE).read_bytes()
            if (isinstance(meta, dict) and meta.get("sha256") == hashlib.sha256(obj).hexdigest()
                    and self.owns(folder)):
                return obj, meta
        except FileNotFoundError:
            # Absent, or another process is writing it (its facts come last): not damage.
            # Whatever stands in the way of the write is dropped by `_write_entry`.
            return None
        except (OSError, ValueError):
            pass  # not UTF-8, not JSON, a folder for a file: damage
        self.drop(key)
        return None

    def store_object(self, key: str, obj: bytes, meta: dict) -> None:
        """Write an entry: the object first, its facts last, so a reader that finds the facts
        finds the object they describe (checked by its hash all the same)."""
        facts = dict(meta, sha256=hashlib.sha256(obj).hexdigest(), bytes=len(obj))
        self._write_entry(key, [(OBJECT_FILE, obj), (META_FILE, json.dumps(facts))])

    def store_file(self, key: str, name: str, data: str | bytes) -> None:
        """Write one file of an entry (a plan), marking the entry as diffdsl's."""
        self._write_entry(key, [(name, data)])

    def _write_entry(self, key: str, files: list) -> None:
        """Write `files` into the entry, in order, with its marker. Whatever stands in the way
        (a file where the folder goes, a folder where a file goes) is damage: the entry is
        dropped and written once more; a second failure means the folder is unusable."""
        for attempt in (1, 2):
            try:
                folder = self.root / key
                if _in_the_way(folder):  # never write through a link, nor into a file
                    self.drop(key)
                folder.mkdir(parents=True, exist_ok=True)
                write_atomic(folder / MARKER_FILE, MARKER_TEXT.format(key=key))
                for name, data in files:
                    write_atomic(folder / name, data)
                return
            except OSError as exc:
                if attempt == 2 or not self.root.is_dir():
                    raise CacheUnavailable(
                        f"{self.root}: {getattr(exc, 'strerror', None) or exc}") from exc
                self.drop(key)

    def owns(self, folder: Path) -> bool:
        """Whether `folder` is an entry diffdsl wrote: its marker names its own key."""
        try:
            marker = (folder / MARKER_FILE).read_bytes()
        except OSError:
            return False
        return marker == MARKER_TEXT.format(key=folder.name).encode()

    def drop(self, key: str) -> None:
        """Remove an entry that failed to load, so the next build starts clean. A file or a
        link standing where the entry's folder goes is removed too (never what it points to)."""
        folder = self.root / key
        if _in_the_way(folder):
            try:
                folder.unlink()
            except OSError:
                pass
            return
        shutil.rmtree(folder, ignore_errors=True)

    def entries(self) -> list[Path]:
        """The entries diffdsl wrote (their marker proves it); nothing else in the folder."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir()
                      if not p.is_symlink() and p.is_dir() and self.owns(p))

    def info(self) -> dict:
        entries = self.entries()
        size = sum(f.stat().st_size for e in entries for f in e.rglob("*") if f.is_file())
        return {"path": str(self.root), "entries": len(entries), "bytes": size}

    def clear(self) -> int:
        """Remove every entry diffdsl wrote; any other file or folder is left alone."""
        entries = self.entries()
        for entry in entries:
            shutil.rmtree(entry, ignore_errors=True)
        return len(entries)


def _numba_files_load(folder: Path) -> bool:
    """Whether Numba can read every file it keeps for a module: each `*.nbi` index (a pickled
    version, then a pickled body, small: loaded as Numba loads it) and each `*.nbc` data file
    (one pickle of a kernel: only its opcodes are walked, so nothing is built, no GPU
    touched). These files sit in this cache's own entries, written by Numba for this user."""
    if not folder.is_dir():
        return True
    try:
        for path in sorted(folder.iterdir()):
            if path.suffix == ".nbi":
                with path.open("rb") as f:
                    pickle.load(f)
                    pickle.loads(f.read())
            elif path.suffix == ".nbc":
                data = path.read_bytes()
                end = max((pos for _, _, pos in pickletools.genops(data)), default=-1)
                if end != len(data) - 1:  # the STOP opcode must be the last byte
                    return False
    except Exception:  # noqa: BLE001 - garbage can make unpickling raise anything
        return False
    return True


def _in_the_way(folder: Path) -> bool:
    """A link or a file where an entry's folder goes: removed, never followed."""
    return folder.is_symlink() or (os.path.lexists(folder) and not folder.is_dir())


def _holds(path: Path, data: bytes) -> bool:
    """Whether `path` is a file holding exactly `data` (read as bytes: any encoding damage is
    a difference, not an error)."""
    return path.is_file() and not path.is_symlink() and path.read_bytes() == data


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


def cache_info() -> dict:
    """`diffdsl cache info`: {"path": folder (DIFFDSL_CACHE_DIR if set), "entries", "bytes"}."""
    return KernelCache().info()


def cache_clear() -> dict:
    """Remove diffdsl's entries from the kernel cache (folders it did not make stay):
    `{"path": folder, "removed": entries}`."""
    store = KernelCache()
    return {"path": str(store.root), "removed": store.clear()}
