"""The semantic-entropy baseline's typed per-item record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.records import Record, json_object, number


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

    def to_json(self) -> dict[str, Any]:
        out = self._typed_json()
        for name in ("samples", "clusters", "sample_logprobs", "references"):
            out[name] = list(out[name])
        return out | dict(self.extra)
