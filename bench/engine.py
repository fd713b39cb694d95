"""The kernel engine against its targets, side by side in one run (README, "Performance").

    python bench/engine.py [--quick] [--markdown] [--parts 1 2 3 4 5]

1. Single point: `prog.grad(A=x)` and `prog.grad(A=x, backend="cpu")` (the public calls,
   compiled before timing) against the memoised hand-written Numba gradient of
   bench/common.py called the same way, det by minors, n = 4..11. Ratios are time / reference.
2. Batches of 10^5 and 10^6 matrices: n = 3 against a straight-line cofactor kernel (the
   strongest hand code for 3x3; threaded with `prange` or serial, whichever is faster at that
   size), n = 5 against the memoised Numba gradient with `prange`. Ratios are rate / reference
   (above 1: diffdsl faster).
3. Compile: kernel build per node (text to loaded machine code) for det gradients and a
   10^6-element Jacobian; whole processes: cold `diffdsl grad` (empty cache) and warm.
4. Memory: RSS added per program for 2,000 distinct programs, and after they are dropped.
5. Threads: a batch on one thread against all threads, by rows x nodes, to place
   `cpu.PARALLEL_WORK` (the work below which a batch runs serially).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import (
    det_source,
    machine,
    per_call,
    reference_grad,
    reference_grad_batch,
    table,
    uniform_draw,
)
from numba import njit, prange

ROOT = Path(__file__).resolve().parent.parent


def _cofactor_grad3(X):
    """Gradient of det for a batch of 3x3 matrices: the cofactor matrix, straight-line."""
    G = np.empty_like(X)
    for r in prange(X.shape[0]):
        a, b, c = X[r, 0, 0], X[r, 0, 1], X[r, 0, 2]
        d, e, f = X[r, 1, 0], X[r, 1, 1], X[r, 1, 2]
        g, h, i = X[r, 2, 0], X[r, 2, 1], X[r, 2, 2]
        G[r, 0, 0] = e * i - f * h
        G[r, 0, 1] = f * g - d * i
        G[r, 0, 2] = d * h - e * g
        G[r, 1, 0] = c * h - b * i
        G[r, 1, 1] = a * i - c * g
        G[r, 1, 2] = b * g - a * h
        G[r, 2, 0] = b * f - c * e
        G[r, 2, 1] = c * d - a * f
        G[r, 2, 2] = a * e - b * d
    return G


# Both the threaded and the serial loop: the reference is whichever is faster at each size.
cofactor_grad3 = njit(parallel=True)(_cofactor_grad3)
cofactor_grad3_serial = njit(_cofactor_grad3)


def best(fn, x, reps: int, rounds: int) -> float:
    fn(x)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(reps):
            fn(x)
        times.append((time.perf_counter() - start) / reps)
    return min(times)


def single_point(args, diffdsl) -> list:
    rows = []
    for n in range(4, 12):
        prog = diffdsl.compile(det_source(n), backend="cpu", cache=False)
        x0 = np.random.default_rng(n).uniform(0, 1, (n, n))
        g = prog.grad(A=x0)["A"]
        assert np.allclose(g, reference_grad(x0), rtol=1e-9, atol=1e-12)
        t_api = per_call(lambda x, prog=prog: prog.grad(A=x), uniform_draw(n, n), args.rounds,
                         args.target)["seconds"]
        t_cpu = per_call(lambda x, prog=prog: prog.grad(A=x, backend="cpu"), uniform_draw(n, n),
                         args.rounds, args.target)["seconds"]
        t_ref = per_call(reference_grad, uniform_draw(n, n), args.rounds,
                         args.target)["seconds"]
        rows.append([n, f"{len(prog.derivative('grad').nodes):,}", f"{t_api * 1e6:.2f}",
                     f"{t_cpu * 1e6:.2f}", f"{t_ref * 1e6:.2f}", f"{t_api / t_ref:.2f}",
                     f"{t_cpu / t_ref:.2f}"])
        print(rows[-1], file=sys.stderr)
    return rows


def batches(args, diffdsl) -> list:
    rows = []
    for n, refs, name in ((3, (cofactor_grad3, cofactor_grad3_serial), "cofactor"),
                          (5, (reference_grad_batch,), "memoised prange")):
        prog = diffdsl.compile(det_source(n), backend="cpu", cache=False)
        for size in (10**5, 10**6):
            X = np.random.default_rng(size).uniform(0, 1, (size, n, n))
            got = prog.grad(A=X)["A"]
            for ref in refs:
                assert np.allclose(got, ref(X), rtol=1e-9, atol=1e-12)
            reps = 3 if size == 10**6 else 10
            t_dd = best(lambda x, prog=prog: prog.grad(A=x), X, reps, args.rounds)
            t_ref = min(best(ref, X, reps, args.rounds) for ref in refs)
            rows.append([n, f"{size:,}", name, f"{size / t_dd / 1e6:.1f}",
                         f"{size / t_ref / 1e6:.1f}", f"{t_ref / t_dd:.2f}"])
            print(rows[-1], file=sys.stderr)
    return rows


def compile_cost(diffdsl) -> list:
    from diffdsl.backends import cpu
    rows = []
    cases = [(f"det n={n} gradient", det_source(n), "grad") for n in (5, 7, 8, 9, 10, 11)]
    cases.append(("x[1000] * 2, Jacobian", "input x[1000]\noutput y = x * 2\n", "jacobian"))
    for label, src, kind in cases:
        prog = diffdsl.compile(src, backend="cpu", cache=False)
        graph = prog.derivative(kind)
        start = time.perf_counter()
        cpu.Kernel(graph, "float64")
        build = time.perf_counter() - start
        nodes = len(graph.nodes)
        outputs = sum(p.size for p in graph.outputs.values())
        rows.append([label, f"{nodes:,}", f"{outputs:,}", f"{build:.3f}",
                     f"{build / nodes * 1e6:.1f}"])
        print(rows[-1], file=sys.stderr)
    return rows


def processes() -> list:
    rows = []
    env = dict(os.environ)
    cases = [
        ("det3 grad", [str(ROOT / "examples" / "det3.dd"), "--inputs",
                       "A=[[2,0,1],[1,3,2],[1,1,1]]"], "grad"),
        ("det n=8 grad", None, "grad"),
        ("det n=11 grad", None, "grad"),
        ("x[1000]*2 jacobian", None, "jacobian"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for label, argv, command in cases:
            if argv is None:
                path = Path(tmp) / (label.replace(" ", "_").replace("*", "x") + ".dd")
                if label.startswith("det"):
                    n = int(label.split("=")[1].split()[0])
                    path.write_text(det_source(n))
                    value = np.random.default_rng(0).uniform(0, 1, (n, n)).tolist()
                    argv = [str(path), "--inputs", f"A={value}"]
                else:
                    path.write_text("input x[1000]\noutput y = x * 2\n")
                    argv = [str(path), "--inputs", f"x={list(range(1000))}", "--output",
                            str(Path(tmp) / "j.npz")]
            env["DIFFDSL_CACHE_DIR"] = str(Path(tmp) / "cache")
            times = []
            for _ in range(2):  # cold (empty cache), then warm
                start = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "diffdsl", command, *argv],
                                      capture_output=True, env=env, check=False)
                times.append(time.perf_counter() - start)
                assert done.returncode == 0, done.stderr.decode()[-2000:]
            rows.append([label, f"{times[0]:.2f}", f"{times[1]:.2f}"])
            print(rows[-1], file=sys.stderr)
            env["DIFFDSL_CACHE_DIR"] = ""
    return rows


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory(diffdsl, count: int) -> list:
    x = np.linspace(0.5, 1.5, 4)
    warm = diffdsl.compile("input x[4]\noutput y = sum(x * x)\n", cache=False)
    warm.grad(x=x)
    gc.collect()
    before = rss_mb()
    progs = []
    for k in range(count):
        src = f"input x[4]\noutput y = sum(sin(x * {k + 2}) * x) / {k + 3}\n"
        prog = diffdsl.compile(src, backend="cpu", cache=False)
        prog.grad(x=x)
        progs.append(prog)
    gc.collect()
    held = rss_mb()
    del progs, prog
    gc.collect()
    after = rss_mb()
    return [[count, f"{(held - before) / count * 1024:.0f}", f"{held - before:.1f}",
             f"{after - before:.1f}"]]


def threads(args, diffdsl) -> list:
    from diffdsl.backends import cpu
    rows_out = []
    saved = cpu.PARALLEL_WORK
    try:
        for n in (3, 5):
            prog = diffdsl.compile(det_source(n), backend="cpu", cache=False)
            nodes = len(prog.derivative("grad").nodes)
            for rows in (64, 256, 1024, 4096, 16384):
                X = np.random.default_rng(rows).uniform(0, 1, (rows, n, n))
                reps = max(3, 200_000 // rows)
                cpu.PARALLEL_WORK = 10**18
                serial = best(lambda x, prog=prog: prog.grad(A=x), X, reps, args.rounds)
                cpu.PARALLEL_WORK = 0
                threaded = best(lambda x, prog=prog: prog.grad(A=x), X, reps, args.rounds)
                rows_out.append([n, nodes, f"{rows:,}", f"{rows * nodes:,}",
                                 f"{serial * 1e6:.0f}", f"{threaded * 1e6:.0f}",
                                 f"{serial / threaded:.2f}"])
                print(rows_out[-1], file=sys.stderr)
    finally:
        cpu.PARALLEL_WORK = saved
    return rows_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.2)
    ap.add_argument("--programs", type=int, default=2000)
    ap.add_argument("--parts", nargs="+", type=int, default=[1, 2, 3, 4, 5],
                    help="which of the five comparisons to run")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.target = 3, 0.1
    import diffdsl
    md = args.markdown
    print(f"machine: {machine()}")
    parts = set(args.parts)
    if 1 in parts:
        print("\n1. det gradient, one matrix per call (us a call; ratio: time / reference)")
        print(table(["n", "grad nodes", "grad(A=x)", "backend='cpu'", "reference",
                     "ratio", "ratio cpu"], single_point(args, diffdsl), markdown=md))
    if 2 in parts:
        print("\n2. batches (M gradients/s; ratio: diffdsl rate / reference rate)")
        print(table(["n", "rows", "reference", "diffdsl M/s", "reference M/s", "ratio"],
                    batches(args, diffdsl), markdown=md))
    if 3 in parts:
        print("\n3a. kernel build, text to loaded machine code, in this process")
        print(table(["graph", "nodes", "outputs", "build s", "us/node"],
                    compile_cost(diffdsl), markdown=md))
        print("\n3b. whole process (python -m diffdsl ...): cold = empty cache, then warm")
        print(table(["command", "cold s", "warm s"], processes(), markdown=md))
    if 4 in parts:
        print(f"\n4. memory of {args.programs} distinct programs compiled in one process")
        print(table(["programs", "KB each", "MB held", "MB after drop"],
                    memory(diffdsl, args.programs), markdown=md))
    if 5 in parts:
        print("\n5. one thread against all (us a batch; ratio above 1: threads pay)")
        print(table(["n", "nodes", "rows", "rows x nodes", "serial us", "threads us",
                     "ratio"], threads(args, diffdsl), markdown=md))

if __name__ == "__main__":
    main()
