"""What running a big batch in chunks costs: the same batch in one piece and in chunks.

    python bench/chunks.py [--rows 1000000] [--sizes 5 6] [--repeats 7] [--markdown]

A CPU batch whose work (rows x nodes) passes `backends.cpu.CHUNK_WORK` runs in chunks of rows,
so that a progress bar can count them and Ctrl-C is heard between them. Here one program
(the gradient of det by minors) evaluates one batch both ways in turn, in one process:
`CHUNK_WORK` as shipped, then so large that the batch is one piece, alternating `--repeats`
times; the medians and their ratio are reported, and the two results are compared. No bar is
drawn (stderr is not a terminal here, or `--quiet` is implied): this is the cost of the
chunks themselves, which the bar's updates add microseconds to.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from common import det_source, fmt_s, machine, scratch_cache, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--sizes", type=int, nargs="+", default=[5, 6])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    scratch_cache()
    import diffdsl
    from diffdsl.backends import cpu

    diffdsl.set_quiet(True)
    shipped = cpu.CHUNK_WORK
    rows = []
    for n in args.sizes:
        prog = diffdsl.compile(det_source(n), backend="cpu")
        X = np.random.default_rng(n).uniform(0.0, 1.0, (args.rows, n, n))
        nodes = len(prog.derivative("grad").nodes)
        chunk = max(1, shipped // nodes)
        results, times = {}, {"chunks": [], "one piece": []}
        for k in range(args.repeats + 1):  # the first round warms up (threads, pages)
            order = (("chunks", shipped), ("one piece", 10**30))
            for way, work in order[::1 if k % 2 else -1]:  # each goes first in turn
                cpu.CHUNK_WORK = work
                start = time.perf_counter()
                results[way] = prog.grad(A=X)["A"]
                if k:
                    times[way].append(time.perf_counter() - start)
        cpu.CHUNK_WORK = shipped
        assert np.array_equal(results["chunks"], results["one piece"])
        t_chunks, t_one = (statistics.median(times[w]) for w in ("chunks", "one piece"))
        rows.append([n, f"{nodes:,}", f"{args.rows:,}", -(-args.rows // chunk), fmt_s(t_one),
                     fmt_s(t_chunks), f"{t_chunks / t_one:.3f}"])
        del X, results
    print(f"one batch of det gradients, in one piece and in chunks of CHUNK_WORK = "
          f"{shipped:,} rows x nodes; median of {args.repeats} calls, alternating")
    print(f"machine: {machine()}\n")
    print(table(["n", "grad nodes", "rows", "chunks", "one piece s", "chunks s", "ratio"],
                rows, args.markdown))


if __name__ == "__main__":
    main()
