"""Big generated `.dd` files: time and peak memory to parse, and to a first gradient, by the
parser's fast path (language/lalr.py, numbers.py) and by Lark's own path, side by side.

    python bench/big_sources.py [--terms 100000] [--elements 500000] [--old] [--keep DIR]

The files (issue 23, item 7): a sum of `--terms` terms written out (`1 * x + 2 * x + ...`,
1.3 MB at 100,000), and a `const` of `--elements` random reals (10 MB at 500,000) read by a
program that sums it and reads one element. Each measurement runs in a fresh process under
`/usr/bin/time -v` (its wall time and maximum resident set), with a cold kernel cache;
`--old` adds the same runs with parsing forced through Lark's parser and transformer.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

# What each child process does: `stage` is "parse" (text to syntax tree) or "grad" (compile
# and one gradient, what a user's first call costs); `old` forces Lark's path.
CHILD = """
import sys, time
start = time.perf_counter()
import numpy as np
import diffdsl
from diffdsl.language import parse
path, stage, old = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if old:
    parse._fast = lambda cache=True: None
text = open(path, encoding="utf-8").read()
if stage == "parse":
    parse.parse(text, path)
else:
    prog = diffdsl.compile(text, filename=path)
    name, shape = next(iter(prog.inputs.items()))
    prog.grad(**{name: np.full(shape, 0.5)})
print(f"inside {time.perf_counter() - start:.2f}")
"""


def write_files(folder: Path, terms: int, elements: int) -> list[Path]:
    rng = np.random.default_rng(0)
    sum_path = folder / f"sum_{terms}.dd"
    sum_path.write_text("input x\noutput f = " +
                        " + ".join(f"{k} * x" for k in range(1, terms + 1)) + "\n")
    const_path = folder / f"const_{elements}.dd"
    values = ", ".join(repr(float(v)) for v in rng.standard_normal(elements))
    const_path.write_text(f"const c = [{values}]\ninput w\n"
                          f"output f = w * sum(c) + w ** 2 * c[{elements - 1}]\n")
    return [sum_path, const_path]


def measure(path: Path, stage: str, old: bool) -> tuple[float, float, str]:
    """(wall seconds, peak resident MB, how it ended) of one run in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:
        env = dict(os.environ, DIFFDSL_CACHE_DIR=cache)
        done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", CHILD, str(path),
                               stage, "1" if old else "0"], capture_output=True, text=True,
                              env=env)
    wall = re.search(r"Elapsed \(wall clock\) time .*: (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if wall is None or peak is None:
        return float("nan"), float("nan"), done.stderr[-300:]
    hours, minutes, seconds = (float(g or 0) for g in wall.groups())
    status = "ok" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr[-200:]}"
    return hours * 3600 + minutes * 60 + seconds, int(peak.group(1)) / 1024, status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--terms", type=int, default=100_000)
    ap.add_argument("--elements", type=int, default=500_000)
    ap.add_argument("--old", action="store_true", help="also time Lark's path (slow)")
    ap.add_argument("--keep", type=Path, help="write the files here and keep them")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-big-"))
    folder.mkdir(parents=True, exist_ok=True)
    paths = write_files(folder, args.terms, args.elements)
    print(f"{'file':<20} {'MB':>6} {'stage':<6} {'path':<5} {'wall s':>8} {'peak MB':>8}")
    for path in paths:
        size = path.stat().st_size / 1e6
        for stage in ("parse", "grad"):
            for old in ((False, True) if args.old else (False,)):
                wall, peak, status = measure(path, stage, old)
                print(f"{path.name:<20} {size:>6.1f} {stage:<6} {'lark' if old else 'fast':<5} "
                      f"{wall:>8.2f} {peak:>8.0f}  {status if status != 'ok' else ''}",
                      flush=True)


if __name__ == "__main__":
    main()
