"""The self-consistency summary accumulated chunk by chunk, equal to the last digit whatever
the chunks: exact sums for the mean and its standard error, integer counts per bin."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from veracity.methods.consistency.records import ConsistencyRecord
from veracity.stats import Histogram, histogram
from veracity.streaming import MomentSums

BINS = 20
"""Histogram bins over [0, 1]."""


@dataclass(frozen=True)
class ScoreFigures:
    """Scored and unscored questions, the mean score ± its standard error, the histogram."""

    n_items: int
    n_scored: int
    n_unscored: int
    mean_score: float
    """NaN when no question was scored."""
    stderr: float
    histogram: Histogram


class RunningConsistency:
    """Mean score ± s.e., scored / unscored counts and the score histogram of consistency
    records, fed in any number of chunks.

    >>> def r(score): return ConsistencyRecord("q", "p", "a", score)
    >>> run = RunningConsistency()
    >>> run.add([r(0.5), r(None)]); run.add([r(1.0)])
    >>> s = run.result(); s.n_items, s.n_scored, s.mean_score, s.stderr
    (3, 2, 0.75, 0.25)
    """

    def __init__(self) -> None:
        self.n_items = 0
        self.moments = MomentSums()
        self.counts = np.zeros(BINS, dtype=np.int64)

    def add(self, records: Iterable[ConsistencyRecord]) -> None:
        """One chunk of records."""
        scores: list[float] = []
        for record in records:
            self.n_items += 1
            if record.score is not None:
                scores.append(record.score)
        arr = np.asarray(scores, dtype=np.float64)
        self.moments.add(arr)
        counts, _ = np.histogram(np.clip(arr, 0.0, 1.0), bins=BINS, range=(0.0, 1.0))
        self.counts += counts  # as veracity.stats.histogram, bin by bin

    def result(self) -> ScoreFigures:
        """What :func:`veracity.methods.consistency.run.summarise` returns."""
        mean, stderr = self.moments.mean_stderr()
        edges = histogram([], bins=BINS, upper=1.0).edges
        return ScoreFigures(self.n_items, self.moments.n, self.n_items - self.moments.n, mean,
                            stderr, Histogram(edges, tuple(int(c) for c in self.counts)))
