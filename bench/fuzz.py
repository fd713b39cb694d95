"""A long fuzz run: generated programs through the differential checker for a given time.

    python bench/fuzz.py --seconds 600 [--seed N] [--jobs J] [--keep failures.jsonl]

Programs come from `tests/fuzzing.py` (Hypothesis strategies over the grammar and the type
rules); each either gives a located error or evaluates with every comparison holding (numpy
and cpu backends, forward and reverse Jacobians, central finite differences where smooth).
Prints the counts: programs, located errors, evaluated, disagreements, internal errors, slow
(more than 10 s), and the rate, at the end and every ten minutes on the way. Every failure is
printed (and kept as JSON lines with --keep). `--jobs J` runs J processes, with seeds N, N+1, ...
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fuzzing  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SLOW_S = 10.0
EVERY_S = 600.0  # a line of counts so far, so that a run stopped early still says its counts
HANG_S = 60  # a program still running after this is stopped and counted as slow


class TimeUp(Exception):
    """The run's time is over: leaves Hypothesis's loop."""


class Hang(Exception):
    """One program ran past HANG_S."""


def _alarm(signum, frame):
    raise Hang()


def run(seconds: float, start_seed: int, keep: Path | None) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    run_began = time.monotonic()
    stop = run_began + seconds
    shown = [run_began]
    signal.signal(signal.SIGALRM, _alarm)

    @seed(start_seed)
    @settings(max_examples=10**9, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(fuzzing.programs(), st.integers(0, 2**32 - 1))
    def one(source, point_seed):
        if time.monotonic() > stop:
            raise TimeUp()
        began = time.monotonic()
        signal.alarm(HANG_S)
        try:
            outcome = fuzzing.check(source, point_seed)
        except Hang:
            outcome = fuzzing.Outcome("slow", f"stopped after {HANG_S} s")
        finally:
            signal.alarm(0)
        counts["programs"] += 1
        counts[outcome.kind] += 1
        if outcome.kind != "slow" and time.monotonic() - began > SLOW_S:
            counts["slow"] += 1
            outcome = fuzzing.Outcome("slow", f"{time.monotonic() - began:.1f} s")
        if outcome.kind in ("disagreement", "internal", "slow"):
            _report(source, point_seed, outcome, keep)
        if time.monotonic() - shown[0] > EVERY_S:
            shown[0] = time.monotonic()
            print(f"so far, seed {start_seed}: {_summary(counts, shown[0] - run_began)}",
                  flush=True)

    try:
        one()
    except Exception as exc:  # noqa: BLE001 - anything but the end of the time goes on up
        if not _time_up(exc):
            raise
    return counts


def _time_up(exc: BaseException) -> bool:
    """TimeUp, or a group of nothing else: Hypothesis replays the failing input, and where the
    same input had passed before the time ran out it reports both runs as a flaky group."""
    inner = getattr(exc, "exceptions", None)
    if inner is None:
        return isinstance(exc, TimeUp)
    return all(_time_up(e) for e in inner)


def _report(source, point_seed, outcome, keep):
    print(f"--- {outcome.kind} (point seed {point_seed})\n{source}{outcome.detail[-3000:]}\n",
          flush=True)
    if keep is not None:
        with keep.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": outcome.kind, "source": source, "seed": point_seed,
                                "detail": outcome.detail}) + "\n")


def _summary(counts, took: float) -> str:
    n = counts["programs"]
    return (f"{n} programs in {took:.0f} s ({n / max(took, 1e-9):.1f}/s): "
            f"{counts['error']} located errors, {counts['evaluated']} evaluated, "
            f"{counts['disagreement']} disagreements, {counts['internal']} internal errors, "
            f"{counts['slow']} slow (>{SLOW_S:.0f} s)")


def _job(job: tuple[float, int, Path | None]) -> collections.Counter:
    warnings.simplefilter("ignore")  # overflow and domain warnings are the programs' own
    return run(*job)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    parser.add_argument("--keep", type=Path, help="append failures to this JSON-lines file")
    parser.add_argument("--jobs", type=int, default=1, help="processes (seeds N, N+1, ...)")
    args = parser.parse_args()
    began = time.monotonic()
    jobs = [(args.seconds, args.seed + k, args.keep) for k in range(args.jobs)]
    if args.jobs == 1:
        counts = _job(jobs[0])
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            counts = sum(pool.map(_job, jobs), collections.Counter())
    seeds = f"{args.seed}" if args.jobs == 1 else f"{args.seed}..{args.seed + args.jobs - 1}"
    print(f"seed {seeds}: {_summary(counts, time.monotonic() - began)}")
    return 1 if counts["disagreement"] or counts["internal"] or counts["slow"] else 0


if __name__ == "__main__":
    sys.exit(main())
