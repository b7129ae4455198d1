"""The self-consistency baseline's typed per-item record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.records import Record, json_object


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

    def to_json(self) -> dict[str, Any]:
        out = self._typed_json()
        for name in ("samples", "cosines", "references"):
            out[name] = list(out[name])
        return out | dict(self.extra)
