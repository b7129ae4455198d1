"""The log-probability baseline's typed per-item record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.jsontypes import JsonObject
from veracity.records import Mean, Record, json_object, number
from veracity.stats import Histogram


@dataclass(frozen=True)
class LogprobRecord(Record):
    """One question: the greedy answer and the log-probability signals of its tokens."""

    id: str
    prompt: str
    answer: str
    score: float | None
    """The run's chosen signal (``signal``); None = unscored."""
    signal: str = "mean_logprob"
    mean_logprob: float | None = None
    min_prob: float | None = None
    mean_entropy: float | None = None
    perplexity: float | None = None
    n_tokens: int = 0
    top_k: int = 0
    tokens: tuple[tuple[str, float], ...] = ()
    """Each answer token with its log-probability (the drill-down shows them)."""
    model: str = ""
    references: tuple[str, ...] = ()
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> LogprobRecord:
        typed, rest = cls._split(json_object(data, "logprob record"))
        typed["id"] = str(typed["id"])
        typed["references"] = tuple(typed.get("references") or ())
        typed["tokens"] = tuple((str(t), float(lp)) for t, lp in typed.get("tokens") or ())
        for name in ("score", "mean_logprob", "min_prob", "mean_entropy", "perplexity"):
            typed[name] = number(typed.get(name))
        return cls(**typed, extra=rest)

    def to_json(self) -> JsonObject:
        out = self._typed_json()
        out["references"] = list(self.references)
        out["tokens"] = [[t, lp] for t, lp in self.tokens]
        return out | dict(self.extra)




STATISTICS = ("mean_logprob", "min_prob", "mean_entropy", "perplexity", "n_tokens")
"""The per-answer values a logprob run summarises (the four signals and the answer's length)."""


@dataclass(frozen=True)
class LogprobSummary:
    """A logprob run's results.json: the setup, each signal's (and the length's) mean ± its
    standard error, the histogram of the run's signal and its mean."""

    model: str
    dataset: str
    settings: Mapping[str, Any]
    """The run's :class:`~veracity.methods.logprob.core.LogprobSettings`, described."""
    n_items: int
    n_scored: int
    n_unscored: int
    means: Mapping[str, Mean]
    """Per name of :data:`STATISTICS`."""
    histogram: Histogram
    mean_score: float | None
    """The mean of the run's signal (``settings["signal"]``)."""

    @property
    def signal(self) -> str:
        return str(self.settings["signal"])

    @property
    def top_k(self) -> int:
        return int(self.settings["top_k"])

    @classmethod
    def from_json(cls, data: Any) -> LogprobSummary:
        found = json_object(data, "logprob results")
        return cls(str(found.get("model")), str(found.get("dataset")),
                   json_object(found["settings"], "settings"), int(found["n_items"]),
                   int(found["n_scored"]), int(found["n_unscored"]),
                   {name: Mean.from_json(found[name]) for name in STATISTICS},
                   Histogram.from_json(found["histogram"]), number(found["mean_score"]))

    def to_json(self) -> JsonObject:
        return {"method": "logprob", "model": self.model, "dataset": self.dataset,
                "settings": dict(self.settings), "n_items": self.n_items,
                "n_scored": self.n_scored, "n_unscored": self.n_unscored,
                **{name: self.means[name].to_json() for name in STATISTICS},
                "histogram": self.histogram.to_json(), "mean_score": self.mean_score}
