"""Long loops split over threads within one evaluation (issue 22): a gradient call on one
thread and on every core (`DIFFDSL_NUM_THREADS`), and the first gradient (a whole process,
empty cache), for programs with their data inside, beside an earlier checkout's.

    python bench/spread.py [--threads 2] [--calls 5] [--old PATH] [--only NAME ...]

One thread is the reference here: the same kernel with its loops run whole, so the ratio is
what the split gives on this machine (bench/nested.py and bench/gradbench compare with
references written by hand: Numba's parallel loops, GradBench's C++). `--old PATH` runs the
same programs with the diffdsl at PATH (`git worktree add /tmp/old <commit>`) in the same
run, to show that code that stays on one thread did not get slower.
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
from nested import CHILD, KERNEL  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--calls", type=int, default=5)
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
        one = None
        for build, path in builds:
            for threads in (1, args.threads):
                os.environ["DIFFDSL_NUM_THREADS"] = str(threads)
                got = run_child(CHILD, [source, str(args.calls)], path, timeout=900)
                if one is None:
                    one = got
                gap = max(float(np.max(np.abs(got["grad"][k] - one["grad"][k])) /
                                max(1.0, float(np.max(np.abs(one["grad"][k])))))
                          for k in one["grad"])
                rows.append([name, build, str(threads), f"{got['first']:.2f} s",
                             f"{got['call'] * 1e3:.2f} ms", f"{one['call'] / got['call']:.2f}",
                             f"{gap:.0e}"])
    os.environ.pop("DIFFDSL_NUM_THREADS", None)
    print(machine())
    print(table(["program", "diffdsl", "threads", "first gradient (whole process)", "a call",
                 "speed-up over this checkout on 1 thread", "gap to it"], rows, args.markdown))


if __name__ == "__main__":
    main()
