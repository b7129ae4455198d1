"""The P(True) baseline's typed per-item record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.jsontypes import JsonObject
from veracity.records import Record, json_object, number
from veracity.stats import Histogram


@dataclass(frozen=True)
class PTrueRecord(Record):
    """One question: the greedy answer, the model's reply to "is it true?" and P(True)."""

    id: str
    prompt: str
    answer: str
    score: float | None
    """P(True) in [0, 1]; larger = more trustworthy. None = unscored."""
    source: str = ""
    """``logprobs`` (next-token probabilities) or ``verdict`` (the reply read as a word)."""
    p_true: float | None = None
    p_false: float | None = None
    position: int | None = None
    verdict: str = ""
    """The model's reply to the True / False question."""
    model: str = ""
    references: tuple[str, ...] = ()
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> PTrueRecord:
        typed, rest = cls._split(json_object(data, "p-true record"))
        typed["id"] = str(typed["id"])
        typed["references"] = tuple(typed.get("references") or ())
        for name in ("score", "p_true", "p_false"):
            typed[name] = number(typed.get(name))
        return cls(**typed, extra=rest)

    def to_json(self) -> JsonObject:
        out = self._typed_json()
        out["references"] = list(self.references)
        return out | dict(self.extra)



@dataclass(frozen=True)
class PTrueSummary:
    """A P(True) run's results.json: the setup, the mean P(True) ± its standard error, how
    each was read (log-probabilities or the verdict word), and the histogram."""

    model: str
    dataset: str
    settings: Mapping[str, Any]
    """The run's :class:`~veracity.methods.p_true.core.PTrueSettings`, described."""
    n_items: int
    n_scored: int
    n_unscored: int
    mean_score: float | None
    """NaN (None once read back) when no question was scored."""
    stderr: float | None
    sources: Mapping[str, int]
    """Scores read from the log-probabilities (``logprobs``) and from the word (``verdict``)."""
    histogram: Histogram

    @property
    def prompt(self) -> str:
        """The True / False question's source (built in, or the user's file)."""
        return str(self.settings["prompt"])

    @classmethod
    def from_json(cls, data: Any) -> PTrueSummary:
        found = json_object(data, "p-true results")
        return cls(str(found.get("model")), str(found.get("dataset")),
                   json_object(found["settings"], "settings"), int(found["n_items"]),
                   int(found["n_scored"]), int(found["n_unscored"]), number(found["mean_score"]),
                   number(found["stderr"]),
                   {str(k): int(v) for k, v in json_object(found["sources"], "sources").items()},
                   Histogram.from_json(found["histogram"]))

    def to_json(self) -> JsonObject:
        return {"method": "p-true", "model": self.model, "dataset": self.dataset,
                "settings": dict(self.settings), "n_items": self.n_items,
                "n_scored": self.n_scored, "n_unscored": self.n_unscored,
                "mean_score": self.mean_score, "stderr": self.stderr,
                "sources": dict(self.sources), "histogram": self.histogram.to_json()}
