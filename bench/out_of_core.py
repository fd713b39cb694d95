"""Out of core: det3 gradients of a batch on disk, chunk by chunk, into Zarr.

    python bench/out_of_core.py [--rows 10000000] [--folder DIR] [--repeats 1] [--markdown]

Writes A of shape (rows, 3, 3), float64 uniform(-1, 1), to DIR/A.npy a chunk at a time (never
whole in memory; 10^8 rows are 7.2 GB), then runs each column in a fresh process, timed from
start to exit, its peak resident set read from `os.wait4` (the child's own `ru_maxrss`):

- diffdsl: `python -m diffdsl grad examples/det3.dd --inputs A=DIR/A.npy --output
  DIR/grad.zarr`, with the default chunk (cli_files.CHUNK_BYTES of inputs and results);
- numpy: this file with `--reference`, the strongest hand-written NumPy I know for the job:
  the same rows read the same way (a memory map of one chunk), det and its gradient (the
  cofactor matrix) by the cofactor formulas vectorised over the chunk, contiguous rows and
  `out=` buffers, written to the same Zarr layout (`value`, `grad.A`, the same chunks and
  zarr's default codecs);
- for batches up to 2·10^7 rows, diffdsl in memory (`--output DIR/grad.npz`), for contrast.

Each output is checked against the cofactor formulas on its first, middle and last chunk, then
deleted. The free space of DIR is checked before anything is written, and A.npy is removed at
the end (also on failure).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from diffdsl.cli.files import CHUNK_BYTES  # noqa: E402

DET3 = ROOT / "examples" / "det3.dd"
ROW_IN, ROW_OUT = 72, 80  # bytes a row: A; det and its 3x3 gradient
IN_MEMORY_MAX = 20_000_000


def default_chunk() -> int:
    """The rows of diffdsl's default chunk for this command (cli_files._default_rows)."""
    return CHUNK_BYTES // (ROW_IN + ROW_OUT)


def cofactors(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """det and its gradient (the cofactor matrix) of each 3x3 matrix of `block` (n, 3, 3)."""
    n = len(block)
    a, b, c, d, e, f, g, h, i = np.ascontiguousarray(block.reshape(n, 9).T)
    grad = np.empty((9, n))
    tmp = np.empty(n)
    for k, (p, q, r, s, sign) in enumerate([
            (e, i, f, h, 1), (d, i, f, g, -1), (d, h, e, g, 1),
            (b, i, c, h, -1), (a, i, c, g, 1), (a, h, b, g, -1),
            (b, f, c, e, 1), (a, f, c, d, -1), (a, e, b, d, 1)]):
        out = grad[k]
        np.multiply(p, q, out=out)
        np.multiply(r, s, out=tmp)
        if sign > 0:
            np.subtract(out, tmp, out=out)
        else:
            np.subtract(tmp, out, out=out)
    det = a * grad[0]
    det += b * grad[1]
    det += c * grad[2]
    return det, np.ascontiguousarray(grad.T).reshape(n, 3, 3)


def read_rows(path: Path, start: int, stop: int) -> np.ndarray:
    """Rows start..stop of a C-ordered (rows, 3, 3) float64 .npy file, mapped for this read."""
    header = np.load(path, mmap_mode="r").offset
    return np.asarray(np.memmap(path, np.float64, "r", header + start * ROW_IN,
                                (stop - start, 3, 3)))


def reference(args) -> None:
    """The NumPy column: A.npy to grad.zarr, chunk by chunk."""
    import zarr
    rows = len(np.load(args.input, mmap_mode="r"))
    group = zarr.open_group(str(args.output), mode="w")
    value = zarr.open_array(store=str(args.output), path="value", mode="w", shape=(rows,),
                            chunks=(args.chunk,), dtype=np.float64)
    grad = zarr.open_array(store=str(args.output), path="grad.A", mode="w",
                           shape=(rows, 3, 3), chunks=(args.chunk, 3, 3), dtype=np.float64)
    del group
    for start in range(0, rows, args.chunk):
        stop = min(start + args.chunk, rows)
        det, g = cofactors(read_rows(args.input, start, stop))
        value[start:stop] = det
        grad[start:stop] = g


def write_input(path: Path, rows: int, chunk: int) -> None:
    """A.npy of uniform(-1, 1) matrices, written a chunk at a time."""
    rng = np.random.default_rng(0)
    header = {"descr": "<f8", "fortran_order": False, "shape": (rows, 3, 3)}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for start in range(0, rows, chunk):
            rng.uniform(-1.0, 1.0, (min(chunk, rows - start), 3, 3)).tofile(f)


# Started by a small process of its own: Linux counts in a child's ru_maxrss the peak of the
# process it was forked from, which here holds results read back for checking.
LAUNCH = ("import json, os, subprocess, sys, time\n"
          "start = time.perf_counter()\n"
          "child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
          "_, status, usage = os.wait4(child.pid, 0)\n"
          "print(json.dumps([time.perf_counter() - start, usage.ru_maxrss, "
          "os.waitstatus_to_exitcode(status)]))\n")


def measure(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process."""
    done = subprocess.run([sys.executable, "-c", LAUNCH, *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    wall, peak_kb, status = json.loads(done.stdout)
    if status != 0:
        raise SystemExit(f"failed ({status}): {' '.join(map(str, argv))}")
    return wall, peak_kb / 1024  # ru_maxrss is in KB on Linux


def check(output: Path, source: Path, rows: int, chunk: int) -> None:
    """The output's first, middle and last chunk against the cofactor formulas."""
    if output.suffix == ".npz":
        with np.load(output) as saved:
            arrays = {"value": saved["value"], "grad.A": saved["grad.A"]}
    else:
        import zarr
        arrays = zarr.open_group(str(output), mode="r")
    for start in sorted({0, (rows // chunk // 2) * chunk, (rows - 1) // chunk * chunk}):
        stop = min(start + chunk, rows)
        det, g = cofactors(read_rows(source, start, stop))
        np.testing.assert_allclose(arrays["value"][start:stop], det, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(arrays["grad.A"][start:stop], g, rtol=1e-12, atol=1e-15)


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--folder", type=Path, default=Path("/tmp"))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--chunk", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference:
        return reference(args)
    sys.path.insert(0, str(ROOT / "bench"))
    from common import machine, table

    rows, chunk = int(args.rows), default_chunk()
    folder = args.folder / f"diffdsl-out-of-core-{os.getpid()}"
    need = rows * (ROW_IN + ROW_OUT * 1.1) + 2**30  # input, one output, a margin
    free = shutil.disk_usage(args.folder).free
    if free < need:
        raise SystemExit(f"{args.folder} has {free / 1e9:.1f} GB free; {need / 1e9:.1f} needed")
    folder.mkdir()
    source, zarr_out, npz_out = folder / "A.npy", folder / "grad.zarr", folder / "grad.npz"
    columns = {
        "diffdsl": [sys.executable, "-m", "diffdsl", "grad", str(DET3), "--inputs",
                    f"A={source}", "--output", str(zarr_out)],
        "numpy": [sys.executable, __file__, "--reference", "--input", str(source),
                  "--output", str(zarr_out), "--chunk", str(chunk)],
    }
    if rows <= IN_MEMORY_MAX:
        columns["diffdsl in memory"] = [sys.executable, "-m", "diffdsl", "grad", str(DET3),
                                        "--inputs", f"A={source}", "--output", str(npz_out)]
    try:
        start = time.perf_counter()
        write_input(source, rows, chunk)
        print(f"wrote {source} ({source.stat().st_size / 1e9:.2f} GB) in "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
        warm = folder / "warm.npy"  # compile det3's gradient once, outside the timings
        np.save(warm, np.eye(3)[None])
        measure(columns["diffdsl"][:-4] + ["--inputs", f"A={warm}", "--output",
                                           str(folder / "warm.zarr")])
        results = {name: [] for name in columns}
        for _ in range(args.repeats):
            for name, argv in columns.items():
                results[name].append(measure(argv))
                out = npz_out if name.endswith("in memory") else zarr_out
                check(out, source, rows, chunk)
                remove(out)
                print(f"{name}: {results[name][-1][0]:.1f} s, "
                      f"{results[name][-1][1]:.0f} MB", file=sys.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    base = min(t for t, _ in results["numpy"])
    body = []
    for name, runs in results.items():
        wall = min(t for t, _ in runs)
        peak = max(m for _, m in runs)
        body.append([name, f"{rows:,}", f"{chunk:,}" if name != "diffdsl in memory" else "all",
                     f"{wall:.1f}", f"{rows / wall / 1e6:.1f}", f"{peak:,.0f}",
                     f"{base / wall:.2f}"])
    print(machine())
    print(table(["column", "rows", "chunk rows", "wall s", "M rows/s", "peak RSS MB",
                 "speed vs numpy"], body, markdown=args.markdown, left=(0,)))


if __name__ == "__main__":
    main()
