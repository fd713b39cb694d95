"""Progress bars on stderr for long work: compiling, chunked batches, `check`.

A bar shows only where a person can see it: stderr is a terminal, the user did not ask for
quiet (`--quiet`, `set_quiet(True)`), tqdm is installed (the `progress` extra), and the work
has run for more than DELAY_S seconds, so short commands print nothing. Everything else gets
a bar object whose methods do nothing, so callers never test for these cases.

A shown bar is redrawn every TICK_S seconds by a thread of its own, so that one long step
(LLVM generating code for a big kernel) shows its elapsed time instead of a frozen line.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

DELAY_S = 1.0
TICK_S = 0.5

_quiet = False


def set_quiet(quiet: bool = True) -> None:
    """No progress bars in this process (True), or bars again where they can be seen."""
    global _quiet
    _quiet = bool(quiet)


@contextlib.contextmanager
def quiet_if(flag: bool) -> Iterator[None]:
    """Quiet for the duration when `flag` (the command line's --quiet), as before after."""
    before = _quiet
    set_quiet(before or flag)
    try:
        yield
    finally:
        set_quiet(before)


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "") -> None:
        pass


class _Shown:
    """A tqdm bar, with a postfix that waits for the next draw: tqdm's own draws at once,
    before the delay, and a bar drawn that early is never cleared from the screen."""

    def __init__(self, bar):
        self.bar = bar

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def set_postfix_str(self, s: str = "") -> None:
        self.bar.set_postfix_str(s, refresh=False)


def _visible() -> bool:
    if _quiet:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


@contextlib.contextmanager
def bar(total: int | None, desc: str, unit: str = "it", rate: bool = True) -> Iterator:
    """A bar over `total` units (None: unknown); `update(n)` as each piece finishes,
    `set_postfix_str(text)` to name the piece under way. `rate=False` leaves out the rate
    and the time left, which mean nothing for steps of unequal length."""
    if not _visible():
        yield _Silent()
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield _Silent()
        return
    layout = {} if rate else {"bar_format": "{desc}: {n_fmt}/{total_fmt} [{elapsed}{postfix}]"}
    with tqdm(total=total, desc=desc, unit=unit, delay=DELAY_S, file=sys.stderr, leave=False,
              dynamic_ncols=True, unit_scale=(total or 0) >= 10_000, miniters=0,
              **layout) as shown:
        stop = threading.Event()
        ticker = threading.Thread(target=_tick, args=(shown, stop), daemon=True)
        ticker.start()
        try:
            yield _Shown(shown)
        finally:
            stop.set()
            ticker.join()


def _tick(shown, stop: threading.Event) -> None:
    # `update(0)` rather than `refresh()`: tqdm then records that the bar was drawn, and
    # clears it on closing (a bar drawn by `refresh` alone would be left on the screen).
    # miniters=0 above keeps tqdm from skipping these updates, which add no units.
    while not stop.wait(TICK_S):
        shown.update(0)
