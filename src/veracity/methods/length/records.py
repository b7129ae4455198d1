"""The length baseline's typed per-item record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.records import Record, json_object, number


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

    def to_json(self) -> dict[str, Any]:
        out = self._typed_json()
        out["references"] = list(self.references)
        return out | dict(self.extra)
