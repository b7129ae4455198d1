"""The self-consistency baseline's typed per-item record and run summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.jsontypes import JsonObject
from veracity.records import Record, json_object, number
from veracity.stats import Histogram


@dataclass(frozen=True)
class ConsistencyRecord(Record):
    """One question: the greedy answer, the M answers sampled at T > 0, and how close they stay."""

    id: str
    prompt: str
    answer: str
    """The greedy (T = 0) answer the samples are compared with."""
    score: float | None
    """(mean cosine + 1) / 2 in [0, 1]; higher = more consistent. None = unscored."""
    samples: tuple[str, ...] = ()
    cosines: tuple[float, ...] = ()
    """Cosine of each sample's embedding to the greedy answer's."""
    m: int = 0
    temperature: float = 0.0
    seed: int = 0
    model: str = ""
    embedder: str = ""
    references: tuple[str, ...] = ()
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> ConsistencyRecord:
        typed, rest = cls._split(json_object(data, "consistency record"))
        for name in ("samples", "cosines", "references"):
            typed[name] = tuple(typed.get(name) or ())
        typed["id"] = str(typed["id"])
        return cls(**typed, extra=rest)

    def to_json(self) -> JsonObject:
        out = self._typed_json()
        for name in ("samples", "cosines", "references"):
            out[name] = list(out[name])
        return out | dict(self.extra)


@dataclass(frozen=True)
class ConsistencySummary:
    """A self-consistency run's results.json: the setup, the mean score ± its standard error
    over the scored questions, and the score histogram."""

    model: str
    embedder: str
    dataset: str
    settings: Mapping[str, Any]
    """The run's :class:`~veracity.methods.consistency.core.ConsistencySettings`, described."""
    n_items: int
    n_scored: int
    n_unscored: int
    mean_score: float | None
    """NaN (None once read back) when no question was scored."""
    stderr: float | None
    histogram: Histogram

    @property
    def m(self) -> int:
        return int(self.settings["m"])

    @property
    def temperature(self) -> float:
        return float(self.settings["temperature"])

    @classmethod
    def from_json(cls, data: Any) -> ConsistencySummary:
        found = json_object(data, "consistency results")
        return cls(str(found.get("model")), str(found.get("embedder")), str(found.get("dataset")),
                   json_object(found["settings"], "settings"), int(found["n_items"]),
                   int(found["n_scored"]), int(found["n_unscored"]), number(found["mean_score"]),
                   number(found["stderr"]), Histogram.from_json(json_object(found["histogram"], "histogram")))

    def to_json(self) -> JsonObject:
        return {"method": "consistency", "model": self.model, "embedder": self.embedder,
                "dataset": self.dataset, "settings": dict(self.settings),
                "n_items": self.n_items, "n_scored": self.n_scored,
                "n_unscored": self.n_unscored, "mean_score": self.mean_score,
                "stderr": self.stderr, "histogram": self.histogram.to_json()}
