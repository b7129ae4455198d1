"""The P(True) baseline's typed per-item record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.records import Record, json_object, number


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

    def to_json(self) -> dict[str, Any]:
        out = self._typed_json()
        out["references"] = list(self.references)
        return out | dict(self.extra)
