"""Typed records of FEWL's mitigation runs: judged pairs per test question (ICL, fine-tuning)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.methods.fewl.mitigation.judge import Judged
from veracity.records import Record, json_object


def _judged_keys(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: data[k] for k in _JUDGED if k in data}


_JUDGED = ("outcome", "first_reply", "second_reply", "first", "second", "asked")


@dataclass(frozen=True)
class Comparison:
    """An ICL test question's judged pair: the candidate arm against the base arm."""

    candidate: str
    base: str
    judged: Judged

    @classmethod
    def from_json(cls, data: Any) -> Comparison:
        row = json_object(data, "judged pair")
        return cls(str(row.get("candidate", "")), str(row.get("base", "")),
                   Judged.from_json(_judged_keys(row)))

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "base": self.base, **self.judged.record()}


@dataclass(frozen=True)
class RuleAnswer:
    """A fine-tuned model's answer under one selection rule, judged against the base's."""

    answer: str
    correct: bool | None
    judged: Judged

    @classmethod
    def from_json(cls, data: Any) -> RuleAnswer:
        row = json_object(data, "rule answer")
        return cls(row.get("answer", ""), row.get("correct"), Judged.from_json(_judged_keys(row)))

    def to_json(self) -> dict[str, Any]:
        return {"answer": self.answer, "correct": self.correct, **self.judged.record()}


class MitigationRecord(Record):
    """One test question of a mitigation run: :class:`IclPair` (``fewl icl``) or
    :class:`FinetunePair` (``fewl finetune``), told apart by their keys when read."""

    id: str
    question: str

    @classmethod
    def from_json(cls, data: Any) -> MitigationRecord:
        row = json_object(data, "mitigation record")
        return IclPair.from_json(row) if "answers" in row else FinetunePair.from_json(row)


@dataclass(frozen=True)
class IclPair(MitigationRecord):
    """An ICL test question: each arm's answer and correctness, the worked examples each
    rule's prompt used, and the judged pairs."""

    id: str
    question: str
    answers: Mapping[str, str]
    correct: Mapping[str, bool | None]
    examples: Mapping[str, tuple[str, ...]]
    judged: tuple[Comparison, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> IclPair:
        row = dict(json_object(data, "ICL record"))
        return cls(str(row.pop("id", "")), row.pop("question", ""), dict(row.pop("answers", {})),
                   dict(row.pop("correct", {})),
                   {k: tuple(v) for k, v in dict(row.pop("examples", {})).items()},
                   tuple(Comparison.from_json(j) for j in row.pop("judged", ())), row)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "answers": dict(self.answers),
                "correct": dict(self.correct),
                "examples": {k: list(v) for k, v in self.examples.items()},
                "judged": [j.to_json() for j in self.judged]} | dict(self.extra)


@dataclass(frozen=True)
class FinetunePair(MitigationRecord):
    """A fine-tuning test question: the base model's answer and each rule's tuned answer
    judged against it."""

    id: str
    question: str
    base_name: str
    base_answer: str
    base_correct: bool | None
    rules: Mapping[str, RuleAnswer]
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> FinetunePair:
        row = dict(json_object(data, "fine-tuning record"))
        return cls(str(row.pop("id", "")), row.pop("question", ""), str(row.pop("base_name", "")),
                   row.pop("base_answer", ""), row.pop("base_correct", None),
                   {k: RuleAnswer.from_json(v) for k, v in dict(row.pop("rules", {})).items()},
                   row)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "base_name": self.base_name,
                "base_answer": self.base_answer, "base_correct": self.base_correct,
                "rules": {k: v.to_json() for k, v in self.rules.items()}} | dict(self.extra)
