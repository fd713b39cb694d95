"""Deep recursion on a thread of its own: a large stack and a raised recursion limit.

Lowering walks the syntax tree recursively (a 10,000-term sum, a recursion 1,000 calls deep),
and SymPy recurses over an expression as it builds, prints or differentiates it; either can need
far more frames than Python's default limit of 1000 and the main thread's stack allow. `call`
runs such work on a new thread with the stack it asks for and gives back its result or its
exception, as if it had run in the caller.

The recursion limit and the size of new threads' stacks are settings of the whole process, so
they are changed under a lock: while several deep calls run at once (threads of a Dask worker),
the limit is the largest any of them asked for, and the caller's limit comes back when the last
one ends.

The new thread runs in a copy of the caller's `contextvars` context, so that what the caller
set there (the `limits.using` blocks in force) holds for the work too: a new thread would
otherwise start from an empty context.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from typing import Callable

_lock = threading.Lock()
_limits: list[int] = []  # the recursion limits that running calls asked for
_base_limit = 0  # the limit in force before the first of them


def call(frames: int, stack_bytes: int, fn: Callable, /, *args, **kwargs):
    """`fn(*args, **kwargs)` on a new thread with a stack of `stack_bytes` and a recursion limit
    of at least `frames`; returns its result or raises its exception. (The two settings come
    first and positionally, so every keyword argument is `fn`'s.)"""
    outcome: dict = {}
    context = contextvars.copy_context()

    def work():
        try:
            outcome["value"] = context.run(fn, *args, **kwargs)
        except BaseException as exc:  # noqa: B036 - re-raised on the calling thread
            outcome["error"] = exc

    _raise_limit(frames)
    try:
        with _lock:
            old_stack = threading.stack_size()
            threading.stack_size(stack_bytes)
            try:
                thread = threading.Thread(target=work, name="diffdsl-deep")
                thread.start()
            finally:
                threading.stack_size(old_stack)
        thread.join()
    finally:
        _restore_limit(frames)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _raise_limit(frames: int) -> None:
    global _base_limit
    with _lock:
        if not _limits:
            _base_limit = sys.getrecursionlimit()
        _limits.append(frames)
        sys.setrecursionlimit(max([_base_limit, *_limits]))


def _restore_limit(frames: int) -> None:
    with _lock:
        _limits.remove(frames)
        sys.setrecursionlimit(max([_base_limit, *_limits]))
