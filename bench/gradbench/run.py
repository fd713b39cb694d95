"""diffdsl beside GradBench's hand-written C++ on GradBench's default workloads (issue 22).

    python bench/gradbench/run.py [--evals det lse ...] [--rounds 5] [--timeout 60]
    python bench/gradbench/run.py --quick        # the smallest size of each eval, agreement

For each eval and size, smallest first, on the inputs GradBench's eval draws (workloads.py):
diffdsl's first derivative, timed as a whole process from its start with an empty cache
(`DIFFDSL_CACHE_DIR` a new folder); then diffdsl's derivative per call and the C++ one's,
in interleaved rounds (a diffdsl round, a C++ round, and again), the best round of each; their
ratio; and whether the values and derivatives agree to 1e-8 relative (to the larger of the
two's largest magnitudes). A size whose first derivative runs past --timeout is skipped, one
that diffdsl refuses is recorded with its reason, and a larger size of the same eval (every
dimension at least as large) is then skipped without running.

The C++ is GradBench's "manual" tool, built by manual.py from a GradBench checkout
(--gradbench, default $GRADBENCH_DIR) with g++ -O3 -march=native, on one thread as GradBench
builds it. diffdsl is imported from --diffdsl (default: this repository).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import manual
import numpy as np
import workloads

HERE = Path(__file__).resolve().parent
TOLERANCE = 1e-8


def relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return math.inf
    scale = max(np.max(np.abs(a), initial=0.0), np.max(np.abs(b), initial=0.0))
    return 0.0 if scale == 0 else float(np.max(np.abs(a - b)) / scale)


def calls_for(seconds: float, per_call: float) -> int:
    return max(1, min(10_000, int(seconds / max(per_call, 1e-9))))


class Lines:
    """The worker's JSON lines, read by a thread so that waiting for one can time out."""

    def __init__(self, proc: subprocess.Popen):
        self.queue: queue.Queue = queue.Queue()
        threading.Thread(target=self.pump, args=(proc.stdout,), daemon=True).start()

    def pump(self, stream) -> None:
        for line in stream:
            if line.startswith("{"):
                self.queue.put(json.loads(line))
        self.queue.put(None)

    def next(self, timeout: float = 3600) -> dict | None:
        """The next line, or None when the worker ended or `timeout` seconds passed first."""
        try:
            return self.queue.get(timeout=max(timeout, 0))
        except queue.Empty:
            return None


def refusal(message: str) -> str:
    """A short reason from a diffdsl error: the limit it names, else its first line."""
    for name, what in (("nodes", "node limit"), ("elements", "element limit"),
                       ("steps", "step limit"), ("unroll", "unroll limit")):
        if f"DIFFDSL_MAX_{name.upper()}" in message or f"{name}=" in message:
            return f"refused: {what}"
    return "refused: " + message.strip().splitlines()[0][:120]


def measure(case: workloads.Case, tool: manual.Manual, args, tmp: Path) -> dict:
    ev = workloads.EVALS[case.eval]
    row = {"eval": case.eval, "size": case.label, "load": os.getloadavg()[0]}
    # The C++ first: its value and derivative, and how long a call takes.
    once = manual.write_input(tmp / "once.json", case.cpp_input, 1)
    cpp_value, _ = tool.run(ev.name, ev.primal, once)
    cpp_derivative, times = tool.run(ev.name, ev.derivative, once)
    cpp_file = manual.write_input(tmp / "runs.json", case.cpp_input,
                                  calls_for(args.round_seconds, times[0]))
    # diffdsl in a fresh process with an empty cache.
    program = tmp / f"{ev.name}.dd"
    program.write_text(workloads.source(ev, case.consts))
    np.savez(tmp / "inputs.npz", **case.inputs)
    newton = ev.newton and ("sparse" if args.sparse_hessian else "diagonal")
    spec = {"of": ev.of, "wrt": ev.wrt, "newton": newton, "value_of": ev.value_of,
            "batch": ev.batch}
    cache = tmp / "cache"
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join([str(args.diffdsl), os.environ.get("PYTHONPATH", "")]))
    with open(tmp / "worker.err", "w") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, str(HERE / "worker.py"), str(program),
                                 str(tmp / "inputs.npz"), json.dumps(spec), str(tmp / "out.npz")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                text=True, env=env)
        try:
            lines = Lines(proc)
            ready = lines.next(start + args.timeout - time.perf_counter())
            first = time.perf_counter() - start
            if ready is None:
                proc.kill()
                row["status"] = (f"skipped: first derivative over {args.timeout:.0f} s"
                                 if proc.poll() is None or first >= args.timeout else
                                 "failed: " + (tmp / "worker.err").read_text()[-300:])
                return row
            if "error" in ready:
                row["status"] = refusal(ready["message"])
                row["message"] = ready["message"]
                return row
            row.update(status="ran", first=first, nodes=ready["nodes"])
            lines.next()  # the value and derivative are saved
            saved = np.load(tmp / "out.npz")
            row["value_gap"] = relative_gap(saved["value"], workloads.flat(cpp_value))
            row["derivative_gap"] = relative_gap(saved["derivative"],
                                                 workloads.flat(cpp_derivative, ev.wrt))
            proc.stdin.write("1\n")
            proc.stdin.flush()
            dd_calls = calls_for(args.round_seconds, lines.next()["mean"])
            dd_best = cpp_best = math.inf
            for _ in range(args.rounds):  # interleaved, so that busy spells cost both alike
                proc.stdin.write(f"{dd_calls}\n")
                proc.stdin.flush()
                dd_best = min(dd_best, lines.next()["mean"])
                _, times = tool.run(ev.name, ev.derivative, cpp_file)
                cpp_best = min(cpp_best, sum(times) / len(times))
            proc.stdin.write("quit\n")
            proc.stdin.flush()
            proc.wait(timeout=60)
            row.update(dd=dd_best, cpp=cpp_best, ratio=dd_best / cpp_best)
            return row
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def cpu() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if "model name" in line)
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def dominates(case: workloads.Case, smaller: workloads.Case) -> bool:
    return all(case.sizes[k] >= smaller.sizes[k] for k in smaller.sizes)


def seconds(t: float) -> str:
    return f"{t * 1e6:.1f} µs" if t < 1e-3 else f"{t * 1e3:.3f} ms" if t < 1 else f"{t:.2f} s"


def table(rows: list[dict]) -> str:
    out = ["| eval | size | first derivative (whole process) | diffdsl a call | C++ a call | "
           "ratio | agree (value, derivative gap) | nodes | load |",
           "|---|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        if r["status"] != "ran":
            out.append(f"| {r['eval']} | {r['size']} | {r['status']} | | | | | | "
                       f"{r['load']:.1f} |")
            continue
        ok = "yes" if max(r["value_gap"], r["derivative_gap"]) <= TOLERANCE else "**no**"
        out.append(f"| {r['eval']} | {r['size']} | {r['first']:.2f} s | {seconds(r['dd'])} | "
                   f"{seconds(r['cpp'])} | {r['ratio']:.3g} | {ok} ({r['value_gap']:.0e}, "
                   f"{r['derivative_gap']:.0e}) | {r['nodes']:,} | {r['load']:.1f} |")
    return "\n".join(out)


def summary(rows: list[dict]) -> str:
    out = ["| eval | sizes run | geometric mean ratio | worst ratio | first derivative, "
           "largest |", "|---|---:|---:|---:|---:|"]
    for name in dict.fromkeys(r["eval"] for r in rows):
        ran = [r for r in rows if r["eval"] == name and r["status"] == "ran"]
        total = sum(r["eval"] == name for r in rows)
        if not ran:
            out.append(f"| {name} | 0 of {total} | | | |")
            continue
        geo = math.exp(sum(math.log(r["ratio"]) for r in ran) / len(ran))
        out.append(f"| {name} | {len(ran)} of {total} | {geo:.3g} | "
                   f"{max(r['ratio'] for r in ran):.3g} | {max(r['first'] for r in ran):.2f} s |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", nargs="+", default=list(workloads.CASES),
                        choices=list(workloads.CASES))
    parser.add_argument("--sizes", type=int, default=None, help="the first N sizes of each")
    parser.add_argument("--quick", action="store_true",
                        help="the smallest size of each eval, one short round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.2)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--sparse-hessian", action="store_true",
                        help="k-means' Hessian diagonal from hessian(sparse=True), by colouring, "
                             "instead of hessian(diagonal=True)")
    parser.add_argument("--diffdsl", type=Path, default=HERE.parents[1])
    parser.add_argument("--gradbench", default=manual.DEFAULT_SOURCE)
    parser.add_argument("--json-include", default=manual.DEFAULT_JSON)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--tables", type=Path, help="print the tables of rows written earlier")
    args = parser.parse_args()
    if args.tables:
        rows = json.loads(args.tables.read_text())
        print(table(rows), summary(rows), sep="\n\n")
        return
    if args.quick:
        args.sizes, args.rounds, args.round_seconds = 1, 1, 0.05
    tool = manual.Manual(args.gradbench, args.json_include)
    print(f"# {cpu()}, {os.cpu_count()} cores, diffdsl from {args.diffdsl}, "
          f"Python {platform.python_version()}, GradBench {tool.commit[:12]}, "
          f"load {os.getloadavg()[0]:.1f} at the start", flush=True)
    rows = []
    for name in args.evals:
        stopped: list[tuple[workloads.Case, str]] = []
        for case in workloads.CASES[name]()[:args.sizes]:
            blocker = next(((c, s) for c, s in stopped if dominates(case, c)), None)
            if blocker:
                row = {"eval": name, "size": case.label, "load": os.getloadavg()[0],
                       "status": f"skipped: as {blocker[0].label} ({blocker[1]})"}
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    row = measure(case, tool, args, Path(tmp))
                if row["status"] != "ran":
                    stopped.append((case, row["status"]))
            rows.append(row)
            print(table([row]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    print()
    print(summary(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if r["status"] == "ran"
           and max(r["value_gap"], r["derivative_gap"]) > TOLERANCE]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
