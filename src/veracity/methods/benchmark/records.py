"""The benchmark's typed per-item record (every signal's value and every label source's label,
so anyone can recompute the tables from samples.jsonl alone) and its typed summary
(benchmark.json / results.json)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from veracity.jsontypes import JsonObject
from veracity.methods.benchmark.settings import BenchmarkSettings
from veracity.metrics import Estimate
from veracity.records import Record, json_object

FUSED = "fused"
"""The row of the cross-fitted logistic regression on every signal."""


@dataclass(frozen=True)
class BenchmarkRecord(Record):
    """One question: the shared greedy answer, each signal's raw value and each source's label."""

    id: str
    prompt: str
    answer: str
    scores: Mapping[str, float | None] = field(default_factory=dict)
    """Each signal's value as the method gives it (direction in benchmark.json's signals); a
    signal that could not score this answer is absent."""
    labels: Mapping[str, bool | None] = field(default_factory=dict)
    """Each label source's verdict: True = correct, None = this source cannot decide."""
    references: tuple[str, ...] = ()
    incorrect: tuple[str, ...] = ()
    samples: tuple[str, ...] = ()
    """Recorded sampled answers (score-only runs)."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> BenchmarkRecord:
        typed, rest = cls._split(json_object(data, "benchmark record"))
        for name in ("references", "incorrect", "samples"):
            typed[name] = tuple(typed.get(name) or ())
        typed["id"] = str(typed["id"])
        typed["scores"] = dict(typed.get("scores") or {})
        typed["labels"] = dict(typed.get("labels") or {})
        return cls(**typed, extra=rest)

    def to_json(self) -> JsonObject:
        out = self._typed_json()
        for name in ("references", "incorrect", "samples"):
            out[name] = list(out[name])
        out["scores"], out["labels"] = dict(self.scores), dict(self.labels)
        return out | dict(self.extra)


@dataclass(frozen=True)
class SignalInfo:
    """One leaderboard row's signal: where it came from and how to read it."""

    name: str
    method: str
    higher_is_better: bool
    baseline: bool
    settings: Mapping[str, Any] = field(default_factory=dict)
    n_scored: int = 0


@dataclass(frozen=True)
class Skipped:
    """A method (or one of its signals) left out of the tables, and why."""

    method: str
    reason: str


@dataclass(frozen=True)
class Cost:
    """What one method spent on a run (counted at the clients while it ran)."""

    requests: int = 0
    """Generation requests it made (cached or not): what the budget counts."""
    model_calls: int = 0
    """Requests the model actually answered (not from the cache)."""
    generated_tokens: int = 0
    wall_seconds: float = 0.0
    embed_seconds: float = 0.0
    scorer_seconds: float = 0.0
    """NLI / cross-encoder time."""

    def __add__(self, other: Cost) -> Cost:
        return self._with(other, 1)

    def __sub__(self, other: Cost) -> Cost:
        return self._with(other, -1)

    def _with(self, other: Cost, sign: int) -> Cost:
        return Cost(self.requests + sign * other.requests,
                    self.model_calls + sign * other.model_calls,
                    self.generated_tokens + sign * other.generated_tokens,
                    self.wall_seconds + sign * other.wall_seconds,
                    self.embed_seconds + sign * other.embed_seconds,
                    self.scorer_seconds + sign * other.scorer_seconds)

    def per_question(self, n: int) -> float:
        return self.requests / n if n else math.nan


Bins = tuple[Mapping[str, float | int], ...]
"""A reliability diagram: per equal-width bin its bounds, count, confidence and accuracy."""


def _estimate(data: Mapping[str, Any]) -> Estimate:
    def num(v: Any) -> float:
        return math.nan if v is None else float(v)

    return Estimate(num(data["value"]), num(data["ci"][0]), num(data["ci"][1]),
                    num(data["diff"]), num(data["diff_ci"][0]), num(data["diff_ci"][1]))


def _plain(v: float) -> float | None:
    return None if math.isnan(v) else v


@dataclass(frozen=True)
class LabelTable:
    """The leaderboard of one label source, on the items every signal scored and it labelled."""

    n_items: int
    n: int
    n_wrong: int
    accuracy: float | None
    problem: str | None = None
    """Why there is no table (one class only, too few items), else None."""
    reference: str | None = None
    """The best baseline, which the differences are taken to."""
    rows: Mapping[str, Mapping[str, Estimate]] = field(default_factory=dict)
    """Per signal (and the fused row) each metric with its intervals."""
    curves: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Per signal, the risk among the k kept answers for k = 1..n."""
    reliability: Mapping[str, Mapping[str, Bins]] = field(default_factory=dict)
    """Per signal and calibrator, the reliability diagram."""
    order: tuple[str, ...] = ()
    """The rows by AUROC, best first."""

    @property
    def winner(self) -> str | None:
        """The single signal of highest AUROC (fused left out), or None."""
        return next((n for n in self.order if n != FUSED), None)

    def to_json(self, drawn: bool = True) -> JsonObject:
        """benchmark.json's table; without ``drawn`` the curves and reliability bins are left
        out (``--json``)."""
        out: JsonObject = {"n_items": self.n_items, "n": self.n, "n_wrong": self.n_wrong,
                           "accuracy": self.accuracy}
        if self.problem is not None:
            return out | {"problem": self.problem}
        out |= {
            "reference": self.reference,
            "metrics": {name: {key: _plain(est.value) for key, est in row.items()}
                        for name, row in self.rows.items()},
            "intervals": {name: {key: est.to_json() for key, est in row.items()}
                          for name, row in self.rows.items()}}
        if drawn:
            out |= {"curves": {name: list(risk) for name, risk in self.curves.items()},
                    "reliability": {name: {how: [dict(b) for b in bins]
                                           for how, bins in by.items()}
                                    for name, by in self.reliability.items()}}
        return out | {"order": list(self.order)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LabelTable:
        return cls(data["n_items"], data["n"], data["n_wrong"], data.get("accuracy"),
                   data.get("problem"), data.get("reference"),
                   {name: {key: _estimate(est) for key, est in row.items()}
                    for name, row in data.get("intervals", {}).items()},
                   {name: tuple(risk) for name, risk in data.get("curves", {}).items()},
                   {name: {how: tuple(bins) for how, bins in by.items()}
                    for name, by in data.get("reliability", {}).items()},
                   tuple(data.get("order", ())))


@dataclass(frozen=True)
class BenchmarkSummary:
    """A benchmark run's tables: benchmark.json and results.json are its ``to_json()``."""

    model: str | None
    embedder: str
    dataset: str
    n_items: int
    settings: BenchmarkSettings
    metrics: tuple[str, ...]
    signals: tuple[SignalInfo, ...]
    skipped: tuple[Skipped, ...]
    costs: Mapping[str, Cost]
    """Per method (and the shared greedy answers), in the order the methods ran."""
    tables: Mapping[str, LabelTable]
    """One per label source."""
    warnings: tuple[str, ...]

    def method_of(self, signal: str) -> str:
        return next((s.method for s in self.signals if s.name == signal), signal)

    def to_json(self) -> JsonObject:
        return {
            "method": "benchmark", "model": self.model, "embedder": self.embedder,
            "dataset": self.dataset, "n_items": self.n_items,
            "settings": self.settings.describe(), "metrics": list(self.metrics),
            "signals": [asdict(s) for s in self.signals],
            "skipped": [asdict(s) for s in self.skipped],
            "costs": {name: asdict(c) | {"requests_per_question": c.per_question(self.n_items)}
                      for name, c in self.costs.items()},
            "tables": {source: t.to_json() for source, t in self.tables.items()},
            "warnings": list(self.warnings)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BenchmarkSummary:
        settings = dict(data["settings"])
        for name in ("labels", "methods", "references"):
            settings[name] = tuple(settings.get(name) or ())
        return cls(
            data.get("model"), data["embedder"], data["dataset"], data["n_items"],
            BenchmarkSettings(**settings), tuple(data["metrics"]),
            tuple(SignalInfo(**s) for s in data["signals"]),
            tuple(Skipped(**s) for s in data["skipped"]),
            {name: Cost(**{k: v for k, v in c.items() if k != "requests_per_question"})
             for name, c in data["costs"].items()},
            {source: LabelTable.from_json(t) for source, t in data["tables"].items()},
            tuple(data["warnings"]))
