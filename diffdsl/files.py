"""Files written whole or not at all: a temporary file beside the target, renamed over it.

Readers (another process, a user's viewer) see the old file or the new one, never a part; a
failed write leaves the old file as it was. The kernel cache writes its entries this way, and
the command line its `--output` files.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` so that readers see the old file or the new one, never a part."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb" if isinstance(data, bytes) else "w",
                  encoding=None if isinstance(data, bytes) else "utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path: Path):
    """A temporary file to write `path`'s new content into, renamed over `path` when the block
    ends without an error and removed when it fails. Its name is unique in `path`'s folder
    (never a user's file, never another writer's) and it keeps `path`'s suffix, for tools that
    choose a format by it; the result keeps the mode `path` had (a new file: the umask's)."""
    path = Path(path)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        os.chmod(tmp, mode)  # mkstemp makes it 0600
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _mode_for(path: Path) -> int:
    """The permission bits `path` should have once rewritten: its own when it exists, else
    what `open()` would give a new file under the current umask."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
