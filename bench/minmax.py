"""A min or max kept as a loop: its running value kept by a branch or by selects, side by side.

    python bench/minmax.py [--rounds 5]

`llvm_loops.branches` keeps a loop's min or max by a branch past `BRANCH_FROM` iterations and by
selects up to it. This times both forms of the same programs in one process (the kernel built
once with each setting) and prints their ratio, for the two shapes that decide the threshold:
the maximum of a long array (`max(x)`, and `logsumexp(x)`, whose shift is one), where the
running value changes in few iterations, and k-means' minimum over k centroids for each of n
random points, where it changes about log k times in k. NumPy by hand is the reference for
each (`x.max()`; the distances as one array, then `min` along the centroids).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import per_call  # noqa: E402

import diffdsl  # noqa: E402
from diffdsl.backends import llvm_loops  # noqa: E402

KMEANS = """const n = {n}
const k = {k}
const d = {d}
input P[n, d]
input C[k, d]
def dist2(p, c) = sum((p - c) ** 2)
output cost = sum(min([dist2(P[i], C[j]) for j in range(k)]) for i in range(n))
"""


def best(fn, rounds: int) -> float:
    """Seconds a call of `fn()`: common.per_call's median of `rounds` rounds, the same data in
    every call."""
    return per_call(lambda _: fn(), lambda k: [None] * k, rounds=rounds, target=0.1)["seconds"]


def both(source: str, values: dict, call: str, rounds: int) -> tuple[float, float]:
    """Seconds a call with selects and with branches (each its own kernel)."""
    out, default = [], llvm_loops.BRANCH_FROM
    for threshold in (10**18, 0):  # selects everywhere, then branches everywhere
        llvm_loops.BRANCH_FROM = threshold
        prog = diffdsl.compile(source, cache=False, backend="cpu")
        fn = (lambda p=prog: p.evaluate(values)) if call == "value" else \
            (lambda p=prog: p.grad(values, wrt=["C"]))
        out.append(best(fn, rounds))
    llvm_loops.BRANCH_FROM = default
    return out[0], out[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for n in (10**4, 10**6):
        x = rng.normal(size=n)
        for body, ref in (("max(x)", lambda x=x: x.max()),
                          ("logsumexp(x)", lambda x=x: np.log(np.exp(x - x.max()).sum()))):
            select, branch = both(f"input x[{n}]\noutput f = {body}", {"x": x}, "value",
                                  args.rounds)
            rows.append((f"`{body}`, n = {n:,}", "value", n, select, branch,
                         best(ref, args.rounds)))
    for k, n, d in ((10, 10**5, 8), (30, 10**5, 8), (100, 10**4, 8), (300, 3000, 8),
                    (1000, 10**3, 8)):
        P, C = rng.normal(size=(n, d)), rng.normal(size=(k, d))

        def ref(P=P, C=C):
            return ((P[:, None, :] - C[None, :, :]) ** 2).sum(axis=2).min(axis=1).sum()

        for call in ("value", "grad"):
            select, branch = both(KMEANS.format(n=n, k=k, d=d), {"P": P, "C": C}, call,
                                  args.rounds)
            rows.append((f"k-means k = {k}, n = {n:,}, d = {d}", call, k, select, branch,
                         best(ref, args.rounds) if call == "value" else float("nan")))
    print("| program | call | trip count | selects | branch | selects / branch | NumPy by hand |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, call, trips, select, branch, numpy in rows:
        print(f"| {name} | {call} | {trips:,} | {select * 1e3:.3f} ms | {branch * 1e3:.3f} ms "
              f"| {select / branch:.2f} | "
              f"{'' if numpy != numpy else f'{numpy * 1e3:.3f} ms'} |")


if __name__ == "__main__":
    main()
