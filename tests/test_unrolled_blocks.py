"""A kernel whose loops LLVM's unroller writes out into a basic block past
`native.UNROLLED_BLOCK` instructions is optimised again without unrolling (backends/native.py):
the values must be the same bits either way, for generated programs with their loops kept, and
the blocks must be counted as LLVM prints them."""

from __future__ import annotations

import numpy as np
import pytest
from draws import examples
from fuzzing import programs
from hypothesis import HealthCheck, assume, given, settings

import diffdsl
from diffdsl.backends import native
from diffdsl.errors import DiffDSLError

MODULE = """define void @f(ptr %p) nounwind {
entry:
  store double 1.0, ptr %p
  br label %next

next:
  store double 2.0, ptr %p
  store double 3.0, ptr %p
  store double 4.0, ptr %p
  ret void
}
"""


def test_the_biggest_block_is_counted_in_instructions(monkeypatch):
    module, _context = native._parsed(MODULE, native._machine()[0][0])
    monkeypatch.setattr(native, "UNROLLED_BLOCK", 2)
    assert native._biggest_block(module) == 4  # the second block: three stores and a return
    monkeypatch.setattr(native, "UNROLLED_BLOCK", 100)
    assert native._biggest_block(module) == 0  # too few lines to hold such a block: not read


def compiled_values(source: str, point: dict) -> list:
    with diffdsl.limits.using(unroll=1):
        prog = diffdsl.compile(source, backend="cpu", cache=False)
    return [prog.evaluate(point), prog.jacobian(point, of="y", mode="reverse")]


@settings(max_examples=examples(10), deadline=None, suppress_health_check=list(HealthCheck))
@given(source=programs(mutate=False))
def test_kernels_without_unrolling_give_the_same_bits(source):
    try:
        with diffdsl.limits.using(unroll=1):
            inputs = diffdsl.compile(source, cache=False).inputs
    except DiffDSLError:
        assume(False)
    rng = np.random.default_rng(len(source))
    point = {n: rng.normal(size=s) for n, s in inputs.items()}
    with pytest.MonkeyPatch.context() as patch:
        asked = []
        optimize = native._optimize_loops
        patch.setattr(native, "_optimize_loops",
                      lambda module, tm, unroll=True: asked.append(unroll) or
                      optimize(module, tm, unroll))
        patch.setattr(native, "UNROLLED_BLOCK", 0)  # every kernel with loops: again without
        rolled = compiled_values(source, point)
    assume(asked)  # a kernel with loops was compiled
    assert all(asked[k + 1] is False for k, u in enumerate(asked) if u)  # each was redone
    unrolled = compiled_values(source, point)
    for a, b in zip(unrolled, rolled, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k], equal_nan=True), (source, k)
