"""FEWL's typed per-question record and run summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from veracity.methods.fewl.judge import Judged
from veracity.records import Record, json_object, number


@dataclass(frozen=True)
class FewlAnswer:
    """One answer set's score on one question."""

    answer: str | None
    truthfulness: float | None
    penalty: float | None
    fewl: float | None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """``variants`` (validate: every ablation), ``choice`` (rank: the option it matches)."""

    @classmethod
    def from_json(cls, data: Any) -> FewlAnswer:
        entry = dict(json_object(data, "FEWL answer"))
        return cls(entry.pop("answer", None), entry.pop("truthfulness", None),
                   entry.pop("penalty", None), entry.pop("fewl", None), entry)

    def to_json(self) -> dict[str, Any]:
        return {"answer": self.answer, "truthfulness": self.truthfulness,
                "penalty": self.penalty, "fewl": self.fewl} | dict(self.extra)


@dataclass(frozen=True)
class FewlRecord(Record):
    """One question's FEWL: references, pairs, expertise weights and each answer set's score."""

    _renamed: ClassVar[Mapping[str, str]] = {"weights": "lambda"}

    id: str
    question: str
    value: float | None
    """FEWL of the first answer set (select: of the chosen candidate); None = unscored."""
    answer: str | None
    references: tuple[str, ...] = ()
    reference_models: tuple[str, ...] = ()
    pairs: tuple[Mapping[str, str], ...] = ()
    pairs_attempts: int = 0
    pairs_failed: bool = False
    scored: bool = True
    pairs_error: str | None = None
    pairs_raw: str | None = None
    expertise: tuple[float | None, ...] = ()
    weights: tuple[float | None, ...] = ()
    """λ per reference (``lambda`` in JSON)."""
    neighbours: tuple[str, ...] = ()
    neighbour_cosine: tuple[float | None, ...] = ()
    answers: Mapping[str, FewlAnswer] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> FewlRecord:
        typed, rest = cls._split(json_object(data, "FEWL record"))
        for name in ("references", "reference_models", "pairs", "expertise", "weights",
                     "neighbours", "neighbour_cosine"):
            typed[name] = tuple(typed.get(name) or ())
        typed["answers"] = {k: FewlAnswer.from_json(v)
                            for k, v in json_object(typed.get("answers", {}), "answers").items()}
        typed["id"] = str(typed["id"])
        return cls(**typed, extra=rest)

    def with_answer_keys(self, name: str, **keys: Any) -> FewlRecord:
        """The record with untyped keys added to answer set ``name`` (a rank's matched
        option, a validation's TQA metric)."""
        entry = self.answers[name]
        return replace(self, answers={**self.answers,
                                      name: replace(entry, extra={**entry.extra, **keys})})

    def to_json(self) -> dict[str, Any]:
        out = self._typed_json()
        for name in ("references", "reference_models", "expertise", "lambda", "neighbours",
                     "neighbour_cosine"):
            out[name] = list(out[name])
        out["pairs"] = [dict(p) for p in self.pairs]
        out["answers"] = {k: v.to_json() for k, v in self.answers.items()}
        return out | dict(self.extra)


@dataclass(frozen=True)
class FewlModelSummary:
    """FEWL of one answer source over the questions (higher = less hallucination)."""

    n: int
    mean: float | None
    stderr: float | None
    ci95: tuple[float | None, float | None]
    mean_truthfulness: float | None
    mean_penalty: float | None

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> FewlModelSummary:
        low, high = entry.get("ci95") or (None, None)
        return cls(int(entry["n"]), number(entry["mean"]), number(entry["stderr"]),
                   (number(low), number(high)), number(entry["mean_truthfulness"]),
                   number(entry["mean_penalty"]))


@dataclass(frozen=True)
class FewlSummary:
    """A FEWL run: its mode, each answer source's summary, and the unscored questions."""

    mode: str
    models: Mapping[str, FewlModelSummary]
    pairs_failed: tuple[str, ...] = ()

    @classmethod
    def from_results(cls, results: Mapping[str, Any]) -> FewlSummary:
        return cls(str(results["mode"]),
                   {k: FewlModelSummary.from_json(v) for k, v in results["models"].items()},
                   tuple(str(q) for q in results.get("pairs_failed") or ()))


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
