"""Progress bars on stderr for long work: compiling, chunked batches.

A bar shows only where a person can see it: stderr is a terminal, the user did not ask for
quiet (`--quiet`, `set_quiet(True)`), tqdm is installed (the `progress` extra), and the work
has run for more than DELAY_S seconds, so short commands print nothing. Everything else gets
a bar object whose `update` does nothing, so callers never test for these cases.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

DELAY_S = 1.0

_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


class _Silent:
    def update(self, n: int = 1) -> None:
        pass


def _visible() -> bool:
    if _quiet:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


@contextlib.contextmanager
def bar(total: int | None, desc: str, unit: str = "it") -> Iterator:
    """A bar over `total` units (None: unknown); `update(n)` as each piece finishes."""
    if not _visible():
        yield _Silent()
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield _Silent()
        return
    with tqdm(total=total, desc=desc, unit=unit, delay=DELAY_S, file=sys.stderr,
              leave=False, dynamic_ncols=True, unit_scale=True) as shown:
        yield shown
