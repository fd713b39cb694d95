"""The value path beside its sibling: `prog(A=x)` against `prog.grad(A=x)`, and a float32
batch against a float64 one (issue 23, item 7).

    python bench/value_paths.py [--rows 1000000] [--calls 20000] [--repeats 7]

Single points: the determinant by minors of a 4x4 matrix, a new matrix each call (all drawn
before the timed loop), after a first call has compiled both kernels; the median of
`--repeats` loops of `--calls` calls, in microseconds a call. The value alone does less work
than its gradient, so it must not take longer.

Batches: `prog.evaluate` and `prog.grad` of the same determinant over `--rows` matrices, in
each dtype: given as float64 data (what NumPy makes by default, converted for a float32
program) and given in the program's own dtype. The median of `--repeats` runs, in
milliseconds: wall-clock time, and the process's CPU time (every thread's, system time
included), which a machine shared with other work disturbs less. A float32 kernel moves half
the bytes of a float64 one, so it must not be slower. The threads the CPU backend uses are
`DIFFDSL_NUM_THREADS` (default: every core).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import diffdsl

DET = """
input A[4, 4]

def det(M) =
    if rows(M) == 1 then M[0, 0]
    else sum((-1)**j * M[0, j] * det(minor(M, 0, j)) for j in range(cols(M)))

output d = det(A)
"""


def per_call_us(f, xs, repeats: int) -> float:
    """Median over `repeats` loops of the time of one call of `f`, in microseconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for x in xs:
            f(x)
        times.append((time.perf_counter() - start) / len(xs))
    return statistics.median(times) * 1e6


def batch_ms(f, repeats: int) -> tuple[float, float]:
    """Medians of the wall-clock and CPU times of `f()`, in milliseconds."""
    f()  # the first call compiles
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        f()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} cores, "
          f"DIFFDSL_NUM_THREADS={os.environ.get('DIFFDSL_NUM_THREADS', 'unset')}")

    rng = np.random.default_rng(0)
    prog = diffdsl.compile(DET, backend="cpu")
    xs = list(rng.uniform(0, 1, (args.calls, 4, 4)))
    assert abs(prog(A=xs[0]) - np.linalg.det(xs[0])) < 1e-12
    np.testing.assert_allclose(prog.grad(A=xs[0])["A"],
                               np.linalg.det(xs[0]) * np.linalg.inv(xs[0]).T, rtol=1e-9)
    value = per_call_us(lambda x: prog(A=x), xs, args.repeats)
    grad = per_call_us(lambda x: prog.grad(A=x), xs, args.repeats)
    print(f"\ndet 4x4, one matrix a call ({args.calls:,} calls, median of {args.repeats})")
    print(f"  {'prog(A=x)':<18}{value:8.2f} us")
    print(f"  {'prog.grad(A=x)':<18}{grad:8.2f} us")

    data = rng.uniform(0, 1, (args.rows, 4, 4))
    own = {"float64": data, "float32": data.astype(np.float32)}
    progs = {dt: diffdsl.compile(DET, backend="cpu", dtype=dt) for dt in own}
    print(f"\ndet 4x4 over {args.rows:,} matrices, ms (median of {args.repeats})")
    print(f"  {'':<40}{'float64':>16}{'float32':>16}")
    print(f"  {'':<40}{'wall    cpu':>16}{'wall    cpu':>16}")
    for what, given in (("given float64 data", lambda dt: data),
                        ("given data in its own dtype", lambda dt: own[dt])):
        for call in ("evaluate", "grad"):
            row = []
            for dt, p in progs.items():
                x = given(dt)
                if call == "evaluate":
                    row.append(batch_ms(lambda p=p, x=x: p.evaluate({"A": x}), args.repeats))
                else:
                    row.append(batch_ms(lambda p=p, x=x: p.grad(A=x), args.repeats))
            cells = "".join(f"{wall:8.1f}{cpu:8.1f}" for wall, cpu in row)
            print(f"  {call + ', ' + what:<40}{cells}")


if __name__ == "__main__":
    main()
