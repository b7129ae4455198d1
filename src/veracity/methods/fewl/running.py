"""FEWL's per-source aggregates accumulated chunk by chunk, equal to the last digit to the
whole run's (exact sums; the FEWL values kept as one float64 column for the bootstrap)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from veracity.methods.fewl.records import FewlAnswer, FewlModelSummary, FewlRecord
from veracity.stats import bootstrap_ci
from veracity.streaming import FloatColumn, MomentSums


def _column(values: Iterable[float | None]) -> np.ndarray:
    return np.array([math.nan if v is None else float(v) for v in values], dtype=np.float64)


class RunningFewl:
    """Mean ± s.e., bootstrap CI and n of FEWL, and the means of T and L, per answer source.

    >>> def scored(*numbers): return FewlRecord("q", "?", None, None,
    ...     answers={"m": FewlAnswer("a", *numbers)})
    >>> r = RunningFewl(["m"])
    >>> r.add([scored(0.5, 0.25, 0.25)])
    >>> r.add([scored(None, None, None)])
    >>> s = r.summaries()["m"]; s.mean, s.n, s.mean_penalty
    (0.25, 1, 0.25)
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.fewl = {n: MomentSums() for n in names}
        self.truthfulness = {n: MomentSums() for n in names}
        self.penalty = {n: MomentSums() for n in names}
        self.values = {n: FloatColumn() for n in names}
        self.failed: list[str] = []
        """Ids of the questions whose pair generation failed (not scored)."""

    def add(self, records: Iterable[FewlRecord]) -> None:
        """One chunk of records."""
        chunk = list(records)
        self.failed += [r.id for r in chunk if r.pairs_failed]
        for name in self.names:
            entries: list[FewlAnswer] = [r.answers[name] for r in chunk]
            fewl = _column(e.fewl for e in entries)
            self.fewl[name].add(fewl)
            self.values[name].extend(fewl[np.isfinite(fewl)])
            self.truthfulness[name].add(_column(e.truthfulness for e in entries))
            self.penalty[name].add(_column(e.penalty for e in entries))

    def summaries(self) -> dict[str, FewlModelSummary]:
        """The ``models`` block of results.json."""
        out: dict[str, FewlModelSummary] = {}
        for name in self.names:
            mean, stderr = self.fewl[name].mean_stderr()
            low, high = bootstrap_ci(self.values[name].array())  # type: ignore[arg-type]
            out[name] = FewlModelSummary(self.fewl[name].n, mean, stderr, (low, high),
                                         self.truthfulness[name].mean_stderr()[0],
                                         self.penalty[name].mean_stderr()[0])
        return out
