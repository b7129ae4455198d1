"""Fuzz every reader and parser of veracity with Hypothesis, counting failures.

Each target (dataset loaders, recorded files, rating sheets, run folders, the deception JSON
answer parser, the FEWL pair parser; see tests/reliability/fuzz_targets.py) gets its share of
the examples. A failure is an input that ends in an exception other than a VeracityError
with a message; the first few are printed. The last line is the number of failures (must be 0).

    python bench/fuzz.py [--examples 10000] [--seed 0] [--smoke]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from fuzz_targets import TARGETS, outcome  # noqa: E402


def fuzz(name: str, examples: int, random_seed: int, shown: list[str]) -> tuple[int, int]:
    """(examples tried, failures) of one target."""
    target = TARGETS[name]
    tried = failed = 0

    @seed(random_seed)
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(target.strategy)
    def check(payload: Any) -> None:
        nonlocal tried, failed
        tried += 1
        failure = outcome(target, payload)
        if failure is not None:
            failed += 1
            if len(shown) < 5:
                shown.append(f"{name}: {type(failure).__name__}: {failure} <- {payload!r:.200}")

    check()
    return tried, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=10_000, help="Examples over all targets.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="A few hundred examples.")
    args = parser.parse_args()
    total = 400 if args.smoke else args.examples
    weights = sum(t.weight for t in TARGETS.values())
    began = time.perf_counter()
    shown: list[str] = []
    tried = failed = 0
    for name, target in TARGETS.items():
        share = max(5, math.ceil(total * target.weight / weights))
        t, f = fuzz(name, share, args.seed, shown)
        tried += t
        failed += f
        print(f"{name}: {t} examples, {f} failures")
    for line in shown:
        print(f"  {line}")
    print(f"targets: {len(TARGETS)} targets")
    print(f"time: {time.perf_counter() - began:.1f} s")
    print(f"examples tried: {tried} examples")
    print(f"failures: {failed} failures")


if __name__ == "__main__":
    main()
