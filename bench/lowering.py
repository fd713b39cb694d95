"""Node count and lowering time of the recursive determinant by minors, n = 4 to 12.

    python bench/lowering.py [--max 12]

Lowering memoises each call of `det` on its arguments, so the work grows like n·2ⁿ, not n!.
"""

from __future__ import annotations

import argparse
import math
import time

from diffdsl.language.lower import lower
from diffdsl.language.parse import parse

SOURCE = """\
const n = {n}
input A[n, n]

def det(M) =
    if rows(M) == 1 then M[0, 0]
    else sum((-1)**j * M[0, j] * det(minor(M, 0, j)) for j in range(cols(M)))

output d = det(A)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min", type=int, default=4)
    ap.add_argument("--max", type=int, default=12)
    args = ap.parse_args()
    print(f"{'n':>3} {'nodes':>9} {'n*2^n':>9} {'n!':>12} {'lower (s)':>10}")
    for n in range(args.min, args.max + 1):
        program = parse(SOURCE.format(n=n), f"det{n}.dd")
        start = time.perf_counter()
        graph = lower(program)
        elapsed = time.perf_counter() - start
        print(f"{n:>3} {len(graph):>9} {n * 2**n:>9} {math.factorial(n):>12} {elapsed:>10.3f}")


if __name__ == "__main__":
    main()
