"""The log-probability baseline's typed per-item record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.records import Record, json_object, number


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

    def to_json(self) -> dict[str, Any]:
        out = self._typed_json()
        out["references"] = list(self.references)
        out["tokens"] = [[t, lp] for t, lp in self.tokens]
        return out | dict(self.extra)
