"""The benchmark's typed per-item record: every signal's value and every label source's label,
so anyone can recompute the tables from samples.jsonl alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.records import Record, json_object


@dataclass(frozen=True)
class BenchmarkRecord(Record):
    """One question: the shared greedy answer, each signal's raw value and each source's label."""

    id: str
    prompt: str
    answer: str
    scores: Mapping[str, float | None] = field(default_factory=dict)
    """Each signal's value as the method gives it (direction in benchmark.json's signals)."""
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

    def to_json(self) -> dict[str, Any]:
        out = self._typed_json()
        for name in ("references", "incorrect", "samples"):
            out[name] = list(out[name])
        out["scores"], out["labels"] = dict(self.scores), dict(self.labels)
        return out | dict(self.extra)
