"""The fuzzer's programs both ways: every loop of two or more iterations tried as a region
(`unroll=1`) against every loop unrolled (the reference semantics). Their generator sums and
comprehensions then become regions whose bodies hold what the generator draws: selects,
kinks, powers, derivatives inside the program, calls, the index used as a real. Both builds
must fail alike, or agree on values and on Jacobians, forward and reverse, on the numpy
interpreter and the CPU, up to the order in which sums add their terms.
"""

from __future__ import annotations

import numpy as np
from draws import examples
from fuzzing import programs
from hypothesis import HealthCheck, given, settings

import diffdsl
from diffdsl.errors import DiffDSLError
from diffdsl.graph.loops import has_regions


def build(source: str, unroll: int):
    with diffdsl.limits.using(unroll=unroll):
        try:
            return diffdsl.compile(source, cache=False)
        except DiffDSLError as exc:
            return type(exc)


def same(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    finite = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
        return False
    if not np.array_equal(a[~finite], b[~finite], equal_nan=True):
        return False
    scale = np.maximum(1.0, np.abs(b[finite]))
    return bool(np.all(np.abs(a[finite] - b[finite]) <= 1e-9 * scale))


def agree(x, y) -> bool:
    if isinstance(x, dict):
        return set(x) == set(y) and all(agree(x[k], y[k]) for k in x)
    return same(x, y)


@settings(max_examples=examples(50), deadline=None, suppress_health_check=list(HealthCheck))
@given(source=programs(mutate=False))
def test_fuzzed_programs_agree_with_their_loops_unrolled(source):
    regions, unrolled = build(source, 1), build(source, 10**9)
    if isinstance(unrolled, type):
        assert regions is unrolled, source
        return
    assert not isinstance(regions, type), (source, regions)
    rng = np.random.default_rng(len(source))
    point = {n: rng.normal(size=s) for n, s in unrolled.inputs.items()}
    for backend in ("numpy", "cpu"):
        assert agree(regions.evaluate(point, backend=backend),
                     unrolled.evaluate(point, backend="numpy")), (source, backend)
        for mode in ("reverse", "forward"):
            assert agree(regions.jacobian(point, of="y", mode=mode, backend=backend),
                         unrolled.jacobian(point, of="y", mode=mode, backend="numpy")), \
                (source, backend, mode)
        if unrolled.outputs["y"] == ():  # reverse mode by inputs read whole (a whole gradient)
            assert agree(regions.grad(point, of="y", backend=backend),
                         unrolled.grad(point, of="y", backend="numpy")), (source, backend)


def test_the_fuzzer_makes_regions():
    """The comparison above is not vacuous: generated programs do become regions."""
    source = "input x\ninput v[2]\noutput y = sum(sin(x * i) + v[0] for i in range(3))"
    assert has_regions(build(source, 1).graph)
    assert not has_regions(build(source, 10**9).graph)
