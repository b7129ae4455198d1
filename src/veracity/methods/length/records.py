"""The length baseline's typed per-item record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.jsontypes import JsonObject
from veracity.records import Record, json_object, number
from veracity.stats import Histogram


@dataclass(frozen=True)
class LengthRecord(Record):
    """One question: the greedy answer and its length in tokens."""

    id: str
    prompt: str
    answer: str
    score: float | None
    """Tokens in the answer; larger = less trustworthy. None = unscored."""
    counted_by: str = ""
    """``model`` (the backend's tokenizer) or ``words`` (the fallback)."""
    finish_reason: str = ""
    """``length`` when the answer was cut at max_tokens."""
    model: str = ""
    references: tuple[str, ...] = ()
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> LengthRecord:
        typed, rest = cls._split(json_object(data, "length record"))
        typed["id"] = str(typed["id"])
        typed["references"] = tuple(typed.get("references") or ())
        typed["score"] = number(typed.get("score"))
        return cls(**typed, extra=rest)

    def to_json(self) -> JsonObject:
        out = self._typed_json()
        out["references"] = list(self.references)
        return out | dict(self.extra)



@dataclass(frozen=True)
class LengthSummary:
    """A length run's results.json: the setup, the mean length ± its standard error, its
    quartiles, how the lengths were counted, the answers cut short, and the histogram."""

    model: str
    dataset: str
    settings: Mapping[str, Any]
    """The run's :class:`~veracity.methods.length.core.LengthSettings`, described."""
    n_items: int
    n_scored: int
    n_unscored: int
    mean_score: float | None
    """NaN (None once read back) when no question was scored."""
    stderr: float | None
    quartiles: tuple[float, ...]
    """25th, 50th and 75th percentiles; empty when no question was scored."""
    counted_by: Mapping[str, int]
    """Answers counted by the model's tokenizer (``model``) and by the fallback (``words``)."""
    n_cut_at_max_tokens: int
    histogram: Histogram

    @classmethod
    def from_json(cls, data: Any) -> LengthSummary:
        found = json_object(data, "length results")
        return cls(str(found.get("model")), str(found.get("dataset")),
                   json_object(found["settings"], "settings"), int(found["n_items"]),
                   int(found["n_scored"]), int(found["n_unscored"]), number(found["mean_score"]),
                   number(found["stderr"]), tuple(float(q) for q in found["quartiles"]),
                   {str(k): int(v) for k, v in json_object(found["counted_by"],
                                                           "counted_by").items()},
                   int(found["n_cut_at_max_tokens"]), Histogram.from_json(found["histogram"]))

    def to_json(self) -> JsonObject:
        return {"method": "length", "model": self.model, "dataset": self.dataset,
                "settings": dict(self.settings), "n_items": self.n_items,
                "n_scored": self.n_scored, "n_unscored": self.n_unscored,
                "mean_score": self.mean_score, "stderr": self.stderr,
                "quartiles": list(self.quartiles), "counted_by": dict(self.counted_by),
                "n_cut_at_max_tokens": self.n_cut_at_max_tokens,
                "histogram": self.histogram.to_json()}
