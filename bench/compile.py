"""Compile time of the det-by-minors gradient: cold, warm, and straight-line vs tape.

    python bench/compile.py [--quick] [--markdown] [--sizes 3 4 ... 11] [--session 10000]

Every measurement runs in a new Python process, so nothing is warm unless we say so.

1. Cold and warm start, n = 3..11. "cold" is text to ready kernel (diffdsl.compile, the
   gradient graph, the kernel, the first gradient) with a new, empty DIFFDSL_CACHE_DIR; the
   tape interpreter, compiled once for all graphs, stays in Numba's cache beside the package,
   as it is for any user after the first run. "cold, no Numba cache" also points
   NUMBA_CACHE_DIR at a new empty folder, so the tape interpreter is compiled too: a first
   run ever. "warm" is a new process on the already filled cache: import diffdsl, compile
   (lowering and autodiff run again: only kernels are cached), first gradient; "process" is
   the same seen from outside, interpreter start-up included.
2. Straight-line vs tape: the det gradient graphs at n = 4..8 forced onto each path by setting
   `diffdsl.backends.cpu.TAPE_THRESHOLD` in the subprocess. For each, the kernel build time
   (generate and compile, cold) and the time of one gradient (`prog.grad`, one new matrix per
   call, and the kernel alone on a serial batch). A session of --session gradients costs
   build + session x gradient; the recommended threshold is the node count above which the
   tape's session is cheaper (linear interpolation between measured sizes). "break-even" is
   the number of gradients (or batch rows) after which the straight-line build has paid for
   itself.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Run in a new process: measures each step from text to a first gradient, then (mode
# "cross") the cost of one gradient. Prints one JSON line.
WORKER = r"""
import time
t0 = time.perf_counter()
import diffdsl
t_import = time.perf_counter() - t0
import json, statistics, sys
import numpy as np
from diffdsl.backends import cpu
args = json.loads(sys.argv[1])
if args["threshold"] is not None:
    cpu.TAPE_THRESHOLD = args["threshold"]
n = args["n"]
x = np.random.default_rng(1).uniform(0.0, 1.0, (n, n))
t = time.perf_counter()
prog = diffdsl.compile(args["source"], backend="cpu")
t_lower = time.perf_counter() - t
t = time.perf_counter()
graph = prog.derivative("grad")
t_autodiff = time.perf_counter() - t
t = time.perf_counter()
kernel = prog.kernel(graph)
t_kernel = time.perf_counter() - t
t = time.perf_counter()
g = prog.grad(A=x)["A"]
t_first = time.perf_counter() - t
total = time.perf_counter() - t0
exact = np.linalg.det(x) * np.linalg.inv(x).T
out = dict(n=n, nodes=len(graph.nodes), tape=cpu.uses_tape(graph), import_s=t_import,
           lower_s=t_lower, autodiff_s=t_autodiff, kernel_s=t_kernel, first_s=t_first,
           total_s=total, built=prog.stats.kernels_built,
           grad_error=float(np.abs(g - exact).max()))
if args["mode"] == "cross":
    rng = np.random.default_rng(2)
    def median_per_call(fn, xs, rounds=5):
        times = []
        for r in range(rounds):
            t = time.perf_counter()
            for xi in xs[r]:
                fn(xi)
            times.append((time.perf_counter() - t) / len(xs[r]))
        return statistics.median(times)
    t = time.perf_counter()
    prog.grad(A=x)
    one = time.perf_counter() - t
    reps = max(3, min(20000, int(0.15 / max(one, 1e-7))))
    X = rng.uniform(0.0, 1.0, (5, reps, n, n))
    out["grad_s"] = median_per_call(lambda xi: prog.grad(A=xi), [list(X[r]) for r in range(5)])
    cpu.PARALLEL_WORK = 1 << 62   # the serial loop: per-row cost without threads
    rows = X.reshape(-1, n * n)
    kernel.run(rows[:2])
    times = []
    for _ in range(5):
        t = time.perf_counter()
        kernel.run(rows)
        times.append((time.perf_counter() - t) / len(rows))
    out["row_s"] = statistics.median(times)
print(json.dumps(out))
"""


def det_source(n: int) -> str:
    sys.path.insert(0, HERE)
    from lowering import SOURCE
    return SOURCE.format(n=n)


def run(n: int, mode: str, cache: str, numba_cache: str | None, threshold=None,
        timeout: float = 600.0) -> dict:
    env = dict(os.environ)
    env["DIFFDSL_CACHE_DIR"] = cache
    env.pop("NUMBA_CACHE_DIR", None)
    if numba_cache is not None:
        env["NUMBA_CACHE_DIR"] = numba_cache
    payload = json.dumps({"n": n, "mode": mode, "threshold": threshold,
                          "source": det_source(n)})
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", WORKER, payload], capture_output=True,
                              text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    wall = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return {"error": f"exit {done.returncode}: {tail}"}
    out = json.loads(lines[-1])
    out["process_s"] = wall
    return out


def crossover(points: list[tuple[int, float, float]]):
    """Node count above which the tape's session is cheaper at every larger size measured.

    `points` are (nodes, straight session s, tape session s) in increasing node count.
    Returns (threshold or None, how): interpolated between the last size where the
    straight-line code wins and the next one; None when it wins at the largest size.
    """
    wins = [tape < straight for _, straight, tape in points]
    if not points or not wins[-1]:
        also = " (the tape wins at some smaller sizes)" if any(wins) else ""
        return None, "straight-line cheaper at the largest size measured" + also
    k = len(wins)
    while k > 0 and wins[k - 1]:
        k -= 1
    if k == 0:
        return points[0][0], "tape cheaper at every size measured"
    (n0, s0, t0), (n1, s1, t1) = points[k - 1], points[k]
    d0, d1 = s0 - t0, s1 - t1  # <= 0, then > 0
    return round(n0 + (n1 - n0) * (-d0) / (d1 - d0)), "interpolated"


def break_even(straight: dict, tape: dict, per: str) -> str:
    """Evaluations after which the straight-line build has paid for itself."""
    saved = tape[per] - straight[per]
    extra = straight["kernel_s"] - tape["kernel_s"]
    if extra <= 0:
        return "0"
    if saved <= 0:
        return "never"
    return f"{extra / saved:,.0f}"


def report(label: str, threshold, how: str, points) -> None:
    if threshold is None:
        largest = f"{points[-1][0]:,}" if points else "?"
        print(f"{label}: {how}; TAPE_THRESHOLD >= {largest} nodes")
    else:
        print(f"{label}: TAPE_THRESHOLD ~ {threshold:,} nodes or less ({how})" if
              how.startswith("tape cheaper at every") else
              f"{label}: TAPE_THRESHOLD ~ {threshold:,} nodes ({how})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", help="n for cold/warm (default 3..11)")
    ap.add_argument("--cross-sizes", type=int, nargs="+",
                    help="n for straight-line vs tape (default 4..8)")
    ap.add_argument("--session", type=int, default=10_000,
                    help="gradients in the typical session of the recommendation")
    ap.add_argument("--batch-session", type=int, default=1_000_000,
                    help="rows in the batched session compared as well")
    ap.add_argument("--quick", action="store_true",
                    help="cold/warm at n = 3, 5, 8, 11; crossover at n = 4..7")
    ap.add_argument("--no-strict", action="store_true",
                    help="skip the 'no Numba cache' cold column")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.sizes is None:
        args.sizes = [3, 5, 8, 11] if args.quick else list(range(3, 12))
    if args.cross_sizes is None:
        args.cross_sizes = [4, 5, 6, 7] if args.quick else [4, 5, 6, 7, 8]
    sys.path.insert(0, HERE)
    from common import fmt_s, machine, table

    log = sys.stderr
    scratch = tempfile.mkdtemp(prefix="diffdsl-compile-bench-")
    notes = []
    try:
        rows = []
        for n in args.sizes:
            cache = os.path.join(scratch, f"cold-{n}")
            cold = run(n, "cold", cache, None)
            warm = run(n, "cold", cache, None)
            strict = None
            if not args.no_strict:
                strict = run(n, "cold", os.path.join(scratch, f"strict-{n}"),
                             os.path.join(scratch, f"numba-{n}"))
            print(f"n={n}: cold {cold}\n  warm {warm}\n  strict {strict}", file=log)
            for label, res in (("cold", cold), ("warm", warm), ("strict", strict)):
                if res and "error" in res:
                    notes.append(f"n={n} {label}: {res['error']}")
                elif res and res["grad_error"] > 1e-9:
                    notes.append(f"n={n} {label}: gradient off by {res['grad_error']:.1e}")
            if "error" in cold or "error" in warm:
                continue
            compiled = cold["lower_s"] + cold["autodiff_s"] + cold["kernel_s"] + cold["first_s"]
            warm_s = warm["total_s"]
            if warm["built"]:
                notes.append(f"n={n}: the warm start compiled {warm['built']} kernel(s)")
            strict_s = None
            if strict and "error" not in strict:
                strict_s = strict["lower_s"] + strict["autodiff_s"] + strict["kernel_s"] + \
                    strict["first_s"]
            rows.append([n, f"{cold['nodes']:,}", "tape" if cold["tape"] else "straight",
                         fmt_s(cold["lower_s"]), fmt_s(cold["autodiff_s"]),
                         fmt_s(cold["kernel_s"]), fmt_s(compiled, 2), fmt_s(strict_s, 2),
                         fmt_s(warm["import_s"]), fmt_s(warm_s, 2),
                         fmt_s(warm["process_s"], 2)])

        print("cold and warm start: det gradient, text to first gradient, each in a new process")
        print(f"machine: {machine()}")
        print(table(["n", "grad nodes", "path", "lower s", "autodiff s", "kernel s",
                     "cold s", "cold, no Numba cache s", "warm: import s", "warm s",
                     "warm process s"], rows, markdown=args.markdown, left=(2,)))
        print()

        cross_rows = []
        points = []
        for n in args.cross_sizes:
            per_path = {}
            for path, threshold in (("straight", 1 << 62), ("tape", 0)):
                res = run(n, "cross", os.path.join(scratch, f"cross-{path}-{n}"), None,
                          threshold=threshold)
                print(f"n={n} {path}: {res}", file=log)
                if "error" in res:
                    notes.append(f"crossover n={n} {path}: {res['error']}")
                    break
                per_path[path] = res
            if len(per_path) < 2:
                continue
            s, t = per_path["straight"], per_path["tape"]
            session_s = s["kernel_s"] + args.session * s["grad_s"]
            session_t = t["kernel_s"] + args.session * t["grad_s"]
            points.append((s["nodes"], s, t))
            cross_rows.append([n, f"{s['nodes']:,}", fmt_s(s["kernel_s"], 2),
                               fmt_s(t["kernel_s"], 3), f"{s['grad_s'] * 1e6:.1f}",
                               f"{t['grad_s'] * 1e6:.1f}", f"{s['row_s'] * 1e6:.2f}",
                               f"{t['row_s'] * 1e6:.2f}", fmt_s(session_s, 2),
                               fmt_s(session_t, 2),
                               "tape" if session_t < session_s else "straight",
                               break_even(s, t, "grad_s"), break_even(s, t, "row_s")])
        print(f"straight-line vs tape: kernel build (cold) and cost per gradient; session = "
              f"build + {args.session:,} gradients via prog.grad")
        print(table(["n", "grad nodes", "straight build s", "tape build s",
                     "straight grad us", "tape grad us", "straight row us", "tape row us",
                     "straight session s", "tape session s", "cheaper", "break-even grads",
                     "break-even rows"], cross_rows,
                    markdown=args.markdown))
        for session in sorted({1_000, args.session, 100_000, 1_000_000}):
            threshold, how = crossover(
                [(nodes, s["kernel_s"] + session * s["grad_s"],
                  t["kernel_s"] + session * t["grad_s"]) for nodes, s, t in points])
            mark = "recommendation" if session == args.session else "for comparison"
            report(f"{mark}: sessions of {session:,} single gradients (prog.grad)",
                   threshold, how, points)
        rows_session = args.batch_session
        threshold, how = crossover(
            [(nodes, s["kernel_s"] + rows_session * s["row_s"],
              t["kernel_s"] + rows_session * t["row_s"]) for nodes, s, t in points])
        report(f"for comparison: a batched session of {rows_session:,} rows (serial loop)",
               threshold, how, points)
        for note in notes:
            print(f"note: {note}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
