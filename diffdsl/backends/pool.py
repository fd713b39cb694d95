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
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
import time

import numpy as np

from . import native

SPIN_S = 1e-3  # how long a worker spins after a slice before it sleeps
IDLE, POSTED, TAKEN, DONE, AWAY, CLOSED = range(6)
# A slot: state, row function, ports, strides, begin, end, scratch, spin budget; slots are
# 16 int64s (128 bytes) apart, as the CPU's prefetcher fetches cache lines in pairs.
WORDS = 16
MOST = 63  # workers: the AWAY mask is a signed 64-bit integer

_SLOT = """
; The slice a slot holds: the row function's call with the slot's arguments.
define internal void @slice(ptr %slot) nounwind {
entry:
  %fn.a = getelementptr inbounds ptr, ptr %slot, i64 1
  %fn = load ptr, ptr %fn.a
  %ports.a = getelementptr inbounds ptr, ptr %slot, i64 2
  %ports = load ptr, ptr %ports.a
  %strides.a = getelementptr inbounds ptr, ptr %slot, i64 3
  %strides = load ptr, ptr %strides.a
  %begin.a = getelementptr inbounds i64, ptr %slot, i64 4
  %begin = load i64, ptr %begin.a
  %end.a = getelementptr inbounds i64, ptr %slot, i64 5
  %end = load i64, ptr %end.a
  %scratch.a = getelementptr inbounds ptr, ptr %slot, i64 6
  %scratch = load ptr, ptr %scratch.a
  call void %fn(ptr %ports, ptr %strides, i64 %begin, i64 %end, ptr %scratch)
  ret void
}

; Slot w - 1, where slice w is posted.
define internal ptr @slot(ptr %slots, i64 %w) nounwind {
entry:
  %at = mul i64 %w, 16
  %slot.at = sub i64 %at, 16
  %slot = getelementptr inbounds i64, ptr %slots, i64 %slot.at
  ret ptr %slot
}

; A worker: take and run each slice posted to its slot; return when CLOSED, or after `budget`
; spins with nothing posted (the slot then AWAY), or at once if woken with nothing posted.
define void @diffdsl_pool_serve(ptr %slot) nounwind {
entry:
  %budget.a = getelementptr inbounds i64, ptr %slot, i64 7
  %budget = load i64, ptr %budget.a
  br label %look
look:
  %idle = phi i64 [ 0, %entry ], [ %idle.next, %spin ], [ 0, %ran ], [ 0, %stay ]
  %state = load atomic i64, ptr %slot acquire, align 8
  switch i64 %state, label %spin [ i64 1, label %take
                                   i64 5, label %leave ]
take:
  %took = cmpxchg ptr %slot, i64 1, i64 2 acq_rel acquire
  %mine = extractvalue { i64, i1 } %took, 1
  br i1 %mine, label %run, label %ran
run:
  call void @slice(ptr %slot)
  %told = cmpxchg ptr %slot, i64 2, i64 3 acq_rel acquire  ; fails only once CLOSED
  %kept = extractvalue { i64, i1 } %told, 1
  br i1 %kept, label %ran, label %leave
ran:
  br label %look
spin:
  PAUSE
  %idle.next = add i64 %idle, 1
  %over = icmp ugt i64 %idle.next, %budget
  br i1 %over, label %away, label %look
away:
  %swap = cmpxchg ptr %slot, i64 0, i64 4 acq_rel acquire
  %gone = extractvalue { i64, i1 } %swap, 1
  %seen = extractvalue { i64, i1 } %swap, 0
  %asleep = icmp eq i64 %seen, 4
  %back = or i1 %gone, %asleep
  br i1 %back, label %leave, label %stay
stay:
  br label %look
leave:
  ret void
}

; Post slices 1..count-1 (slice w: rows rows * w / count up to rows * (w + 1) / count, scratch
; at %scratch + w * %size) to slots 0..count-2; the bit of each worker that was AWAY is set in
; the result.
define i64 @diffdsl_pool_start(ptr %slots, i64 %count, i64 %fn, ptr %ports, ptr %strides,
                               i64 %rows, ptr %scratch, i64 %size) nounwind {
entry:
  br label %look
look:
  %w = phi i64 [ 1, %entry ], [ %w.next, %post ]
  %mask = phi i64 [ 0, %entry ], [ %mask.next, %post ]
  %more = icmp ult i64 %w, %count
  br i1 %more, label %post, label %done
post:
  %slot = call ptr @slot(ptr %slots, i64 %w)
  %fn.a = getelementptr inbounds i64, ptr %slot, i64 1
  store i64 %fn, ptr %fn.a
  %ports.a = getelementptr inbounds ptr, ptr %slot, i64 2
  store ptr %ports, ptr %ports.a
  %strides.a = getelementptr inbounds ptr, ptr %slot, i64 3
  store ptr %strides, ptr %strides.a
  %w.next = add i64 %w, 1
  %begin.r = mul i64 %rows, %w
  %begin = udiv i64 %begin.r, %count
  %end.r = mul i64 %rows, %w.next
  %end = udiv i64 %end.r, %count
  %begin.a = getelementptr inbounds i64, ptr %slot, i64 4
  store i64 %begin, ptr %begin.a
  %end.a = getelementptr inbounds i64, ptr %slot, i64 5
  store i64 %end, ptr %end.a
  %skip = mul i64 %w, %size
  %scratch.p = getelementptr inbounds i8, ptr %scratch, i64 %skip
  %scratch.a = getelementptr inbounds ptr, ptr %slot, i64 6
  store ptr %scratch.p, ptr %scratch.a
  %old = atomicrmw xchg ptr %slot, i64 1 seq_cst
  %away = icmp eq i64 %old, 4
  %bit.at = sub i64 %w, 1
  %bit = shl i64 1, %bit.at
  %bit.if = select i1 %away, i64 %bit, i64 0
  %mask.next = or i64 %mask, %bit.if
  br label %look
done:
  ret i64 %mask
}

; Run slice 0 here; then each slice still POSTED (taken from its worker: its slot IDLE); then
; wait while each slot is TAKEN and set a DONE one back to IDLE. Run again after the batch
; ended (`Pool.run`, interrupted), it computes slice 0 again and returns.
define void @diffdsl_pool_finish(ptr %slots, i64 %count, i64 %fn.i, ptr %ports,
                                 ptr %strides, i64 %rows, ptr %scratch, i64 %size) nounwind {
entry:
  %fn = inttoptr i64 %fn.i to ptr
  %end = udiv i64 %rows, %count
  call void %fn(ptr %ports, ptr %strides, i64 0, i64 %end, ptr %scratch)
  br label %steal
steal:
  %v = phi i64 [ 1, %entry ], [ %v.next, %stolen ]
  %more.v = icmp ult i64 %v, %count
  br i1 %more.v, label %try, label %next
try:
  %slot.v = call ptr @slot(ptr %slots, i64 %v)
  %took = cmpxchg ptr %slot.v, i64 1, i64 0 acq_rel acquire
  %mine = extractvalue { i64, i1 } %took, 1
  br i1 %mine, label %run, label %stolen
run:
  call void @slice(ptr %slot.v)
  br label %stolen
stolen:
  %v.next = add i64 %v, 1
  br label %steal
next:
  %w = phi i64 [ 1, %steal ], [ %w.next, %collect ]
  %more = icmp ult i64 %w, %count
  br i1 %more, label %wait, label %done
wait:
  %slot = call ptr @slot(ptr %slots, i64 %w)
  br label %poll
poll:
  %state = load atomic i64, ptr %slot acquire, align 8
  %running = icmp eq i64 %state, 2
  br i1 %running, label %pause, label %collect
pause:
  PAUSE
  br label %poll
collect:
  %swap = cmpxchg ptr %slot, i64 3, i64 0 acq_rel acquire
  %w.next = add i64 %w, 1
  br label %next
done:
  ret void
}

; Post the slices; where no worker was AWAY, run slice 0 and the rest too. The AWAY mask.
define i64 @diffdsl_pool_run(ptr %slots, i64 %count, i64 %fn, ptr %ports, ptr %strides,
                             i64 %rows, ptr %scratch, i64 %size) nounwind {
entry:
  %away = call i64 @diffdsl_pool_start(ptr %slots, i64 %count, i64 %fn, ptr %ports,
                                       ptr %strides, i64 %rows, ptr %scratch, i64 %size)
  %awake = icmp eq i64 %away, 0
  br i1 %awake, label %finish, label %done
finish:
  call void @diffdsl_pool_finish(ptr %slots, i64 %count, i64 %fn, ptr %ports, ptr %strides,
                                 i64 %rows, ptr %scratch, i64 %size)
  br label %done
done:
  ret i64 %away
}

; Tell a worker to stop: it leaves its spin, or sees CLOSED when its Event wakes it.
define void @diffdsl_pool_close(ptr %slot) nounwind {
entry:
  %old = atomicrmw xchg ptr %slot, i64 5 seq_cst
  ret void
}

; `n` spins of the worker's loop, timed once to turn SPIN_S into a count.
define void @diffdsl_pool_spin(ptr %slot, i64 %n) nounwind {
entry:
  br label %look
look:
  %k = phi i64 [ 0, %entry ], [ %k.next, %look ]
  %state = load atomic i64, ptr %slot acquire, align 8
  PAUSE
  %k.next = add i64 %k, 1
  %more = icmp ult i64 %k.next, %n
  br i1 %more, label %look, label %done
done:
  ret void
}
"""

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
        text = _SLOT.replace("PAUSE", call) + declared + "\n"
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
                for w in range(len(self._events)):
                    if away >> w & 1:
                        self._events[w].set()
                self._finish(*args)
            finished = True
        finally:
            if not finished:  # interrupted (Ctrl-C): first end the slices here, in one call
                self._finish(*args)  # a second Ctrl-C cannot split (they read the caller's
                for event in self._events:  # arrays), then wake every worker for the next
                    event.set()  # batch (a needless wake costs nothing)

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
