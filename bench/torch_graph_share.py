"""How much of PyTorch's time goes to recording its autograd graph (det by minors, n = 3..7).

    python bench/torch_graph_share.py [--quick] [--markdown] [--max 7]

For each n, with a new uniform(0, 1) matrix per repetition (drawn before timing, tensors made
outside the timed parts), time (i) the forward pass under torch.no_grad(), (ii) the forward
pass on a tensor with requires_grad=True, which records the graph, and (iii) .backward() on
that graph. Recording overhead is (ii) - (i), given as a share of a whole gradient, (ii) + (iii).
The recursion is the plain expansion by minors the forum posts write (bench/common.py).
Prints a note and exits 0 when PyTorch is not installed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from common import have, machine, table, torch_det


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min", type=int, default=3)
    ap.add_argument("--max", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.3, help="seconds per round")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 0.1 s")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.target = 3, 0.1
    if not have("torch"):
        print("PyTorch is not installed: nothing to measure (pip install torch)")
        return
    import torch

    det = torch_det()
    rng = np.random.default_rng(11)
    rows = []
    for n in range(args.min, args.max + 1):
        x = torch.tensor(rng.uniform(0.0, 1.0, (n, n)))
        for _ in range(2):  # the second pass is timed: the first warms PyTorch up
            A = x.clone().requires_grad_(True)
            start = time.perf_counter()
            det(A).backward()
            one = time.perf_counter() - start
        exact = np.linalg.det(x.numpy()) * np.linalg.inv(x.numpy()).T
        if np.abs(A.grad.numpy() - exact).max() > 1e-9:
            raise AssertionError(f"PyTorch gradient wrong at n={n}")
        reps = max(1, int(args.target / one))
        data = rng.uniform(0.0, 1.0, (args.rounds, reps, n, n))
        parts = {"no_grad": [], "record": [], "backward": []}
        for r in range(args.rounds):
            plain = [torch.tensor(m) for m in data[r]]
            tracked = [torch.tensor(m, requires_grad=True) for m in data[r]]
            start = time.perf_counter()
            with torch.no_grad():
                for A in plain:
                    det(A)
            parts["no_grad"].append((time.perf_counter() - start) / reps)
            forward = backward = 0.0
            for A in tracked:
                t0 = time.perf_counter()
                d = det(A)
                t1 = time.perf_counter()
                d.backward()
                t2 = time.perf_counter()
                forward += t1 - t0
                backward += t2 - t1
            parts["record"].append(forward / reps)
            parts["backward"].append(backward / reps)
        i, ii, iii = (statistics.median(parts[k]) for k in ("no_grad", "record", "backward"))
        share = (ii - i) / (ii + iii)
        rows.append([n, f"{reps * args.rounds:,}", f"{i * 1e3:.3f}", f"{ii * 1e3:.3f}",
                     f"{iii * 1e3:.3f}", f"{(ii - i) * 1e3:.3f}", f"{share:.0%}",
                     f"{iii / (ii + iii):.0%}"])
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads; ms per matrix, "
          f"median of {args.rounds} rounds")
    print(f"machine: {machine()}")
    print(table(["n", "matrices", "(i) no_grad ms", "(ii) recording ms", "(iii) backward ms",
                 "(ii)-(i) ms", "recording share", "backward share"], rows,
                markdown=args.markdown))
    print("recording share = ((ii) - (i)) / ((ii) + (iii)): the part of a gradient spent "
          "building the graph")


if __name__ == "__main__":
    main()
