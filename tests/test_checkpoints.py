"""A scan's gradient from checkpoints (graph/checkpoints.py): past the `stored` limit the
pullback stores one state per segment of about sqrt(n) iterations and computes the others
again. Forced here with `stored=1` on every scan program of test_scans and on generated
ones, it must agree with the loop written out (the reference semantics) and with the
gradient that stores every state, on the numpy interpreter and the CPU, in reverse mode and
through Hessians, and store far fewer values."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from test_regions_fuzz import agree
from test_regions_fuzz import build as build_with
from test_scans import PROGRAMS, close, point
from test_scans_fuzz import scan_programs

import diffdsl
from diffdsl import limits
from diffdsl.graph import checkpoints

CHECKPOINTED = {"stored": 1}

# Streams forwards and backwards (windows of two, over the segments and inside them), and
# an input read whole by a long sum inside the scan's body (in place in every segment).
WINDOWS = """
input w[100]
input x0
input v[81, 2]
h = x0
g = [x0, 1.0]
for t in range(80) {
    h = 0.5 * h + 0.01 * sum(sin(w[j] * h + v[t + 1, 0]) for j in range(100)) + g[1] * 0.01
    g = [g[0] * 0.9 + v[80 - t, 1] * h, cos(g[0])]
}
output y = h + g[0]
"""
SCANS = dict(PROGRAMS, windows=WINDOWS)


def regions(graph):
    """Every region of `graph`, those inside bodies too."""
    for node in graph.nodes:
        if node.op == "region":
            yield node.attr
            yield from regions(node.attr.body)


def stored_values(graph) -> int:
    """The most values one scan of the graph's derivative holds (its stored states)."""
    return max((r.size for r in regions(graph) if r.carry), default=0)


def test_segments_are_about_the_square_root_of_the_iterations():
    with limits.using(stored=1000):
        assert checkpoints.segment_length(100, 10) == 0  # within the limit: store all
        for n in (101, 400, 401, 999, 10**6 + 3):
            k = checkpoints.segment_length(n, 10)
            assert k * k >= n > (k - 1) * (k - 1)
    with limits.using(stored=1):
        assert checkpoints.segment_length(3, 10) == 0  # too short to split


@pytest.mark.parametrize("name", sorted(SCANS))
def test_checkpointed_gradient_agrees_with_the_loop_written_out(name):
    source = SCANS[name]
    stored = diffdsl.compile(source, cache=False)
    marked = diffdsl.compile(source, cache=False, limits=CHECKPOINTED)
    with limits.using(unroll=10**9):
        written = diffdsl.compile(source, cache=False)
    of = next(iter(stored.outputs))
    every, fewer = stored.derivative("grad", of=of), marked.derivative("grad", of=of)
    # the segments' loop nests a scan that recomputes its states, and the biggest store
    # of states shrinks (by the square root of the trip count, past a few values)
    assert any(any(s.carry for s in regions(r.body)) for r in regions(fewer) if r.carry)
    assert stored_values(fewer) < stored_values(every)
    x = point(stored)
    rng = np.random.default_rng(2)
    tangents = {n: rng.normal(size=s) for n, s in stored.inputs.items()}
    small = sum(np.prod(s) for s in stored.inputs.values()) <= 8
    for backend in ("numpy", "cpu"):
        reference = written.grad(x, of=of, backend="numpy")
        close(marked.grad(x, of=of, backend=backend), reference)
        close(marked.grad(x, of=of, backend=backend), stored.grad(x, of=of, backend=backend))
        close(marked.hvp(tangents, x, of=of, backend=backend),  # forward over the segments
              written.hvp(tangents, x, of=of, backend="numpy"))
        if small:
            close(marked.hessian(x, of=of, backend=backend),
                  written.hessian(x, of=of, backend="numpy"))


def test_checkpoints_store_about_the_square_root():
    """An ODE of 2,000 steps: every state stored is 2,000 rows of the state; from
    checkpoints, about sqrt(2,000) rows, twice."""
    source = PROGRAMS["ode"].replace("range(100)", "range(2000)")
    stored = diffdsl.compile(source, cache=False)
    marked = diffdsl.compile(source, cache=False, limits=CHECKPOINTED)
    every = stored_values(stored.derivative("grad", of="loss"))
    fewer = stored_values(marked.derivative("grad", of="loss"))
    state = 3  # h; the first and last steps are written out, 1,998 stay a loop
    assert every >= 1998 * state
    assert fewer <= (2 * (math.isqrt(1998) + 1) + 1) * state
    x = point(stored)
    close(marked.grad(x, of="loss", backend="cpu"), stored.grad(x, of="loss", backend="cpu"))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=scan_programs(most=12))
def test_generated_checkpointed_scans_agree_with_their_loops_written_out(source):
    written = build_with(source, 10**9)
    try:
        with limits.using(unroll=1):
            marked = diffdsl.compile(source, cache=False, limits=CHECKPOINTED)
    except diffdsl.DiffDSLError as exc:
        assert type(exc) is written, source
        return
    assert not isinstance(written, type), source
    rng = np.random.default_rng(len(source))
    x = {n: rng.normal(size=s) for n, s in written.inputs.items()}
    for backend in ("numpy", "cpu"):
        assert agree(marked.jacobian(x, of="y", mode="reverse", backend=backend),
                     written.jacobian(x, of="y", mode="reverse", backend="numpy")), \
            (source, backend)


def test_the_limit_is_set_from_the_command_line(tmp_path):
    path = tmp_path / "ode.dd"
    path.write_text(PROGRAMS["ode"])
    inputs = ["--inputs", "y0=[0.5, -0.2, 0.3]", "k=0.7", "--json"]

    def grad(*extra):
        done = subprocess.run([sys.executable, "-m", "diffdsl", "grad", str(path), *inputs,
                               *extra], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
    every, fewer = grad(), grad("--limit", "stored=10")
    assert agree({k: np.asarray(v) for k, v in fewer["grad"].items()},
                 {k: np.asarray(v) for k, v in every["grad"].items()})
