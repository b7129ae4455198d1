"""Typed records of an adversarial γ search: one per step, with its candidates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.jsontypes import JsonObject
from veracity.records import Record, json_object


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value or ())


@dataclass(frozen=True)
class AttackPoint:
    """One candidate of an attack step: its prompt, answer and γ."""

    prompt: str
    answer: str
    gamma: float | None

    @classmethod
    def from_json(cls, data: Any) -> AttackPoint:
        row = json_object(data, "attack candidate")
        return cls(row.get("prompt", ""), row.get("answer", ""), row.get("gamma"))

    def to_json(self) -> JsonObject:
        return {"prompt": self.prompt, "answer": self.answer, "gamma": self.gamma}


@dataclass(frozen=True)
class AttackStep(Record):
    """One step of an adversarial γ search (step 0 = the start): the point moved to, the
    candidates it was chosen from, and the generations spent so far."""

    id: str
    step: int
    prompt: str
    suffix: str | None
    """What the walk appended to the start prompt (None: the prompt no longer starts with it)."""
    answer: str
    gamma: float | None
    perturbed_prompts: tuple[str, ...] = ()
    perturbed_answers: tuple[str, ...] = ()
    chosen: int | None = None
    """Index of the candidate moved to (None at the start)."""
    candidates: tuple[AttackPoint, ...] = ()
    requested_calls: int = 0
    model: str = ""
    embedder: str = ""
    form: str = "sin"
    ball: str = ""
    error: str | None = None
    similarity_to_start: float | None = None
    """Cosine of this step's answer embedding to the start's."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> AttackStep:
        """A step as samples.jsonl holds it."""
        typed, rest = cls._split(json_object(data, "attack step"))
        typed["id"] = str(typed.get("id", ""))
        for name in ("perturbed_prompts", "perturbed_answers"):
            typed[name] = _strings(typed.get(name))
        typed["candidates"] = tuple(AttackPoint.from_json(c) for c in typed.get("candidates") or ())
        required: dict[str, Any] = {"step": 0, "prompt": "", "suffix": None, "answer": "",
                                    "gamma": None}
        return cls(**required | typed, extra=rest)

    def to_json(self) -> JsonObject:
        """The samples.jsonl shape (the one ``veracity attack --json`` prints)."""
        out = self._typed_json()
        out |= {"perturbed_prompts": list(self.perturbed_prompts),
                "perturbed_answers": list(self.perturbed_answers),
                "candidates": [c.to_json() for c in self.candidates]}
        return out | dict(self.extra)
