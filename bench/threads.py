"""Where a batch should go parallel: `kernel.run(X)` serial vs over threads.

    python bench/threads.py [--quick] [--markdown] [--sizes 3 4 5 6 8]

For det gradient graphs of several sizes (straight-line kernels up to n = 6, the tape from
n = 8) and batches of 2 to 131,072 rows, time `kernel.run(X)` with
`diffdsl.backends.cpu.PARALLEL_WORK` set to 0 (always parallel) and to a huge value (always
serial); serial and parallel calls alternate round by round, and the median of the rounds is
reported. The parallel loop starts to win at some work = rows x nodes; the recommended
`PARALLEL_WORK` is the largest such crossover over the graphs (so a batch below it never
loses much by running serially).

Each configuration runs in its own process: Numba's default threading layer, then with
OMP_WAIT_POLICY=PASSIVE when that layer is OpenMP, then the workqueue layer. "after parallel"
is the cost of a small serial batch (64 rows, n = 5 when measured) run right after a parallel
call, against the same after a serial call: threads that spin after a parallel region steal
the CPU from the serial work that follows. "parallel, 1 thread" runs the parallel loop with
numba.set_num_threads(1): the speed-up splits into what the parallel loop's code gains on its
own (serial / 1 thread) and what the threads add ("from threads" = 1 thread / parallel).
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = [2, 8, 32, 128, 512, 2048, 8192, 32768, 131072]
SERIAL = 1 << 62


def worker(args) -> None:
    sys.path.insert(0, HERE)
    import numba
    import numpy as np
    from common import det_source

    import diffdsl
    from diffdsl.backends import cpu

    rng = np.random.default_rng(3)
    kernels = {}
    for n in args.sizes:
        prog = diffdsl.compile(det_source(n), backend="cpu")
        graph = prog.derivative("grad")
        cpu.TAPE_THRESHOLD = 0 if n >= 8 else 1 << 62
        kernels[n] = (prog, prog.kernel(graph), cpu.uses_tape(graph))
    # Warm both loops of every kernel (the parallel one is compiled on first use).
    for _, kernel, _ in kernels.values():
        X = rng.uniform(0.0, 1.0, (4, kernel.n_in))
        for work in (0, SERIAL):
            cpu.PARALLEL_WORK = work
            kernel.run(X)
    layer = numba.threading_layer()

    threads = numba.get_num_threads()

    def per_call(kernel, X, work, seconds, one_thread=False):
        cpu.PARALLEL_WORK = work
        numba.set_num_threads(1 if one_thread else threads)
        start = time.perf_counter()
        calls = 0
        while True:
            kernel.run(X)
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return elapsed / calls

    results = []
    for n, (_, kernel, tape) in kernels.items():
        for rows in ROWS:
            if rows * kernel.nodes > args.max_work:
                continue
            X = rng.uniform(0.0, 1.0, (rows, kernel.n_in))
            serial, parallel, one = [], [], []
            for _ in range(args.rounds):
                serial.append(per_call(kernel, X, SERIAL, args.seconds))
                parallel.append(per_call(kernel, X, 0, args.seconds))
                one.append(per_call(kernel, X, 0, args.seconds, one_thread=True))
            numba.set_num_threads(threads)
            results.append({"n": n, "nodes": kernel.nodes, "tape": tape, "rows": rows,
                            "serial": statistics.median(serial),
                            "parallel": statistics.median(parallel),
                            "one_thread": statistics.median(one)})

    # A small serial batch right after a big parallel one, against after a serial one.
    after = None
    small_n = 5 if 5 in kernels else min(kernels)
    _, small, _ = kernels[small_n]
    big_n = max(kernels)
    _, big, _ = kernels[big_n]
    Xs = rng.uniform(0.0, 1.0, (64, small.n_in))
    Xb = rng.uniform(0.0, 1.0, (max(2, int(2e6 // big.nodes)), big.n_in))
    timings = {"after parallel": [], "after serial": []}
    for _ in range(20):
        for label, work in (("after parallel", 0), ("after serial", SERIAL)):
            cpu.PARALLEL_WORK = work
            big.run(Xb)
            cpu.PARALLEL_WORK = SERIAL
            start = time.perf_counter()
            small.run(Xs)
            timings[label].append(time.perf_counter() - start)
    after = {label: statistics.median(v) for label, v in timings.items()}
    after["n"] = small_n
    print(json.dumps({"layer": layer, "threads": numba.get_num_threads(),
                      "results": results, "after": after}))


def crossover(points: list[tuple[int, float, float]]):
    """Work where parallel starts to win for good (log-interpolated), or None if never.

    `points` are (work, serial s, parallel s) in increasing work.
    """
    last_lose = None
    for k, (_work, serial, parallel) in enumerate(points):
        if parallel >= serial:
            last_lose = k
    if last_lose is None:
        return points[0][0] if points else None, "parallel wins at every size"
    if last_lose == len(points) - 1:
        return None, "serial wins at every size"
    (w0, s0, p0), (w1, s1, p1) = points[last_lose], points[last_lose + 1]
    r0, r1 = math.log(p0 / s0), math.log(p1 / s1)  # >= 0, then < 0
    frac = r0 / (r0 - r1)
    return round(math.exp(math.log(w0) + frac * (math.log(w1) - math.log(w0)))), \
        "interpolated"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", help="n of the det graphs (3 4 5 6 8)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.04, help="per measurement and round")
    ap.add_argument("--max-work", type=float, default=2e8, help="largest rows x nodes")
    ap.add_argument("--quick", action="store_true", help="n = 3, 5, 8; 3 rounds")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sizes is None:
        args.sizes = [3, 5, 8] if args.quick else [3, 4, 5, 6, 8]
    if args.quick:
        args.rounds = min(args.rounds, 3)
    if args.worker:
        worker(args)
        return
    sys.path.insert(0, HERE)
    import numba
    from common import machine, table

    from diffdsl.backends import cpu

    cache = tempfile.mkdtemp(prefix="diffdsl-threads-bench-")
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--sizes",
            *map(str, args.sizes), "--rounds", str(args.rounds), "--seconds",
            str(args.seconds), "--max-work", str(args.max_work)]

    def run(label, env_extra):
        env = dict(os.environ, DIFFDSL_CACHE_DIR=cache, **env_extra)
        print(f"running: {label}", file=sys.stderr)
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            print(f"{label}: failed: {done.stderr.strip()[-500:]}", file=sys.stderr)
            return None
        return json.loads(lines[-1])

    configs = [("default layer", {})]
    first = run(*configs[0])
    outcomes = [(configs[0][0], first)]
    if first and first["layer"] == "omp":
        outcomes.append(("omp, OMP_WAIT_POLICY=PASSIVE",
                         run("omp, OMP_WAIT_POLICY=PASSIVE",
                             {"NUMBA_THREADING_LAYER": "omp", "OMP_WAIT_POLICY": "PASSIVE"})))
    outcomes.append(("workqueue", run("workqueue", {"NUMBA_THREADING_LAYER": "workqueue"})))

    print(f"machine: {machine()}")
    print(f"numba.config.THREADING_LAYER = {numba.config.THREADING_LAYER!r}; "
          f"diffdsl PARALLEL_WORK now {cpu.PARALLEL_WORK:,}")
    summary = []
    for label, out in outcomes:
        if out is None:
            continue
        print()
        print(f"{label}: layer used {out['layer']}, {out['threads']} threads; time per "
              f"kernel.run(X) call, median of {args.rounds} rounds")
        rows = []
        by_graph: dict = {}
        for r in out["results"]:
            work = r["rows"] * r["nodes"]
            rows.append([r["n"], f"{r['nodes']:,}", "tape" if r["tape"] else "straight",
                         f"{r['rows']:,}", f"{work:,}", f"{r['serial'] * 1e6:,.1f}",
                         f"{r['parallel'] * 1e6:,.1f}", f"{r['serial'] / r['parallel']:.2f}",
                         f"{r['one_thread'] * 1e6:,.1f}",
                         f"{r['one_thread'] / r['parallel']:.2f}"])
            by_graph.setdefault((r["n"], r["nodes"]), []).append(
                (work, r["serial"], r["parallel"]))
        print(table(["n", "nodes", "path", "rows", "work", "serial us", "parallel us",
                     "speed-up", "parallel, 1 thread us", "from threads"], rows,
                    markdown=args.markdown, left=(2,)))
        found = []  # (work, at least): serial everywhere counts as beyond the largest work
        for (n, nodes), points in by_graph.items():
            work, how = crossover(points)
            found.append((points[-1][0], True) if work is None else (work, False))
            where = "-" if work is None else f"{work:,}"
            print(f"  n={n} ({nodes:,} nodes): parallel wins from work ~ {where} ({how})")
        after = out["after"]
        print(f"  a 64-row serial batch (n={after['n']}): "
              f"{after['after serial'] * 1e6:.1f} us after a serial call, "
              f"{after['after parallel'] * 1e6:.1f} us right after a parallel call")
        hi = max(found)
        lo = min(found)
        summary.append([label, out["layer"], hi, lo,
                        after["after parallel"] / after["after serial"]])
    print()

    def cell(found):
        work, at_least = found
        return (">" if at_least else "") + f"{work:,}"

    rows = [[label, layer, cell(hi), cell(lo), f"{penalty:.2f}"]
            for label, layer, hi, lo, penalty in summary]
    print(table(["configuration", "layer", "crossover work (max)", "(min)",
                 "serial-after-parallel slowdown"], rows, markdown=args.markdown, left=(0, 1)))
    for label, _, (work, at_least), _, _ in summary:
        if at_least:
            print(f"recommendation for {label}: PARALLEL_WORK above {work:,} (some graph ran "
                  f"faster serially at every batch measured)")
        else:
            print(f"recommendation for {label}: PARALLEL_WORK ~ {work:,} (largest crossover "
                  f"over the graphs)")


if __name__ == "__main__":
    main()
