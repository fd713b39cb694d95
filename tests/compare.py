"""One comparison for every backend: a program run through the public API on a backend,
against the numpy interpreter on the same inputs (PyTensor's `compare_numba_and_py`).

`compare_with_reference(program, backend, dtype, batch)` compares the outputs, the Jacobian of
every output (both modes) and the Hessian of every one-element output. `BACKENDS` holds every
backend the engine registers (`engine.BACKENDS`, but "auto" and the reference itself) and, for
those that have one, its tape: "cpu-tape", "cuda-tape". A tape is reached by setting the
backend's size threshold to 0 (`path`), the one place the tests choose a path inside a backend.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest

import diffdsl
from diffdsl.backends import cpu, cuda
from diffdsl.runtime.engine import BACKENDS as REGISTERED

REFERENCE = "numpy"
_THRESHOLDS = {"cpu": cpu, "cuda": cuda}  # backends with a tape above a size
BACKENDS = [name for name in REGISTERED if name not in ("auto", REFERENCE)]
BACKENDS += [f"{name}-tape" for name in BACKENDS if name in _THRESHOLDS]
TOLERANCE = {"float64": 1e-12, "float32": 2e-4}


def backend_params() -> list:
    """`BACKENDS` as pytest parameters, the CUDA ones skipped where neither a GPU nor the
    simulator is."""
    marks = pytest.mark.skipif(not cuda.available(), reason="no CUDA GPU and no simulator")
    return [pytest.param(b, marks=marks) if b.startswith("cuda") else b for b in BACKENDS]


@contextlib.contextmanager
def path(backend: str):
    """The engine's name of `backend` ("cpu-tape" is "cpu"), with its tape threshold at 0
    for a tape while the context lasts."""
    name, _, tape = backend.partition("-")
    if not tape:
        yield name
        return
    module = _THRESHOLDS[name]
    old = module.TAPE_THRESHOLD
    module.TAPE_THRESHOLD = 0
    try:
        yield name
    finally:
        module.TAPE_THRESHOLD = old


def program(source) -> diffdsl.Program:
    """A Program from a path, source text or a Program."""
    if isinstance(source, diffdsl.Program):
        return source
    if isinstance(source, Path):
        return diffdsl.load(source)
    return diffdsl.compile(source)


def draw_inputs(prog, batch=(), seed=0, shared=()) -> dict:
    """Inputs uniform in [0.5, 1.5) of shape batch + declared shape (the names in `shared`
    at their declared shape, shared by every row)."""
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(0.5, 1.5, (() if name in shared else tuple(batch)) + shape)
            for name, shape in prog.inputs.items()}


def compare_with_reference(source, backend: str, dtype: str = "float64", batch=(), *,
                           seed: int = 0, shared=(), hessians: bool = True) -> None:
    """Run `source` (path, text or Program) on `backend` and on the reference, and compare
    outputs, Jacobians (forward and reverse) and Hessians of one-element outputs.

    Inputs are drawn in `dtype` (so both sides see the same numbers); the reference computes
    in float64, and results must be of `dtype` and agree within `TOLERANCE[dtype]`.
    """
    prog = program(source)
    inputs = {k: np.asarray(v).astype(dtype) for k, v in
              draw_inputs(prog, batch, seed, shared).items()}
    wide = {k: v.astype(np.float64) for k, v in inputs.items()}
    tol = TOLERANCE[dtype]
    with path(backend) as name:
        got = prog.evaluate(inputs, backend=name, dtype=dtype)
        want = prog.evaluate(wide, backend=REFERENCE)
        _close(got, want, dtype, tol, f"{backend} outputs")
        for of, shape in prog.outputs.items():
            for mode in ("reverse", "forward"):
                got = prog.jacobian(inputs, of=of, mode=mode, backend=name, dtype=dtype)
                want = prog.jacobian(wide, of=of, mode=mode, backend=REFERENCE)
                _close(got, want, dtype, tol, f"{backend} {mode} jacobian of {of}")
            if hessians and int(np.prod(shape)) == 1:
                got = prog.hessian(inputs, of=of, backend=name, dtype=dtype)
                want = prog.hessian(wide, of=of, backend=REFERENCE)
                for a in want:
                    _close(got[a], want[a], dtype, tol, f"{backend} hessian of {of} by {a}")
    # The path asked for is the one taken (the engine's kernels by graph; cuda's by "cuda").
    kernels = list(prog.engine._kernels.values())
    assert kernels and all((k.tape is not None) == backend.endswith("-tape") for k in kernels)


def _close(got: dict, want: dict, dtype: str, tol: float, what: str) -> None:
    assert got.keys() == want.keys(), what
    for k in want:
        value = np.asarray(_host(got[k]))
        assert value.dtype == np.dtype(dtype), (what, k, value.dtype)
        assert value.shape == np.shape(want[k]), (what, k, value.shape)
        np.testing.assert_allclose(value, want[k], rtol=tol, atol=tol, err_msg=f"{what}: {k}")


def _host(value):
    return value.copy_to_host() if hasattr(value, "copy_to_host") else value
