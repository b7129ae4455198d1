"""The semantic-entropy baseline's typed per-item record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.jsontypes import JsonObject
from veracity.records import Mean, Record, json_object, number
from veracity.stats import Histogram


@dataclass(frozen=True)
class SemanticEntropyRecord(Record):
    """One question: the greedy answer, M sampled answers, their meaning clusters and entropy."""

    id: str
    prompt: str
    answer: str
    """The greedy answer the entropy is a signal for."""
    score: float | None
    """The entropy of ``form``; larger = less trustworthy. None = unscored."""
    form: str = "discrete"
    discrete: float | None = None
    likelihood: float | None = None
    """The likelihood-weighted entropy; None where the samples had no log-probabilities."""
    n_clusters: int = 0
    samples: tuple[str, ...] = ()
    clusters: tuple[int, ...] = ()
    """Cluster id of each sample (from 0, in order of appearance)."""
    sample_logprobs: tuple[float | None, ...] = ()
    """Mean token log-probability of each sample (None: not returned)."""
    m: int = 0
    temperature: float = 0.0
    entailment: str = ""
    model: str = ""
    references: tuple[str, ...] = ()
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> SemanticEntropyRecord:
        typed, rest = cls._split(json_object(data, "semantic-entropy record"))
        typed["id"] = str(typed["id"])
        for name in ("samples", "references"):
            typed[name] = tuple(str(v) for v in typed.get(name) or ())
        typed["clusters"] = tuple(int(c) for c in typed.get("clusters") or ())
        typed["sample_logprobs"] = tuple(number(v) for v in typed.get("sample_logprobs") or ())
        for name in ("score", "discrete", "likelihood"):
            typed[name] = number(typed.get(name))
        return cls(**typed, extra=rest)

    def to_json(self) -> JsonObject:
        out = self._typed_json()
        for name in ("samples", "clusters", "sample_logprobs", "references"):
            out[name] = list(out[name])
        return out | dict(self.extra)




@dataclass(frozen=True)
class SemanticEntropySummary:
    """A semantic-entropy run's results.json: the setup, the mean entropy ± its standard
    error, each form's and the clusters' means, and the histogram."""

    model: str
    embedder: str
    dataset: str
    settings: Mapping[str, Any]
    """The run's :class:`~veracity.methods.semantic_entropy.core.SemanticEntropySettings`,
    described."""
    n_items: int
    n_scored: int
    n_unscored: int
    forms: Mapping[str, int]
    """Scores in the discrete and in the likelihood-weighted form."""
    mean_score: float | None
    """NaN (None once read back) when no question was scored."""
    stderr: float | None
    discrete: Mean
    likelihood: Mean
    n_clusters: Mean
    histogram: Histogram

    @property
    def m(self) -> int:
        return int(self.settings["m"])

    @property
    def temperature(self) -> float:
        return float(self.settings["temperature"])

    @property
    def entailment(self) -> str:
        """What decided that two answers mean the same."""
        return str(self.settings["entailment"])

    @classmethod
    def from_json(cls, data: Any) -> SemanticEntropySummary:
        found = json_object(data, "semantic-entropy results")
        return cls(str(found.get("model")), str(found.get("embedder")), str(found.get("dataset")),
                   json_object(found["settings"], "settings"), int(found["n_items"]),
                   int(found["n_scored"]), int(found["n_unscored"]),
                   {str(k): int(v) for k, v in json_object(found["forms"], "forms").items()},
                   number(found["mean_score"]), number(found["stderr"]),
                   Mean.from_json(found["discrete"]), Mean.from_json(found["likelihood"]),
                   Mean.from_json(found["n_clusters"]), Histogram.from_json(found["histogram"]))

    def to_json(self) -> JsonObject:
        return {"method": "semantic-entropy", "model": self.model, "embedder": self.embedder,
                "dataset": self.dataset, "settings": dict(self.settings),
                "n_items": self.n_items, "n_scored": self.n_scored,
                "n_unscored": self.n_unscored, "forms": dict(self.forms),
                "mean_score": self.mean_score, "stderr": self.stderr,
                "discrete": self.discrete.to_json(), "likelihood": self.likelihood.to_json(),
                "n_clusters": self.n_clusters.to_json(), "histogram": self.histogram.to_json()}
