"""One workload, two source trees, side by side: the first gradient and a gradient a call
(best of 5 after the first) of GradBench's GMM, k-means or llsq programs (bench/gradbench)
at one size, on random data, each tree in its own process with an empty kernel cache.

    python bench/trees.py OLD_TREE NEW_TREE gmm 64 50      # d, k (n = 1,000)
    python bench/trees.py OLD_TREE NEW_TREE kmeans 1000 10000 16   # k, n, d
    python bench/trees.py OLD_TREE NEW_TREE llsq 16392      # n (m = 128)

A tree is a folder holding a `diffdsl` package (`git worktree add /tmp/old a43af9d`). The
performance page's before/after figures of a change come from here; GradBench's C++ beside
diffdsl is bench/gradbench/run.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

WORKER = r"""
import json, re, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import diffdsl
eval_, sizes, source = sys.argv[2], [int(s) for s in sys.argv[3:]], sys.stdin.read()
rng = np.random.default_rng(0)
def sized(**consts):
    text = source
    for name, value in consts.items():
        text = re.sub(rf"const {name} = \d+", f"const {name} = {value}", text)
    return text
if eval_ == "gmm":
    d, k = sizes
    text, n = sized(d=d, k=k), 1000
    values = dict(x=rng.standard_normal((n, d)), alpha=rng.standard_normal(k),
                  mu=rng.standard_normal((k, d)), q=0.1 * rng.standard_normal((k, d)),
                  l=0.1 * rng.standard_normal((k, d * (d - 1) // 2)))
    of, wrt = "objective", ["alpha", "mu", "q", "l"]
elif eval_ == "kmeans":
    k, n, d = sizes
    text = sized(k=k, n=n, d=d)
    values = dict(P=rng.standard_normal((n, d)), C=rng.standard_normal((k, d)))
    of, wrt = "cost", ["C"]
else:
    (n,) = sizes
    text = sized(n=n)
    values = dict(x=rng.standard_normal(128))
    of, wrt = "cost", ["x"]
start = time.perf_counter()
prog = diffdsl.compile(text, cache=False)
prog.grad(values, of=of, wrt=wrt)
first = time.perf_counter() - start
best = float("inf")
for _ in range(5):
    t = time.perf_counter()
    prog.grad(values, of=of, wrt=wrt)
    best = min(best, time.perf_counter() - t)
print(json.dumps({"nodes": len(prog.graph.nodes), "first": first, "call": best}))
"""


def run(tree: str, eval_: str, sizes: list[str]) -> dict:
    source = (HERE / "gradbench" / f"{eval_}.dd").read_text()
    with tempfile.TemporaryDirectory() as cache:
        done = subprocess.run([sys.executable, "-c", WORKER, tree, eval_, *sizes],
                              input=source, capture_output=True, text=True, check=True,
                              env={"DIFFDSL_CACHE_DIR": cache, "PATH": ""})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    old, new, eval_, *sizes = sys.argv[1:]
    if eval_ not in ("gmm", "kmeans", "llsq") or not all(re.fullmatch(r"\d+", s) for s in sizes):
        sys.exit(__doc__)
    rows = [(tree, run(tree, eval_, sizes)) for tree in (old, new)]
    print(f"| tree | {eval_} {' '.join(sizes)}: nodes | first gradient | a call |")
    print("|---|---:|---:|---:|")
    for tree, r in rows:
        print(f"| {tree} | {r['nodes']:,} | {r['first']:.2f} s | {r['call'] * 1e3:.3f} ms |")
    print(f"new / old: first {rows[1][1]['first'] / rows[0][1]['first']:.2f}, "
          f"a call {rows[1][1]['call'] / rows[0][1]['call']:.2f}")


if __name__ == "__main__":
    main()
