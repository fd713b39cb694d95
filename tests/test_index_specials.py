"""A loop whose index gives a NaN or an infinity in some iteration (`log(i)` at 0, `1 / (i - 3)`,
`acos(i / 50)` past 50) is written out (a scan's first and last iterations are written
out anyway), not kept as a loop: written out, that value is a
static number, and the builder's identities (`0 * x = 0`) meet it otherwise than the run
time meets the same value computed from the loop's index. Each form of index function in
each kind of loop against the loop written out, the reference semantics."""

from __future__ import annotations

import numpy as np
import pytest

import diffdsl
from diffdsl.graph.loops import has_regions

SPECIALS = ["log(i)", "1 / (i - 3)", "acos(i / 50)", "sqrt(40 - i)", "i ** -1", "log(i - 1)"]
FINITE = ["log(i + 1)", "acos(i / 100)", "sqrt(i)"]

LOOPS = {
    "sum": "input x[100]\noutput s = sum(x[i] + 0 * {f} for i in range(100))",
    "map": "input x[100]\nm = [x[i] * 0 * {f} + x[i] for i in range(100)]\n"
           "output s = m[0] + m[99]",
    "scan": "input x[100]\ninput a\nh = a\nfor i in range(100) {{\n"
            "    h = h * 0.5 + x[i] + 0 * {f}\n}}\noutput s = h",
}


def build(source: str, unroll: int):
    with diffdsl.limits.using(unroll=unroll):
        return diffdsl.compile(source, backend="cpu", cache=False)


def same(a, b) -> bool:
    return bool(np.array_equal(np.asarray(a, float), np.asarray(b, float), equal_nan=True))


@pytest.mark.parametrize("f", SPECIALS + FINITE)
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_index_specials_agree_with_the_loop_written_out(loop, f):
    source = LOOPS[loop].format(f=f)
    kept, written = build(source, 64), build(source, 10**9)
    if f in FINITE:  # the rule is not "write every loop out"
        assert has_regions(kept.graph)
    x = {n: np.linspace(0.5, 1.5, int(np.prod(s))).reshape(s) for n, s in kept.inputs.items()}
    assert same(kept(x), written(x)), (kept(x), written(x))
    g1, g2 = kept.grad(x), written.grad(x)
    assert all(same(g1[k], g2[k]) for k in g2)


FOUND = [  # found by the scan fuzzer: an index that zeroes the state, then gives a NaN
    "input x\ninput v[2]\nu = v * x + v\nfor i in range(3) {\n    u = sin(u * acos(i))\n}\n"
    "output s = x + 0 * sum(u)\n",
    "input x\ninput v[2]\nu = v * x + v\nfor i in range(3) {\n    u = eye(2) @ (u * acos(i))\n"
    "}\noutput s = x + sum(u)\n",
    "input x\ninput v[2]\nu = v * x + v\nfor i in range(100) {\n"
    "    u = u * acos(i / 98) + v\n}\noutput s = x + 0 * sum(u)\n",
]


@pytest.mark.parametrize("source", FOUND)
def test_a_scan_checks_its_index_in_the_iterations_written_out_too(source):
    kept, written = build(source, 1), build(source, 10**9)
    x = {"x": 0.3, "v": np.array([0.2, -0.4])}
    assert same(kept(x), written(x))
    g1, g2 = kept.grad(x), written.grad(x)
    assert all(same(g1[k], g2[k]) for k in g2)
