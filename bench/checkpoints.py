"""A long `for` loop's gradient from checkpoints against the gradient that stores every
state (issue 22): the RK4 pendulum chain of bench/programs/rk4.dd (its loop carries 80
values a step) over more and more steps, each build in a fresh process with an empty cache:
the first gradient (the whole process), a gradient call, and the process's peak memory.

    python bench/checkpoints.py [--steps 10000 100000 1000000] [--markdown]

"stores every state" raises the `stored` limit past the loop's states; "checkpoints" sets
it to 1, so the gradient stores one state every sqrt(steps) steps and computes the others
again. Both gradients must agree.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine, run_child, table  # noqa: E402

CHILD = r"""
import json, resource, sys, time
start = time.perf_counter()
import numpy as np
import diffdsl
prog = diffdsl.compile(sys.argv[1], limits={"stored": int(sys.argv[2])})
rng = np.random.default_rng(0)
values = {k: rng.normal(size=s) * 0.5 for k, s in prog.inputs.items()}
grad = prog.grad(values)
first = time.perf_counter() - start
calls = []
for _ in range(3):
    t = time.perf_counter()
    prog.grad(values)
    calls.append(time.perf_counter() - t)
np.savez(sys.argv[3], **grad)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"first": first, "call": min(calls), "peak": peak}))
"""

BUILDS = [("stores every state", 10**15), ("checkpoints", 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    program = (HERE / "programs" / "rk4.dd").read_text()
    rows = []
    for steps in args.steps:
        source = program.replace("const steps = 2000", f"const steps = {steps}")
        found = {name: run_child(CHILD, [source, str(stored)], str(HERE.parent))
                 for name, stored in BUILDS}
        every = found["stores every state"]["grad"]
        for name, got in found.items():
            gap = max(float(np.max(np.abs(got["grad"][k] - every[k])) /
                            max(1.0, float(np.max(np.abs(every[k]))))) for k in every)
            rows.append([f"{steps:,} steps", name, f"{got['first']:.2f} s",
                         f"{got['call'] * 1e3:.1f} ms", f"{got['peak'] / 2**20:,.0f} MB",
                         f"{gap:.0e}"])
    print(machine())
    print(table(["loop", "gradient", "first gradient (whole process)", "a call",
                 "peak memory", "gap to storing every state"], rows, args.markdown))


if __name__ == "__main__":
    main()
