"""Long loops split over threads within one evaluation (issue 22): a gradient call on one
thread and on every core (`DIFFDSL_NUM_THREADS`), and the first gradient (a whole process,
empty cache), for programs with their data inside, beside an earlier checkout's.

    python bench/spread.py [--threads 2] [--rounds 10] [--old PATH] [--only NAME ...]

One thread is the reference here: the same kernel with its loops run whole, called by
turns with the split one in the same process, so the ratio is what the split gives on this
machine (bench/nested.py and bench/gradbench compare with references written by hand:
Numba's parallel loops, GradBench's C++). `--old PATH` runs the same programs with the
diffdsl at PATH (`git worktree add /tmp/old <commit>`) in the same run, to show that code
that stays on one thread did not get slower (there both columns run the loops whole).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine, run_child, table  # noqa: E402
from nested import KERNEL  # noqa: E402

EXAMPLES = HERE.parent / "examples" / "data"


def _sized(name: str, **sizes) -> str:
    """An example program of examples/data with its constants set to `sizes`."""
    lines = (EXAMPLES / f"{name}.dd").read_text().splitlines()
    for key, value in sizes.items():
        lines = [f"const {key} = {value}" if line.startswith(f"const {key} =") else line
                 for line in lines]
    return "\n".join(lines) + "\n"


PROGRAMS = {
    "kernel sum n = 1,000, m = 10,000": KERNEL.format(n=1000, m=10000),
    "k-means n = 10,000, d = 16, k = 100": _sized("kmeans", n=10000, d=16, k=100),
    "GMM n = 10,000, d = 16, k = 25": _sized("gmm", n=10000, d=16, k=25),
    "MLP n = 4,096, d = 32, h = 32": _sized("mlp", n=4096),
}


# The first gradient on every thread, then rounds of calls on one thread and on `threads`
# by turns, in one process: this machine's speed drifts by tens of percent within a minute.
CHILD = r"""
import json, os, sys, time
start = time.perf_counter()
import numpy as np
import diffdsl
prog = diffdsl.compile(sys.argv[1])
rng = np.random.default_rng(0)
values = {k: rng.normal(size=s) for k, s in prog.inputs.items()}
grad = prog.grad(values)
first = time.perf_counter() - start
calls = {"1": [], sys.argv[2]: []}
for _ in range(int(sys.argv[3])):
    for threads in calls:
        os.environ["DIFFDSL_NUM_THREADS"] = threads
        prog.grad(values)
        for _ in range(3):
            t = time.perf_counter()
            prog.grad(values)
            calls[threads].append(time.perf_counter() - t)
os.environ["DIFFDSL_NUM_THREADS"] = "1"
np.savez(sys.argv[4], **prog.grad(values))
print(json.dumps({"first": first, "calls": calls}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--old", help="the path of another diffdsl checkout, run beside")
    ap.add_argument("--only", nargs="+", help="programs whose name starts so")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    builds = [("this checkout", None)] + ([(f"old ({args.old})", args.old)] if args.old
                                           else [])
    rows = []
    for name, source in PROGRAMS.items():
        if args.only and not any(name.startswith(s) for s in args.only):
            continue
        for build, path in builds:
            got = run_child(CHILD, [source, str(args.threads), str(args.rounds)], path,
                            timeout=900)
            one, many = (np.array(got["calls"][k]) for k in ("1", str(args.threads)))
            rows.append([name, build, f"{got['first']:.2f} s",
                         f"{np.median(one) * 1e3:.2f} ms ({one.min() * 1e3:.2f})",
                         f"{np.median(many) * 1e3:.2f} ms ({many.min() * 1e3:.2f})",
                         f"{np.median(one) / np.median(many):.2f}"])
    print(machine())
    print(table(["program", "diffdsl", "first gradient (whole process)",
                 "a call on 1 thread: median (best)", f"on {args.threads}: median (best)",
                 "speed-up (medians)"], rows, args.markdown))


if __name__ == "__main__":
    main()
