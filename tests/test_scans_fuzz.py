"""Generated `for` loops both ways: a loop of a few iterations kept as a scan (`unroll=1`; the
first and last iterations are written out, the rest a scan)
against the loop written out (the reference semantics). The body assigns a scalar and a
vector state from the fuzzer's expressions over the state, the loop variable (as a real), an
element of the data at the loop's index, a temporary, a dynamic `if` and maybe an inner loop,
so selects, kinks, powers, derivatives inside the program and calls all meet a carried state.
Both builds must fail alike, or agree on values and on Jacobians, forward and reverse, on the
numpy interpreter and the CPU."""

from __future__ import annotations

import numpy as np
from draws import examples
from fuzzing import condition, scalar, vector
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_regions_fuzz import agree, build


@st.composite
def scan_programs(draw, most: int = 6):
    n = draw(st.integers(3, most))
    lines = ["input x", "input v[2]", f"input d[{n}]"]
    outer = {"x": "s", "v": "v"}
    lines.append(f"a = x * {draw(scalar(outer, 1))} + x")
    lines.append(f"u = v * {draw(scalar(outer, 1))} + v")
    lines.append(f"for i in range({n}) {{")
    env = {"x": "s", "v": "v", "a": "s", "u": "v", "i": "s", "d[i]": "s"}
    depth = draw(st.integers(1, 3))
    kinds = draw(st.lists(st.sampled_from(["a", "u", "temp", "if", "inner", "elem"]),
                          min_size=1, max_size=4))
    for kind in kinds:
        if kind == "a":
            lines.append(f"    a = {draw(scalar(env, depth))}")
        elif kind == "u":
            lines.append(f"    u = {draw(vector(env, depth))}")
        elif kind == "temp":
            lines.append(f"    t = {draw(scalar(env, depth))}")
            lines.append(f"    a = a * 0.5 + t * {draw(scalar(env, 1))}")
        elif kind == "elem":
            lines.append(f"    u[{draw(st.integers(-2, 1))}] = {draw(scalar(env, depth))}")
        elif kind == "if":
            lines += [f"    if {draw(condition(env, depth - 1))} {{",
                      f"        a = {draw(scalar(env, depth - 1))}", "    } else {",
                      f"        u = {draw(vector(env, depth - 1))}", "    }"]
        else:
            inner = dict(env, j="s")
            lines += [f"    for j in range({draw(st.integers(0, 2))}) {{",
                      f"        a = a + {draw(scalar(inner, depth - 1))} * 0.5", "    }"]
    lines.append("}")
    lines.append(f"output y = a + {draw(scalar(dict(env, i='s'), 1))} * sum(u)")
    return "\n".join(lines) + "\n"


@settings(max_examples=examples(45), deadline=None, suppress_health_check=list(HealthCheck))
@given(source=scan_programs())
def test_generated_scans_agree_with_their_loops_written_out(source):
    scans, written = build(source, 1), build(source, 10**9)
    if isinstance(written, type):
        assert scans is written, source
        return
    assert not isinstance(scans, type), (source, scans)
    rng = np.random.default_rng(len(source))
    point = {n: rng.normal(size=s) for n, s in written.inputs.items()}
    for backend in ("numpy", "cpu"):
        assert agree(scans.evaluate(point, backend=backend),
                     written.evaluate(point, backend="numpy")), (source, backend)
        for mode in ("reverse", "forward"):
            assert agree(scans.jacobian(point, of="y", mode=mode, backend=backend),
                         written.jacobian(point, of="y", mode=mode, backend="numpy")), \
                (source, backend, mode)
        if written.outputs["y"] == ():  # reverse mode by inputs read whole (a whole gradient)
            assert agree(scans.grad(point, of="y", backend=backend),
                         written.grad(point, of="y", backend="numpy")), (source, backend)


def test_the_generator_makes_scans():
    """The comparison above is not vacuous: a generated loop does become a scan."""
    source = "input x\ninput v[2]\ninput d[3]\na = x\nu = v\nfor i in range(3) {\n" \
             "    a = a * d[i] + sin(i * a)\n}\noutput y = a\n"
    graph = build(source, 1).graph
    assert any(node.op == "region" and node.attr.carry for node in graph.nodes)
