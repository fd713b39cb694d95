"""Short loops that run four iterations at once (backends/llvm_lanes.py), side by side.

    python bench/lanes.py [--rounds 5] [--sizes 16 256 4096]
    python bench/lanes.py --bodies [--rounds 5]
    python bench/lanes.py --data [--rounds 5]

GradBench's llsq gradient (`bench/gradbench/llsq.dd`: n points, 128 coefficients, a running
power t ** j a term) timed a call from Python, in one process: diffdsl with its loops run one
iteration at a time (`llvm_lanes.LANES` emptied, as before 1b725f8) and four at a time, and
two hand-written Numba kernels on the same data: the loop GradBench's C++ runs (a product and
an add a term, each waiting on the last), and the same loop over four points at once (four
independent chains), the strongest reference we could write. Numba's are called from Python
too. The ratios are diffdsl's over each.

`--bodies` times the body sizes the rule takes (`llvm_lanes.BODY`): a sum over 4,096
iterations of a Horner polynomial of degree K in x[j] (2K operations) times a running power
a ** j, its value and gradient, one iteration at a time and four at a time.

`--data` times least squares of a polynomial over data points, `x[i] ** j` over j inside a
loop over i (the inner loop reads x[i] as a stream of stride 0, the same in every
iteration): diffdsl's gradient by w beside NumPy by hand (the powers a row at a time, each
the last times x, then two BLAS matrix-vector products).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import per_call  # noqa: E402

import diffdsl  # noqa: E402
from diffdsl.backends import llvm_lanes  # noqa: E402

LLSQ = (Path(__file__).resolve().parent / "gradbench" / "llsq.dd").read_text()


@numba.njit(cache=False)
def one(x, n, i, g):
    """Point i of GradBench's C++ loop: its residual, then its row of the gradient."""
    m = x.size
    t = -1.0 + i * 2.0 / (n - 1)
    r, p = np.sign(t), 1.0
    for j in range(m):
        r -= x[j] * p
        p *= t
    p = 1.0
    for j in range(m):
        g[j] -= r * p
        p *= t


@numba.njit(cache=False)
def serial(x, n, g):
    """GradBench's C++ loop: a product and an add a term, each waiting on the last."""
    g[:] = 0.0
    for i in range(n):
        one(x, n, i, g)


@numba.njit(cache=False)
def four(x, n, g):
    """The same over four points at once: four chains of products and of adds side by side."""
    m = x.size
    g[:] = 0.0
    i = 0
    while i + 4 <= n:
        t0, t1 = -1.0 + i * 2.0 / (n - 1), -1.0 + (i + 1) * 2.0 / (n - 1)
        t2, t3 = -1.0 + (i + 2) * 2.0 / (n - 1), -1.0 + (i + 3) * 2.0 / (n - 1)
        r0, r1, r2, r3 = np.sign(t0), np.sign(t1), np.sign(t2), np.sign(t3)
        p0 = p1 = p2 = p3 = 1.0
        for j in range(m):
            r0 -= x[j] * p0
            r1 -= x[j] * p1
            r2 -= x[j] * p2
            r3 -= x[j] * p3
            p0, p1, p2, p3 = p0 * t0, p1 * t1, p2 * t2, p3 * t3
        p0 = p1 = p2 = p3 = 1.0
        for j in range(m):
            g[j] -= r0 * p0 + r1 * p1 + r2 * p2 + r3 * p3
            p0, p1, p2, p3 = p0 * t0, p1 * t1, p2 * t2, p3 * t3
        i += 4
    while i < n:
        one(x, n, i, g)
        i += 1


def best(fn, rounds: int) -> float:
    return per_call(lambda _: fn(), lambda k: [None] * k, rounds=rounds, target=0.2)["seconds"]


def horner(degree: int) -> str:
    expr = "0.5"
    for k in range(degree):
        expr = f"({expr} * x[j] + {0.1 + k / 100})"
    return expr


def bodies(rounds: int) -> None:
    n = 4096
    values = {"x": np.random.default_rng(0).uniform(-1, 1, n), "a": 0.999}
    print("| degree K | value, one at a time | four at a time | ratio | gradient, one at a time "
          "| four at a time | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for degree in (0, 5, 20, 40, 80):
        source = (f"input x[{n}]\ninput a\n"
                  f"output y = sum({horner(degree)} * a ** j for j in range({n}))\n")
        times, default, body = [], llvm_lanes.LANES, llvm_lanes.BODY
        for lanes in ((), default):
            llvm_lanes.LANES, llvm_lanes.BODY = lanes, 10**6  # every size taken, to compare
            prog = diffdsl.compile(source, cache=False, backend="cpu")
            times += [best(lambda p=prog: p(values), rounds),
                      best(lambda p=prog: p.grad(values), rounds)]
        llvm_lanes.LANES, llvm_lanes.BODY = default, body
        print(f"| {degree} | {times[0] * 1e6:.1f} µs | {times[2] * 1e6:.1f} µs "
              f"| {times[2] / times[0]:.2f} | {times[1] * 1e6:.1f} µs | {times[3] * 1e6:.1f} µs "
              f"| {times[3] / times[1]:.2f} |")


def data(rounds: int) -> None:
    print("| n points | m terms | diffdsl | NumPy by hand | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for n, m in ((1000, 128), (10000, 128), (1000, 16)):
        source = (f"input x[{n}]\ninput y[{n}]\ninput w[{m}]\noutput cost = sum((y[i] - "
                  f"sum(w[j] * x[i] ** j for j in range({m}))) ** 2 for i in range({n})) / 2\n")
        rng = np.random.default_rng(n + m)
        values = {"x": rng.uniform(-1, 1, n), "y": rng.normal(size=n),
                  "w": rng.normal(size=m) / m}
        prog = diffdsl.compile(source, cache=False, backend="cpu")

        def by_hand(x=values["x"], y=values["y"], w=values["w"], m=m):
            # x ** j for each j a contiguous row, each the last times x (the fastest of
            # cumprod, np.vander and columns we tried), then BLAS
            powers = np.empty((m, x.size))
            powers[0] = 1.0
            for j in range(1, m):
                np.multiply(powers[j - 1], x, out=powers[j])
            return -(powers @ (y - w @ powers))

        np.testing.assert_allclose(prog.grad(values, wrt=["w"])["w"], by_hand(), rtol=1e-9,
                                   atol=1e-9)
        ours = best(lambda p=prog, v=values: p.grad(v, wrt=["w"]), rounds)
        theirs = best(by_hand, rounds)
        print(f"| {n:,} | {m} | {ours * 1e6:.1f} µs | {theirs * 1e6:.1f} µs "
              f"| {ours / theirs:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 256, 4096])
    parser.add_argument("--bodies", action="store_true", help="the body sizes instead")
    parser.add_argument("--data", action="store_true", help="powers of data points instead")
    args = parser.parse_args()
    if args.bodies or args.data:
        (bodies if args.bodies else data)(args.rounds)
        return
    x = np.random.default_rng(0).normal(size=128)
    print("| n | diffdsl, one iteration at a time | four at a time | Numba, C++'s loop "
          "| Numba, four points at once | four / one | four / C++'s loop | four / Numba four |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        source = LLSQ.replace("const n = 16", f"const n = {n}")
        times, default = [], llvm_lanes.LANES
        for lanes in ((), default):
            llvm_lanes.LANES = lanes
            prog = diffdsl.compile(source, cache=False, backend="cpu")
            times.append(best(lambda p=prog: p.grad({"x": x}), args.rounds))
        llvm_lanes.LANES = default
        g, want = np.zeros(128), prog.grad({"x": x})["x"]
        refs = []
        for kernel in (serial, four):
            kernel(x, n, g)
            np.testing.assert_allclose(g, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())
            refs.append(best(lambda k=kernel, n=n, g=g: k(x, n, g), args.rounds))
        one, lanes = times
        print(f"| {n:,} | {one * 1e6:.2f} µs | {lanes * 1e6:.2f} µs | {refs[0] * 1e6:.2f} µs "
              f"| {refs[1] * 1e6:.2f} µs | {lanes / one:.2f} | {lanes / refs[0]:.2f} "
              f"| {lanes / refs[1]:.2f} |")


if __name__ == "__main__":
    main()
