"""Does the risk-controlled threshold keep its promise? Simulation over random calibration/test splits.

Synthetic answers: a score u ~ Uniform(0, 1) (larger = less trustworthy) and a wrong answer with
known probability p(u) = a + b·u^c, so the true error rate among the answers passed at λ is
r(λ) = a + b·λ^c / (c + 1) exactly. For each split a fresh calibration set (labelled) and test
set (large, so its realised error is close to the true rate) are drawn; ``risk_threshold``
(Learn-then-Test, exact binomial p-value) picks λ on the calibration set; the bound holds on
that split when r(λ) ≤ α (passing nothing holds trivially). The guarantee is
P(r(λ) ≤ α) ≥ 1 − δ: the share of splits where it held, judged against 1 − δ, is the
ratio printed last. Also shown: the realised error among passed test answers, the share of
splits with a threshold at all, and the mean coverage.

    python bench/risk_control.py [--splits 1000] [--calibration 1000] [--test 20000]
    python bench/risk_control.py --smoke     # 200 splits (CI)
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from veracity.decisions.risk import risk_threshold


@dataclass(frozen=True)
class Scenario:
    name: str
    a: float
    b: float
    c: float

    def p_wrong(self, u: np.ndarray) -> np.ndarray:
        return np.asarray(self.a + self.b * u**self.c, dtype=float)

    def risk(self, lam: float) -> float:
        """True error rate among answers with u ≤ λ."""
        return float(self.a + self.b * min(lam, 1.0) ** self.c / (self.c + 1))


SCENARIOS = (Scenario("informative: p = 0.02 + 0.6u²", 0.02, 0.6, 2.0),
             Scenario("weak: p = 0.08 + 0.2u", 0.08, 0.2, 1.0))


def draw(s: Scenario, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    u = rng.random(n)
    return u, rng.random(n) < s.p_wrong(u)


def mean(values: list[float]) -> str:
    return f"{np.mean(values):.3f}" if values else "—"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", type=int, default=1000)
    parser.add_argument("--calibration", type=int, default=1000)
    parser.add_argument("--test", type=int, default=20000)
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="200 splits (CI)")
    args = parser.parse_args()
    splits = 200 if args.smoke else args.splits
    if args.smoke:
        args.test = min(args.test, 5000)
    delta = args.delta
    rng = np.random.default_rng(args.seed)
    began = time.perf_counter()
    print(f"{splits} random calibration/test splits per row: {args.calibration} labelled, "
          f"{args.test} test answers; δ = {delta}")
    head = (f"{'scenario':<32} {'α':>5} {'certified':>9} {'coverage':>8} {'true err':>8} "
            f"{'test err':>8} {'held (true)':>11} {'held (test)':>11}  target")
    print(head)
    print("-" * len(head))
    worst = 1.0
    for scenario in SCENARIOS:
        for alpha in (0.05, 0.1, 0.2):
            held = held_test = certified = 0
            coverage, true_err, test_err = [], [], []
            for _ in range(splits):
                u_cal, wrong_cal = draw(scenario, args.calibration, rng)
                u_test, wrong_test = draw(scenario, args.test, rng)
                lam = risk_threshold(u_cal, wrong_cal, alpha, delta).threshold
                if lam is None:  # nothing passes: no error among passed answers
                    held += 1
                    held_test += 1
                    coverage.append(0.0)
                    continue
                certified += 1
                risk = scenario.risk(lam)
                passed = u_test <= lam
                realised = float(wrong_test[passed].mean()) if passed.any() else 0.0
                held += risk <= alpha
                held_test += realised <= alpha
                coverage.append(float(passed.mean()))
                true_err.append(risk)
                test_err.append(realised)
            share = held / splits
            worst = min(worst, share)
            ok = "ok" if share >= 1 - delta else "FAILS"
            print(f"{scenario.name:<32} {alpha:>5.2f} {certified / splits:>9.3f} "
                  f"{np.mean(coverage):>8.3f} {mean(true_err):>8} {mean(test_err):>8} "
                  f"{share:>11.3f} {held_test / splits:>11.3f}  ≥ {1 - delta:.2f} {ok}")
    print(f"\n{time.perf_counter() - began:.1f} s. held (true): share of splits whose threshold's true "
          "error rate among passed answers is ≤ α; held (test): the realised rate on the test set "
          "(noisier: a finite test set).")
    print(f"ratio judged: worst share of splits where the bound held / (1 − δ) = "
          f"{worst:.3f} / {1 - delta:.2f} = {worst / (1 - delta):.3f} (≥ 1 passes)")
    return 0 if worst >= 1 - delta else 1


if __name__ == "__main__":
    sys.exit(main())
