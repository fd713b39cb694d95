"""Every backend against the numpy interpreter, through the public API: every example, single
points and batches (with an input shared by every row), float64 and float32, outputs,
Jacobians in both modes and Hessians (tests/compare.py). The CPU and CUDA tests keep what is
their own: the kernel cache, threads, device arrays."""

from __future__ import annotations

from pathlib import Path

import pytest
from compare import backend_params, compare_with_reference

import diffdsl

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.dd"))


@pytest.mark.parametrize("backend", backend_params())
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_matches_the_reference(example, backend):
    prog = diffdsl.load(example)
    compare_with_reference(prog, backend, "float64", ())
    first = list(prog.inputs)[:1] if len(prog.inputs) > 1 else []
    compare_with_reference(prog, backend, "float64", (3, 2), seed=1, shared=first)


@pytest.mark.parametrize("backend", backend_params())
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_in_float32(example, backend):
    compare_with_reference(example, backend, "float32", (4,), seed=2)
