"""A clean exit after many kernels (issue 23, item 8).

A kernel's single-point entry is a CPython builtin whose method table (name, address, flags)
lives in memory diffdsl allocates; CPython reads that table again when the builtin is freed.
When a dropped program, or every program at interpreter exit, ends up in a cycle the garbage
collector clears, the collector may clear the library that owned the table before it frees
the builtin: the builtin then read freed memory, and the process died with a segmentation
fault after printing every result (exit status 139). Each test runs in a subprocess, so a
crash is a failed test and not a dead test run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# A module with one METH_FASTCALL entry that returns None, the shape of a kernel's entries.
_MODULE = """
@_Py_NoneStruct = external global i8
declare void @Py_IncRef(ptr)
define ptr @entry(ptr %self, ptr %args, i64 %nargs) {
  call void @Py_IncRef(ptr @_Py_NoneStruct)
  ret ptr @_Py_NoneStruct
}
"""

# What the collector's clear of a `Library` in a dropped cycle does (it empties the instance's
# attributes), done by hand, while the builtin still lives: then the freed memory is reused
# (floats take pymalloc's 32-byte blocks, the size of a method table) and the builtin is read
# and freed.
_CLEARED = """
import gc
from diffdsl.backends import native
lib = native.Library(native.compile_ir(MODULE, 1), ("entry",))
fn = lib.builtin("entry")
assert fn() is None
vars(lib).clear()
gc.collect()
churn = [float(i) + 0.5 for i in range(200_000)]
assert fn.__name__ == "entry", fn.__name__
del lib, fn, churn
gc.collect()
print("ok")
"""

# k-means objectives with the data as a const: unrolled graphs of tens of thousands of nodes,
# gradients and Hessians compiled, every other program dropped, hundreds of calls, then exit.
_KMEANS = """
import sys
import numpy as np
import diffdsl
n, k, d, programs, calls = (int(a) for a in sys.argv[1:])
rng = np.random.default_rng(7)
kept = []
for p in range(programs):
    X = rng.standard_normal((n, d))
    rows = ", ".join("[" + ", ".join(repr(float(v)) for v in r) + "]" for r in X)
    prog = diffdsl.compile(
        f"const X = [{rows}]\\ninput C[{k}, {d}]\\n"
        f"output J = sum(min([sum((X[i, t] - C[j, t]) ** 2 for t in range({d})) "
        f"for j in range({k})]) for i in range({n}))\\n")
    for c in range(calls):
        C = rng.standard_normal((k, d))
        value = prog(C=C)
        grad = prog.grad(C=C)["C"]
        if c % 100 == 0:
            hessian = prog.hessian(C=C)
    # the last call checked against NumPy, so a clean exit is not bought with wrong answers
    dist = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    near = dist.argmin(axis=1)
    assert abs(value - dist.min(axis=1).sum()) < 1e-9 * value
    expect = np.zeros((k, d))
    for i, j in enumerate(near):
        expect[j] += 2 * (C[j] - X[i])
    assert np.allclose(grad, expect, rtol=1e-12, atol=1e-9)
    if p % 2:
        kept.append(prog)
print("ok", flush=True)
"""


def _run(code: str, cwd, args=(), env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", code, *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def test_builtin_outlives_its_librarys_attributes(tmp_path):
    """The method table is owned by what the builtin itself holds, not by the library's
    attributes, so any order of clearing leaves it intact (before the fix: a wrong name or a
    segmentation fault)."""
    done = _run(f"MODULE = {_MODULE!r}\n" + _CLEARED, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


# (n, k, d, programs, calls): whether a run crashed depended on the heap's layout, so three
# sizes; before the fix each crashed in most of its runs (cold or warm), in pytest and alone.
@pytest.mark.parametrize("sizes", [(60, 8, 6, 1, 300), (60, 6, 6, 2, 300), (60, 10, 6, 1, 300)])
def test_exit_is_clean_after_many_kernels(tmp_path, sizes):
    """Cold, then twice warm from the disk cache: every run exits 0 (before the fix: -11 or
    139 after printing every result, as the issue's k-means run did)."""
    # The compiled kernels (the suite's default is the numpy interpreter), without the
    # suite's graph verification, as a user runs them.
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(tmp_path / "cache"), DIFFDSL_BACKEND="cpu")
    env.pop("DIFFDSL_VERIFY", None)
    for attempt in range(3):
        done = _run(textwrap.dedent(_KMEANS), tmp_path, [str(s) for s in sizes], env)
        assert done.returncode == 0, (
            f"run {attempt} ({'cold' if attempt == 0 else 'warm'}) exited "
            f"{done.returncode} after printing {done.stdout!r}:\n{done.stderr[-2000:]}")
        assert done.stdout.strip() == "ok"
