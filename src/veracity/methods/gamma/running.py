"""γ aggregates accumulated chunk by chunk, equal to the last digit to the whole run's.

Memory: exact sums and counters, plus the scored γ values as one float64 column (8 bytes an
item), which the exact median and the histogram's range (up to the largest γ) need.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from veracity.methods.gamma.records import GammaAggregate, GammaRecord
from veracity.stats import Histogram
from veracity.streaming import FloatColumn, MomentSums

_LENGTH = "length"  # finish reason of an answer cut at max tokens (methods.gamma.LENGTH)


class RunningGamma:
    """Mean ± s.e., median, share below the threshold, histogram and truncation counts of
    γ records, fed in any number of chunks.

    >>> def g(value): return GammaRecord("q", "?", "!", value)
    >>> r = RunningGamma(0.05)
    >>> r.add([g(0.0), g(0.1)]); r.add([g(0.02), g(None)])
    >>> a = r.result(); a.n_items, a.n_scored, a.median, round(a.mean, 12)
    (4, 3, 0.02, 0.04)
    """

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.n_items = 0
        self.n_below = 0
        self.n_truncated = 0
        self.n_perturbed_truncated = 0
        self.moments = MomentSums()
        self.values = FloatColumn()

    def add(self, records: Iterable[GammaRecord]) -> None:
        """One chunk of records."""
        scored: list[float] = []
        for r in records:
            self.n_items += 1
            if r.gamma is not None:
                scored.append(r.gamma)
            self.n_truncated += r.finish_reason == _LENGTH
            self.n_perturbed_truncated += r.perturbed_truncated
        arr = np.asarray(scored, dtype=np.float64)
        self.moments.add(arr)
        self.n_below += int((arr < self.threshold).sum())
        self.values.extend(arr)

    def result(self) -> GammaAggregate:
        """The aggregate of :func:`veracity.methods.gamma.aggregate`."""
        arr = self.values.array()
        n_scored = int(arr.size)
        mean, se = self.moments.mean_stderr()
        top = float(arr.max()) if n_scored else 1.0
        return GammaAggregate(
            n_items=self.n_items,
            n_scored=n_scored,
            n_unscored=self.n_items - n_scored,
            mean=mean,
            stderr=se,
            median=float(np.median(arr)) if n_scored else math.nan,
            threshold=self.threshold,
            share_below_threshold=self.n_below / n_scored if n_scored else math.nan,
            histogram=_histogram(arr, max(1.0, top)),
            n_truncated=self.n_truncated,
            n_perturbed_truncated=self.n_perturbed_truncated,
        )


def _histogram(arr: np.ndarray, upper: float) -> Histogram:
    """:func:`veracity.stats.histogram` of finite values, without a Python loop over them."""
    counts, edges = np.histogram(np.clip(arr, 0.0, upper), bins=20, range=(0.0, upper))
    return Histogram.of(counts, edges)
