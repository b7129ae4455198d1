"""Result variability (the DB-MMLU paper's §6): the benchmark run R times at the paper's
sampling temperature, repeat r with seed + r, and each metric as mean ± sample standard
deviation across the repeats."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from veracity.jsontypes import JsonObject
from veracity.methods.deception.records import DeceptionSummary

METRICS = ("normal_accuracy", "misleading_accuracy", "susceptibility", "consistency",
           "error_rate_normal", "error_rate_misleading")
"""The run-level figures of Table 3 and Figure A7 that vary with sampling."""


@dataclass(frozen=True)
class Spread:
    """One metric over the repeats: mean ± sample standard deviation (ddof 1)."""

    values: tuple[float | None, ...]

    @property
    def defined(self) -> list[float]:
        return [v for v in self.values if v is not None and math.isfinite(v)]

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.defined) if self.defined else None

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.defined) if len(self.defined) >= 2 else None

    def to_json(self) -> JsonObject:
        return {"values": list(self.values), "mean": self.mean, "sd": self.sd,
                "n": len(self.defined)}


def _figures(summary: DeceptionSummary) -> dict[str, float | None]:
    return {"normal_accuracy": summary.normal_accuracy,
            "misleading_accuracy": summary.misleading_accuracy,
            "susceptibility": None if summary.susceptibility_unbounded else summary.susceptibility,
            "consistency": summary.consistency, "error_rate_normal": summary.error_rate_normal,
            "error_rate_misleading": summary.error_rate_misleading}


def spreads(summaries: Sequence[DeceptionSummary]) -> dict[str, Spread]:
    """Each metric's spread over the repeats' summaries (undefined values, e.g. an unbounded
    susceptibility, are listed as None and left out of the mean and sd)."""
    figures = [_figures(s) for s in summaries]
    return {name: Spread(tuple(f[name] for f in figures)) for name in METRICS}
