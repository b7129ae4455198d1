"""One pass over a traffic log, in memory that grows by a few numbers an exchange.

Per model: the γ, P(correct) and latency values as packed float arrays (8 bytes each, what
the medians and plots need), verdict counts and embedders; across models: the least
trustworthy exchanges (a heap of bounded size), the calibrations used and the error reasons.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from veracity.traffic import Entry


@dataclass
class ModelTraffic:
    """Running figures of one model's exchanges."""

    exchanges: int = 0
    gammas: array[float] = field(default_factory=lambda: array("d"))
    times: array[float] = field(default_factory=lambda: array("d"))
    """When each scored γ was logged (the γ-over-time plot)."""
    chances: array[float] = field(default_factory=lambda: array("d"))
    latency: array[float] = field(default_factory=lambda: array("d"))
    verdicts: Counter[str] = field(default_factory=Counter)
    embedders: set[str] = field(default_factory=set)
    decisions: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    """Tokens the scores' perturbed calls sent upstream (logs that record them)."""
    priced: int = 0
    """Scores that carry a cost (a gateway run with --prices), and their total in USD."""
    cost: float = 0.0

    def add(self, e: Entry) -> None:
        self.exchanges += 1
        if e.gamma is not None:
            self.gammas.append(e.gamma)
            self.times.append(e.time)
        if e.p_correct is not None:
            self.chances.append(e.p_correct)
        if e.total_ms is not None:
            self.latency.append(e.total_ms)
        self.verdicts[e.verdict] += 1
        self.embedders.add(str(e.score.get("embedder")))
        self.decisions[e.decision or "answer"] += 1
        spent = e.score.get("tokens")
        if isinstance(spent, dict):
            self.tokens += sum(v for v in spent.values() if isinstance(v, int))
        cost = e.score.get("cost_usd")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            self.priced += 1
            self.cost += float(cost)


def fmean(values: array[float]) -> float | None:
    """``statistics.fmean`` (the correctly rounded sum over n), None for no values."""
    return math.fsum(values) / len(values) if values else None


def median(values: array[float]) -> float | None:
    """``statistics.median``, None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass
class TrafficSummary:
    """Everything the traffic report shows, accumulated exchange by exchange."""

    shown: int = 50
    count: int = 0
    first: float | None = None
    last: float | None = None
    latest: dict[str, Any] = field(default_factory=dict)
    """The settings of the newest exchange's score."""
    models: dict[str, ModelTraffic] = field(default_factory=dict)
    calibrations: dict[tuple[str, bool], dict[str, Any]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    _worst: list[tuple[float, int, Entry]] = field(default_factory=list)

    def add(self, e: Entry) -> None:
        if self.first is None:
            self.first = e.time
        self.last = e.time
        self.latest = e.score
        self.models.setdefault(e.model, ModelTraffic()).add(e)
        info = e.score.get("calibration")
        if isinstance(info, dict):
            self.calibrations[(str(info.get("source")), bool(info.get("forced")))] = info
        if e.error:
            self.errors[e.error] += 1
        if e.gamma is not None:
            # ties keep the earlier exchange: the order a stable sort by -γ gives
            key = (e.gamma, -self.count, e)
            if len(self._worst) < self.shown:
                heapq.heappush(self._worst, key)
            elif key[:2] > self._worst[0][:2]:
                heapq.heapreplace(self._worst, key)
        self.count += 1

    def worst(self) -> list[Entry]:
        """The exchanges with the highest γ, highest first (at most ``shown``)."""
        return [e for _, _, e in sorted(self._worst, key=lambda w: (-w[0], -w[1]))]
