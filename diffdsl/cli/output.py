"""What the command line writes: lines on stdout, `--output FILE.npz`, `graph -o OUT`.

Files are written whole or not at all (`files.atomic_path`): an existing file is never left
half-written, nor any other file touched. An error writing one is the user's to fix (a full
disk, a folder that is not there): a usage error that names the file, never a traceback. So
is an error writing standard output (`diffdsl grad ... > /dev/full`): `guarded_stdout`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..files import atomic_path, write_atomic
from .results import labelled_lines


def print_json(obj) -> None:
    print(json.dumps(obj))


def print_labelled(items: list[tuple[str, object]]) -> None:
    for line in labelled_lines(items):
        print(line)


def write_npz(path: str, arrays: dict) -> None:
    target = Path(path)
    if target.suffix != ".npz":
        raise UsageError(f"--output must name a .npz file, a .npy file or a .zarr folder, "
                         f"got {path!r}")
    with writing(path), atomic_path(target) as tmp:
        np.savez(tmp, **{k: np.asarray(v) for k, v in arrays.items()})


def write_graph(out: str | None, text: str) -> None:
    """DOT text to stdout (no `out`), to OUT.dot, or rendered by Graphviz's `dot` into
    OUT.svg or OUT.png."""
    if not out:
        sys.stdout.write(text)
        return
    target = Path(out)
    if target.suffix == ".dot":
        with writing(target):
            write_atomic(target, text)
        return
    if target.suffix not in (".svg", ".png"):
        raise UsageError(f"-o must end in .dot, .svg or .png, got {out!r}")
    dot = shutil.which("dot")
    if dot is None:
        raise UsageError("rendering .svg or .png needs Graphviz's `dot` program",
                         hint="install graphviz, or write DOT text with -o OUT.dot")
    with writing(target), atomic_path(target) as tmp:
        done = subprocess.run([dot, f"-T{target.suffix[1:]}", "-o", str(tmp)], input=text,
                              text=True, capture_output=True)
        if done.returncode != 0:
            raise UsageError(f"Graphviz failed: {done.stderr.strip()}")


@contextlib.contextmanager
def writing(name) -> Iterator[None]:
    """An OSError while writing file `name` as a usage error that names it."""
    try:
        yield
    except OSError as exc:
        raise UsageError(f"cannot write {name}: {exc.strerror or exc}") from None


class StdoutFailed(UsageError):
    """Standard output cannot be written: a full disk, a device that refuses data."""


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """Inside the block, an error writing standard output is `StdoutFailed`, naming where
    stdout goes; the block's end flushes it, so that data still buffered fails here and not
    at the interpreter's exit (which would print Python's "Exception ignored" and exit 120).
    A reader that went away (`| head`) stays a BrokenPipeError, for `main` to end quietly.
    Argparse's `--help` swallows an OSError of its own writes, not this error."""
    real = sys.stdout
    sys.stdout = _Guarded(real)
    try:
        yield
    except SystemExit:
        _flush(real)  # `--help` wrote to a full disk: that, not status 0, is the outcome
        raise
    finally:
        sys.stdout = real
    _flush(real)


class _Guarded:
    """A text stream whose write errors are `StdoutFailed`; the rest is the stream's own."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return _guard(self._stream, self._stream.write, text)

    def flush(self) -> None:
        _guard(self._stream, self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _flush(stream) -> None:
    _guard(stream, stream.flush)


def _guard(stream, call, *args):
    try:
        return call(*args)
    except BrokenPipeError:
        raise
    except OSError as exc:
        where = _path_of(stream)
        raise StdoutFailed(f"cannot write standard output{f' ({where})' if where else ''}: "
                           f"{exc.strerror or exc}") from None


def _path_of(stream) -> str | None:
    """The file standard output goes to, where the system says (Linux's /proc)."""
    try:
        return os.readlink(f"/proc/self/fd/{stream.fileno()}")
    except (OSError, ValueError, AttributeError):
        return None
