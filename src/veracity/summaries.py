"""Typed, frozen views of each method's aggregates (what results.json holds).

``from_results`` reads a run's results (``RunResult.results`` or ``RunDir.results``); the
dictionaries stay the stored form, these are what code reads. Undefined figures are None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _number(value: Any) -> float | None:
    """A stored figure: None for null or NaN."""
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number


@dataclass(frozen=True)
class GammaSummary:
    """γ over a run's items: how many were scored, mean ± standard error, median, and the
    share below the trust threshold."""

    n_items: int
    n_scored: int
    mean: float | None
    stderr: float | None
    median: float | None
    threshold: float
    share_below_threshold: float | None

    @classmethod
    def from_results(cls, results: Mapping[str, Any]) -> GammaSummary:
        agg = results["aggregate"]
        return cls(int(agg["n_items"]), int(agg["n_scored"]), _number(agg["mean"]),
                   _number(agg["stderr"]), _number(agg["median"]), float(agg["threshold"]),
                   _number(agg["share_below_threshold"]))


@dataclass(frozen=True)
class DeceptionSummary:
    """The DB-MMLU metrics of a run or of one subject (fractions in [0, 1])."""

    n_items: int
    normal_accuracy: float | None
    misleading_accuracy: float | None
    susceptibility: float | None
    """c_n / c_m over the subjects above the threshold; lower is better."""
    susceptibility_unbounded: bool
    """No correct misleading answer at all (so ``susceptibility`` is None)."""
    consistency: float | None
    consistent_correct: float | None
    consistent_incorrect: float | None
    error_rate_normal: float | None
    error_rate_misleading: float | None
    n_unscored: int = 0
    per_subject: Mapping[str, DeceptionSummary] = field(default_factory=dict)

    @classmethod
    def from_results(cls, results: Mapping[str, Any]) -> DeceptionSummary:
        per_subject = {name: cls.from_results(m) for name, m in
                       (results.get("per_subject") or {}).items()}
        return cls(
            int(results["n_items"]), _number(results["normal_accuracy"]),
            _number(results["misleading_accuracy"]), _number(results["susceptibility"]),
            bool(results.get("susceptibility_unbounded")), _number(results["consistency"]),
            _number(results.get("consistent_correct")), _number(results.get("consistent_incorrect")),
            _number(results["error_rate_normal"]), _number(results["error_rate_misleading"]),
            int(results.get("n_unscored") or 0), per_subject,
        )


@dataclass(frozen=True)
class FewlModelSummary:
    """FEWL of one answer source over the questions (higher = less hallucination)."""

    n: int
    mean: float | None
    stderr: float | None
    ci95: tuple[float | None, float | None]
    mean_truthfulness: float | None
    mean_penalty: float | None

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> FewlModelSummary:
        low, high = entry.get("ci95") or (None, None)
        return cls(int(entry["n"]), _number(entry["mean"]), _number(entry["stderr"]),
                   (_number(low), _number(high)), _number(entry["mean_truthfulness"]),
                   _number(entry["mean_penalty"]))


@dataclass(frozen=True)
class FewlSummary:
    """A FEWL run: its mode, each answer source's summary, and the unscored questions."""

    mode: str
    models: Mapping[str, FewlModelSummary]
    pairs_failed: tuple[str, ...] = ()

    @classmethod
    def from_results(cls, results: Mapping[str, Any]) -> FewlSummary:
        return cls(str(results["mode"]),
                   {k: FewlModelSummary.from_json(v) for k, v in results["models"].items()},
                   tuple(str(q) for q in results.get("pairs_failed") or ()))
