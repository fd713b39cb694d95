"""How many examples a generated (Hypothesis) test draws: the count it names, times
`DIFFDSL_EXAMPLES` (1 where unset). The counts the tests name keep the whole suite within CI's
20 minutes on two cores; a longer run draws more (the draws differ from run to run), for
instance `DIFFDSL_EXAMPLES=10 python -m pytest -q -n auto tests/test_rows.py`.
`bench/fuzz.py` is the long run of the program fuzzer."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("DIFFDSL_EXAMPLES", "1"))


def examples(count: int) -> int:
    """`count` examples scaled by `DIFFDSL_EXAMPLES`, at least one."""
    return max(1, round(count * SCALE))
