"""Threads that wait for a batch's slices by spinning, as OpenMP's do (cpu.Kernel.run).

A batch of a few hundred microseconds split over threads through a `ThreadPoolExecutor`
lost most of what the second core gave: the thread that takes the second slice sleeps
between batches, and on this machine it started about 45 us after the call handed the
slice over, and the call saw it end about 35 us after it did. det3's gradient over 10^5
rows took 0.22 ms where the same row loop on two threads of Numba's OpenMP pool took 0.12.

Here each worker thread runs `diffdsl_pool_serve`, machine code of our own that spins on
its slot (two cache lines) for about SPIN_S after each slice, so a batch that follows within
that time starts at once. Past it the worker returns to Python and sleeps on an Event. A
slot's state (its first word) says where its slice and its worker are:

    IDLE 0     the worker spins, no slice     POSTED 1   a slice waits for a thread
    TAKEN 2    the worker runs the slice      DONE 3     slice done, not yet seen
    AWAY 4     the worker sleeps, in Python   CLOSED 5   the process is exiting

The calling thread posts every slice but the first (the slice's arguments, then an atomic
exchange of the state with POSTED, whose old value says whether the worker was AWAY and
needs its Event), runs the first slice itself, then runs any slice still POSTED (its worker
asleep, or not yet on a core: the batch never waits for a thread to wake) and waits for
those TAKEN, all with the GIL released. A slice is taken by one thread only: worker and
caller each take it by a compare-and-swap from POSTED. One batch uses the pool at a time;
a batch that finds it busy (another Python thread's) runs on the executor instead. A
forked child starts workers of its own; at exit the workers are told to stop.

The long loops of one evaluation split over the same workers (llvm_spread): the kernel's
machine code posts each loop's slices through `diffdsl_pool_run` itself, with the context
`spread` makes (the caller holds `lock` and has woken the workers asleep); a worker it finds
asleep has its slice run by the caller, and is woken after the call (`spread_done`).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
import time

import numpy as np

from . import native
from .pool_ir import SLOT

SPIN_S = 1e-3  # how long a worker spins after a slice before it sleeps
IDLE, POSTED, TAKEN, DONE, AWAY, CLOSED = range(6)
# A slot: state, row function, ports, strides, begin, end, scratch, spin budget; slots are
# 16 int64s (128 bytes) apart, as the CPU's prefetcher fetches cache lines in pairs.
WORDS = 16
MOST = 63  # workers: the AWAY mask is a signed 64-bit integer


_FUNCTIONS = ("diffdsl_pool_serve", "diffdsl_pool_run", "diffdsl_pool_finish",
              "diffdsl_pool_close", "diffdsl_pool_spin")
_P = ctypes.c_void_p
_I = ctypes.c_int64


def _pause() -> tuple[str, str]:
    """The CPU's spin-wait hint, as a call and its declaration: it lets the core's other
    hardware thread run, and slows the loop to a few tens of cycles an iteration."""
    arch = os.uname().machine if hasattr(os, "uname") else ""
    if arch in ("x86_64", "AMD64", "i686", "i386"):
        return "call void @llvm.x86.sse2.pause()", "declare void @llvm.x86.sse2.pause()"
    if arch in ("aarch64", "arm64"):
        return "call void @llvm.aarch64.hint(i32 1)", "declare void @llvm.aarch64.hint(i32)"
    return "fence seq_cst", ""


class Pool:
    """Worker threads, each with a slot, started as batches need them."""

    def __init__(self):
        call, declared = _pause()
        text = SLOT.replace("PAUSE", call) + declared + "\n"
        self._lib = native.Library(native.compile_ir(text, 0), _FUNCTIONS)
        address = self._lib.address
        self._serve = ctypes.CFUNCTYPE(None, _P)(address("diffdsl_pool_serve"))
        self._run = ctypes.CFUNCTYPE(_I, _P, _I, _I, _P, _P, _I, _P, _I)(
            address("diffdsl_pool_run"))
        self._finish = ctypes.CFUNCTYPE(None, _P, _I, _I, _P, _P, _I, _P, _I)(
            address("diffdsl_pool_finish"))
        self._close = ctypes.CFUNCTYPE(None, _P)(address("diffdsl_pool_close"))
        self._spin = ctypes.CFUNCTYPE(None, _P, _I)(address("diffdsl_pool_spin"))
        self._budget = 0
        # The context of an evaluation whose loops split over the workers (llvm_spread): the
        # slots, the slices, their area, `diffdsl_pool_run`, `diffdsl_pool_finish`, a mask
        self._context = np.zeros(6, dtype=np.int64)
        self._context[3:5] = address("diffdsl_pool_run"), address("diffdsl_pool_finish")
        self._area = np.zeros(0, dtype=np.uint8)
        self.forked()  # no workers yet

    def run(self, count: int, fn: int, ports: int, strides: int, rows: int, scratch: int,
            size: int) -> None:
        """Rows 0..rows in `count` slices by the row function at address `fn` (its other
        arguments' addresses `ports` and `strides`), slice k on rows rows * k // count up to
        rows * (k + 1) // count with scratch at `scratch + k * size`, slice 0 on this thread.
        The caller holds `lock`, and the memory at those addresses lives until this returns."""
        if count - 1 > len(self._threads):
            self._grow(count - 1)
        args = (self._at, count, fn, ports, strides, rows, scratch, size)
        finished = False
        try:
            away = self._run(*args)
            if away:  # workers asleep: woken for the next batch; this one goes on here
                self._wake(away)
                self._finish(*args)
            finished = True
        finally:
            if not finished:  # interrupted (Ctrl-C): first end the slices here, in one call
                self._finish(*args)  # a second Ctrl-C cannot split (they read the caller's
                for event in self._events:  # arrays), then wake every worker for the next
                    event.set()  # batch (a needless wake costs nothing)

    def spread(self, count: int, size: int) -> int:
        """The address of a context for an evaluation whose loops split into `count` slices
        (llvm_spread), each slice past the first with `size` bytes of its own: the workers
        are started, and those asleep woken, for the loops to find them spinning. The
        caller holds `lock` until it has called `spread_done`."""
        if count - 1 > len(self._threads):
            self._grow(count - 1)
        need = (count - 1) * size + 128
        if self._area.size < need:
            self._area = np.zeros(need, dtype=np.uint8)
        area = self._area.ctypes.data + (-self._area.ctypes.data % 128)
        self._context[:3] = self._at, count, area
        self._context[5] = 0
        for w in range(count - 1):
            if self._slots[w, 0] == AWAY:  # asleep in Python: nothing else reads the slot
                self._slots[w, 0] = IDLE
                self._events[w].set()
        return self._context.ctypes.data

    def spread_done(self) -> None:
        """Wake the workers the evaluation found asleep (their slices ran on its thread):
        their slots say IDLE, and they would sleep through the next call's loops."""
        self._wake(int(self._context[5]))

    def _wake(self, away: int) -> None:
        """Set the Event of each worker whose bit is set in the mask `away`."""
        for w in range(len(self._events)):
            if away >> w & 1:
                self._events[w].set()

    def _grow(self, workers: int) -> None:
        if not self._budget:
            self._budget = self._calibrate()
        self._stop()
        memory = np.zeros(WORDS * (workers + 1), dtype=np.int64)
        skip = (-memory.ctypes.data % (8 * WORDS)) // 8  # the first slot on a line's start
        slots = memory[skip:skip + WORDS * workers].reshape(workers, WORDS)
        slots[:, 0] = AWAY
        slots[:, 7] = self._budget
        self._slots, self._at = slots, slots.ctypes.data  # the view keeps `memory`
        self._events = [threading.Event() for _ in range(workers)]
        for w in range(workers):  # listed once started: `_stop` joins what is listed
            thread = threading.Thread(target=self._work, args=(slots[w], self._events[w]),
                                      daemon=True, name=f"diffdsl-pool-{w}")
            thread.start()
            self._threads.append(thread)

    def _work(self, slot: np.ndarray, event: threading.Event) -> None:
        """A worker's thread: serve slices until the worker is told to stop. `slot` keeps
        the slot's memory alive while the machine code may read it."""
        while slot[0] != CLOSED:
            event.wait()
            event.clear()
            self._serve(slot.ctypes.data)

    def _calibrate(self) -> int:
        """Spins of the worker's loop in SPIN_S on this CPU."""
        probe = np.zeros(WORDS, dtype=np.int64)
        n = 10_000
        start = time.perf_counter()
        self._spin(probe.ctypes.data, n)
        took = max(time.perf_counter() - start, 1e-9)
        return max(1, int(n * SPIN_S / took))

    def close(self) -> None:
        """Stop the workers once no batch runs (at exit, a daemon thread's may; after a
        second the workers are left to the process's end, their slots held by their
        threads)."""
        if self.lock.acquire(timeout=1):
            try:
                self._stop()
            finally:
                self.lock.release()

    def _stop(self) -> None:
        """Each worker leaves its spin, or finds CLOSED when its Event wakes it."""
        for slot, event in zip(self._slots, self._events, strict=True):
            self._close(slot.ctypes.data)
            event.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def forked(self) -> None:
        """No workers (in a forked child: the parent's did not come along; the machine code
        did)."""
        self._slots = np.zeros((0, WORDS), dtype=np.int64)
        self._at = 0  # the address of the first slot
        self._events: list[threading.Event] = []
        self._threads: list[threading.Thread] = []
        self.lock = threading.Lock()  # one batch at a time


_pool: list[Pool] = []
_made = threading.Lock()


def pool() -> Pool:
    """The process's pool, made on first use (a forked child starts workers of its own)."""
    if not _pool:
        with _made:
            if not _pool:
                _pool.append(Pool())
    return _pool[0]


def _forked() -> None:
    global _made
    _made = threading.Lock()
    if _pool:
        _pool[0].forked()


@atexit.register
def _close() -> None:
    # Workers spin in machine code that reads their slots: stop them while those exist.
    if _pool:
        _pool[0].close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
