"""How long `diffdsl check` takes on the recursive determinant by minors, n = 3 to 6.

    python bench/check_time.py [--min 3] [--max 6] [--points 3]

Prints, per n, the graph's node count, the time to lower, the time of `check` (symbolic and
finite differences together) and how the symbolic comparison decided its elements.
"""

from __future__ import annotations

import argparse
import time

from lowering import SOURCE  # the recursive determinant, beside this file

import diffdsl
from diffdsl.symbolic.check import check


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min", type=int, default=3)
    ap.add_argument("--max", type=int, default=6)
    ap.add_argument("--points", type=int, default=3)
    args = ap.parse_args()
    print(f"{'n':>3} {'nodes':>7} {'lower (s)':>10} {'check (s)':>10}  ok    symbolic")
    for n in range(args.min, args.max + 1):
        start = time.perf_counter()
        graph = diffdsl.compile(SOURCE.format(n=n), filename=f"det{n}.dd").graph
        lowered = time.perf_counter() - start
        start = time.perf_counter()
        report = check(graph, points=args.points)
        elapsed = time.perf_counter() - start
        sym = report["symbolic"]["d"]["A"]
        counts = ", ".join(f"{v} {k}" for k, v in sym["counts"].items())
        print(f"{n:>3} {len(graph):>7} {lowered:>10.3f} {elapsed:>10.3f}  {report['ok']!s:5} "
              f"{sym['status']} ({counts})", flush=True)


if __name__ == "__main__":
    main()
