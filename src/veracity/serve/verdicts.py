"""Where a score's verdict thresholds come from.

A :class:`ThresholdSource` answers "which (low, high) apply to this model, embedder and gamma
form?". Today the gateway uses :class:`FixedThresholds` (``--thresholds low,high`` or the
authors' buckets); a calibration file keyed by (model, embedder, form) plugs in as another
source without touching the scoring code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from veracity.methods.gamma import Form
from veracity.methods.trust import Verdict, check_thresholds, default_thresholds, verdict


@dataclass(frozen=True)
class Thresholds:
    """(low, high) and where they came from; recorded in every score."""

    low: float
    high: float
    source: str

    def verdict(self, gamma: float | None) -> Verdict:
        return verdict(gamma, (self.low, self.high))

    def to_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "source": self.source}


class ThresholdSource(Protocol):
    """Thresholds for one (model, embedder, form)."""

    def lookup(self, model: str, embedder: str, form: Form) -> Thresholds: ...


class FixedThresholds:
    """The same thresholds for every model: given ones, or the authors' 0.1 / 0.2 buckets."""

    def __init__(self, thresholds: tuple[float, float] | None = None) -> None:
        self._given = None if thresholds is None else check_thresholds(thresholds)

    def lookup(self, model: str, embedder: str, form: Form) -> Thresholds:
        if self._given is not None:
            return Thresholds(*self._given, source="--thresholds")
        low, high = default_thresholds(form)
        return Thresholds(low, high, source="authors' 0.1 / 0.2 buckets")
