"""What the command line writes: lines on stdout, `--output FILE.npz`, `graph -o OUT`.

Files are written whole or not at all (`files.atomic_path`): an existing file is never left
half-written, nor any other file touched. An error writing one is the user's to fix (a full
disk, a folder that is not there): a usage error, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
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
    with _writing(path), atomic_path(target) as tmp:
        np.savez(tmp, **{k: np.asarray(v) for k, v in arrays.items()})


def write_graph(out: str | None, text: str) -> None:
    """DOT text to stdout (no `out`), to OUT.dot, or rendered by Graphviz's `dot` into
    OUT.svg or OUT.png."""
    if not out:
        sys.stdout.write(text)
        return
    target = Path(out)
    if target.suffix == ".dot":
        with _writing(target):
            write_atomic(target, text)
        return
    if target.suffix not in (".svg", ".png"):
        raise UsageError(f"-o must end in .dot, .svg or .png, got {out!r}")
    dot = shutil.which("dot")
    if dot is None:
        raise UsageError("rendering .svg or .png needs Graphviz's `dot` program",
                         hint="install graphviz, or write DOT text with -o OUT.dot")
    with _writing(target), atomic_path(target) as tmp:
        done = subprocess.run([dot, f"-T{target.suffix[1:]}", "-o", str(tmp)], input=text,
                              text=True, capture_output=True)
        if done.returncode != 0:
            raise UsageError(f"Graphviz failed: {done.stderr.strip()}")


@contextlib.contextmanager
def _writing(name) -> Iterator[None]:
    """An OSError while writing file `name` as a usage error that names it."""
    try:
        yield
    except OSError as exc:
        raise UsageError(f"cannot write {name}: {exc.strerror or exc}") from None
