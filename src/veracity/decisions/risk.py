"""Risk-controlled thresholds: Learn-then-Test fixed-sequence testing with an exact binomial p-value.

Method: Angelopoulos, Bates, Candès, Jordan, Lei, "Learn then Test: Calibrating Predictive
Algorithms to Achieve Risk Control" (arXiv:2110.01052, 2021), applied to selective risk (the
error rate among the answers passed; Geifman & El-Yaniv, "Selective Classification for Deep
Neural Networks", NeurIPS 2017).

Notation (DESIGN §3.4): ``u`` larger = less trustworthy; an answer passes at λ when u ≤ λ.
For a candidate λ, n_λ calibration answers pass and k_λ of them are wrong. The null hypothesis
H_λ "the error rate among passed answers exceeds α" is tested by the exact binomial p-value
p_λ = P(Binomial(n_λ, α) ≤ k_λ) (``scipy.stats.binom.cdf``). Candidates are tested from the
strictest to the loosest and the procedure stops at the first p_λ > δ; the last λ tested
successfully is returned. Fixed-sequence testing controls the family-wise error at δ, so
P(error rate among passed answers at the returned λ ≤ α) ≥ 1 − δ on exchangeable data.

Candidates are calibration scores at coverage steps (the scores passing 1 %, 2 %, … 100 % of
the answers, or every distinct score when there are fewer than ``steps``; ties pass
together). Those passing fewer than :func:`labels_needed` answers are skipped: their p-value
cannot fall to δ even with no error, and testing them first would end the sequence before it
reached a testable λ; so are those passing fewer than ``start`` (10 %) of the answers, where
one unlucky wrong answer would end the sequence before it reached the thresholds worth
having. Both choices depend on the unlabelled scores only, never on the labels, and coarse
steps likewise keep the sequence from stopping on noise (``bench/risk_control.py`` measures
the bound and the coverage over 1,000 splits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from veracity.errors import DataError


def binomial_p_value(errors: int, passed: int, alpha: float) -> float:
    """P(Binomial(passed, alpha) ≤ errors): how likely this few errors are if the true error
    rate among passed answers were alpha (exact, ``scipy.stats.binom.cdf``)."""
    from scipy.stats import binom

    return float(binom.cdf(errors, passed, alpha))


def labels_needed(alpha: float, delta: float) -> int:
    """The fewest passed answers whose p-value can reach δ: with none wrong the p-value is
    (1 − α)^n, so n ≥ log δ / log(1 − α)."""
    check_levels(alpha, delta)
    n = math.ceil(math.log(delta) / math.log1p(-alpha))
    while (1 - alpha) ** n > delta:  # guard the rounding of the logarithms
        n += 1
    while n > 1 and (1 - alpha) ** (n - 1) <= delta:
        n -= 1
    return n


def check_levels(alpha: float, delta: float) -> None:
    if not 0 < alpha < 1 or not 0 < delta < 1:
        raise DataError(f"--risk and --delta must lie strictly between 0 and 1, got α={alpha}, δ={delta}")


class TooFewLabels(DataError):
    """The labelled set cannot certify any threshold at α, δ."""

    def __init__(self, have: int, need: int, alpha: float, delta: float) -> None:
        super().__init__(
            f"{have} labelled answers cannot certify an error rate ≤ {alpha:g} with confidence "
            f"{1 - delta:g}: at least {need} are needed even if none is wrong (more when some are)")
        self.have = have
        self.need = need


@dataclass(frozen=True)
class RiskThreshold:
    """The outcome of one calibration: the threshold (in ``u``, larger = less trustworthy) and
    what it achieves on the calibration set."""

    alpha: float
    delta: float
    n: int
    """Labelled answers in the calibration set."""
    n_wrong: int
    threshold: float | None
    """Pass an answer when u ≤ threshold; None: no threshold could be certified (pass none)."""
    passed: int
    """Calibration answers passed at the threshold."""
    errors: int
    """Wrong answers among them."""
    p_value: float | None
    """p_λ of the threshold returned."""
    tested: int
    """Candidates tested (the last one failed, unless every candidate passed)."""

    @property
    def coverage(self) -> float:
        """Share of calibration answers passed."""
        return self.passed / self.n if self.n else 0.0

    @property
    def error_among_passed(self) -> float | None:
        return self.errors / self.passed if self.passed else None


def risk_threshold(u: Sequence[float] | np.ndarray, wrong: Sequence[bool] | np.ndarray,
                   alpha: float, delta: float, steps: int = 100,
                   start: float = 0.1) -> RiskThreshold:
    """The loosest threshold λ certified by Learn-then-Test fixed-sequence testing (module doc).

    Raises :class:`TooFewLabels` when fewer than :func:`labels_needed` answers are labelled.
    """
    check_levels(alpha, delta)
    scores = np.asarray(u, dtype=float)
    bad = np.asarray(wrong, dtype=bool)
    if scores.shape != bad.shape or scores.ndim != 1:
        raise DataError("scores and labels must be two lists of the same length")
    if not np.all(np.isfinite(scores)):
        raise DataError("scores must be finite numbers")
    n = len(scores)
    need = labels_needed(alpha, delta)
    if n < need:
        raise TooFewLabels(n, need, alpha, delta)
    from scipy.stats import binom

    order = np.argsort(scores, kind="stable")
    sorted_u, sorted_bad = scores[order], bad[order]
    values, first = np.unique(sorted_u, return_index=True)
    passed = np.append(first[1:], n)  # answers with u ≤ values[j]
    if len(values) > steps:  # the distinct scores reaching each coverage step, in order
        wanted = np.ceil(np.arange(1, steps + 1) * n / steps).astype(int)
        keep = np.unique(np.searchsorted(passed, wanted))
        values, passed = values[keep], passed[keep]
    errors = np.cumsum(sorted_bad)[passed - 1]
    p_values = binom.cdf(errors, passed, alpha)
    found = RiskThreshold(alpha, delta, n, int(bad.sum()), None, 0, 0, None, 0)
    tested = 0
    first_tested = max(need, math.ceil(start * n))
    for j in range(len(values)):
        if passed[j] < first_tested:
            continue
        tested += 1
        if p_values[j] > delta:
            break
        found = RiskThreshold(alpha, delta, n, int(bad.sum()), float(values[j]), int(passed[j]),
                              int(errors[j]), float(p_values[j]), 0)
    return replace(found, tested=tested)
