"""FEWL's per-source aggregates accumulated chunk by chunk, equal to the last digit to the
whole run's (exact sums; the FEWL values kept as one float64 column for the bootstrap)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from veracity.stats import bootstrap_ci
from veracity.streaming import FloatColumn, MomentSums


def _column(entries: Sequence[Mapping[str, Any]], name: str) -> np.ndarray:
    return np.array([math.nan if e[name] is None else float(e[name]) for e in entries],
                    dtype=np.float64)


class RunningFewl:
    """Mean ± s.e., bootstrap CI and n of FEWL, and the means of T and L, per answer source.

    >>> r = RunningFewl(["m"])
    >>> r.add([{"answers": {"m": {"fewl": 0.25, "truthfulness": 0.5, "penalty": 0.25}}}])
    >>> r.add([{"answers": {"m": {"fewl": None, "truthfulness": None, "penalty": None}}}])
    >>> s = r.summaries()["m"]; s["mean"], s["n"], s["mean_penalty"]
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

    def add(self, records: Iterable[Mapping[str, Any]]) -> None:
        """One chunk of records (dicts as samples.jsonl holds them)."""
        chunk = list(records)
        self.failed += [str(r["id"]) for r in chunk if r.get("pairs_failed")]
        for name in self.names:
            entries = [r["answers"][name] for r in chunk]
            fewl = _column(entries, "fewl")
            self.fewl[name].add(fewl)
            self.values[name].extend(fewl[np.isfinite(fewl)])
            self.truthfulness[name].add(_column(entries, "truthfulness"))
            self.penalty[name].add(_column(entries, "penalty"))

    def summaries(self) -> dict[str, Any]:
        """The ``models`` block of results.json."""
        out: dict[str, Any] = {}
        for name in self.names:
            mean, stderr = self.fewl[name].mean_stderr()
            low, high = bootstrap_ci(self.values[name].array())  # type: ignore[arg-type]
            out[name] = {"mean": mean, "stderr": stderr, "ci95": [low, high],
                         "n": self.fewl[name].n,
                         "mean_truthfulness": self.truthfulness[name].mean_stderr()[0],
                         "mean_penalty": self.penalty[name].mean_stderr()[0]}
        return out
