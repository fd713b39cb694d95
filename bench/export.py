"""Exported C beside the JIT (issue 24, item 3): what building each costs, and how fast the
gradient runs, on det and the GradBench-style programs.

    python bench/export.py [--markdown] [--only NAME] [--rounds 5]

For each program's gradient: the JIT's build (derivative graph, LLVM IR, object code, with
no cache), the export of C and the system compiler's `cc -O2 -std=c99` on it, and the
shared library (`export --shared`: the JIT's own object code, linked). Then the time per
gradient on a batch of rows, serially (DIFFDSL_NUM_THREADS=1): the JIT through the API
(`prog.grad` on the whole batch), the compiled C and the shared library through their
`_batch` functions (one ctypes call for the batch), and for det the hand-written Numba
gradient of bench/common.py (sub-minors memoised, the strongest reference at hand).
Each time per row is the best of `--rounds` runs of a batch sized to take about 0.2 s, the
runs of the four interleaved so that the machine's busy spells cost each alike.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["DIFFDSL_NUM_THREADS"] = "1"  # serial, as the C's _batch runs

import numpy as np  # noqa: E402

import diffdsl  # noqa: E402
from diffdsl.export import export  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from lowering import SOURCE as DET  # noqa: E402

# name: (source text, wrt or None for every input, rows per batch at most)
CASES = {
    "det 3x3": ((ROOT / "examples" / "det3.dd").read_text(), None, 1_000_000),
    "det by minors 8x8": (DET.format(n=8), None, 100_000),
    "det by minors 10x10": (DET.format(n=10), None, 20_000),
    "k-means (n=1000, k=10, d=8)": ((HERE / "programs" / "kmeans.dd").read_text(), ["C"], 200),
    "MLP (n=256, d=32, h=32)": ((HERE / "programs" / "mlp.dd").read_text(),
                                ["W1", "b1", "w2", "b2"], 200),
    "GMM (n=1000, k=5, d=4)": ((ROOT / "examples" / "data" / "gmm.dd").read_text(),
                               ["alpha", "mu", "q"], 200),
    "ODE (n=1000, 10 RK4 steps)": ((HERE / "programs" / "ode.dd").read_text(), None, 2_000),
}


ROUNDS = [5]


def best_per_row(fns: dict, rows: int) -> dict:
    """The best time per row of each function, their runs interleaved (round robin), so that
    a busy spell of the machine costs all of them alike."""
    best = {key: float("inf") for key in fns}
    for fn in fns.values():
        fn()  # warm
    for _ in range(ROUNDS[0]):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[key] = min(best[key], time.perf_counter() - start)
    return {key: t / rows * 1e6 for key, t in best.items()}


def rows_for(draw, grad, cap: int) -> int:
    """A batch that takes about 0.2 s: rows doubled until a batch takes 0.05 s, then scaled."""
    rows = 1
    while True:
        batch = draw(rows)
        start = time.perf_counter()
        grad(batch)
        took = time.perf_counter() - start
        if took >= 0.05 or rows >= cap:
            return int(max(1, min(cap, rows * 0.2 / took)))
        rows *= 2


def batch_call(lib, name: str, graph, inputs: dict, rows: int):
    """`name_batch` of `lib` on `inputs` (batched arrays), outputs allocated once."""
    fn = getattr(lib, f"{name}_batch")
    arrays = [np.ascontiguousarray(inputs[n]) for n in graph.inputs]
    outs = [np.empty((rows, p.size)) for p in graph.outputs.values()]
    fn.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * (len(arrays) + len(outs))
    pointers = [a.ctypes.data for a in arrays + outs]

    def run(keep=(arrays, outs)):  # the arrays live as long as the function that writes them
        return fn(rows, *pointers)

    return run, outs


def measure(label: str, source: str, wrt, cap: int, folder: Path) -> dict:
    row = {"program": label}
    start = time.perf_counter()
    prog = diffdsl.compile(source, filename="bench.dd", cache=False)
    graph = prog.derivative("grad", None, wrt)
    row["nodes"] = len(graph.nodes)
    prog.kernel(graph)
    row["jit build s"] = time.perf_counter() - start
    start = time.perf_counter()
    export(prog, c=folder, kinds=["grad"], wrt=wrt, name="f")
    row["C export s"] = time.perf_counter() - start
    row["C lines"] = sum(1 for _ in open(folder / "f.c", encoding="utf-8"))
    start = time.perf_counter()
    subprocess.run(["cc", "-O2", "-std=c99", "-shared", "-fPIC", "-o", str(folder / "libc.so"),
                    str(folder / "f.c"), "-lm"], check=True)
    row["cc -O2 s"] = time.perf_counter() - start
    start = time.perf_counter()
    export(prog, shared=folder / "libjit", kinds=["grad"], wrt=wrt, name="f")
    row["shared lib s"] = time.perf_counter() - start

    rng = np.random.default_rng(0)

    def draw(rows: int) -> dict:
        return {n: rng.uniform(0.5, 1.5, (rows,) + s) for n, s in prog.inputs.items()}

    rows = rows_for(draw, lambda b: prog.grad(b, wrt=wrt, backend="cpu"), cap)
    batch = draw(rows)
    want = prog.grad(batch, wrt=wrt, backend="cpu")
    first = next(iter(want))
    fns = {"JIT us/row": lambda: prog.grad(batch, wrt=wrt, backend="cpu")}
    for key, lib in (("C", folder / "libc.so"), ("shared", folder / "libjit.so")):
        run, outs = batch_call(ctypes.CDLL(str(lib)), "f_grad", graph, batch, rows)
        run()
        np.testing.assert_allclose(outs[1].reshape(want[first].shape), want[first],
                                   rtol=1e-12)  # the same gradient
        fns[f"{key} us/row"] = run
    if label.startswith("det by minors"):
        import numba
        from common import reference_grad_batch
        numba.set_num_threads(1)
        A = batch["A"]
        fns["Numba by hand us/row"] = lambda: reference_grad_batch(A)
    row["rows"] = rows
    row.update(best_per_row(fns, rows))
    return row


COLUMNS = ["program", "nodes", "jit build s", "C export s", "C lines", "cc -O2 s",
           "shared lib s", "rows", "JIT us/row", "C us/row", "shared us/row",
           "Numba by hand us/row"]


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if value < 100 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--only", help="run only the cases whose name contains this")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each batch (the best counts)")
    args = ap.parse_args()
    ROUNDS[0] = args.rounds
    rows = []
    for label, (source, wrt, cap) in CASES.items():
        if args.only and args.only not in label:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(measure(label, source, wrt, cap, Path(tmp)))
        if not args.markdown:
            print("  ".join(f"{c}={_cell(rows[-1].get(c))}" for c in COLUMNS), flush=True)
    if args.markdown:
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for row in rows:
            print("| " + " | ".join(_cell(row.get(c)) for c in COLUMNS) + " |")


if __name__ == "__main__":
    main()
