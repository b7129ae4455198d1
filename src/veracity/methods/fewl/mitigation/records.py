"""Typed records of FEWL's mitigation runs: judged pairs per test question (ICL, fine-tuning)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.jsontypes import JsonObject
from veracity.methods.fewl.mitigation.judge import Judged, WinRates
from veracity.records import Record, json_object, number


def _judged_keys(data: Mapping[str, Any]) -> JsonObject:
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

    def to_json(self) -> JsonObject:
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

    def to_json(self) -> JsonObject:
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

    def to_json(self) -> JsonObject:
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

    def to_json(self) -> JsonObject:
        return {"id": self.id, "question": self.question, "base_name": self.base_name,
                "base_answer": self.base_answer, "base_correct": self.base_correct,
                "rules": {k: v.to_json() for k, v in self.rules.items()}} | dict(self.extra)


@dataclass(frozen=True)
class Accuracy:
    """Share of correct answers on the labels, with its s.e. and bootstrap CI."""

    mean: float | None
    stderr: float | None
    ci95: tuple[float | None, float | None]
    n: int

    @classmethod
    def from_json(cls, data: Any) -> Accuracy | None:
        if data is None:
            return None
        found = json_object(data, "accuracy")
        low, high = found.get("ci95") or (None, None)
        return cls(number(found.get("mean")), number(found.get("stderr")),
                   (number(low), number(high)), int(found.get("n") or 0))

    def to_json(self) -> JsonObject:
        return {"mean": self.mean, "stderr": self.stderr, "ci95": list(self.ci95), "n": self.n}


def _accuracy_json(value: Accuracy | None) -> JsonObject | None:
    return None if value is None else value.to_json()


@dataclass(frozen=True)
class RuleRow:
    """One selection rule's answers judged against the base arm."""

    rule: str
    rates: WinRates
    accuracy: Accuracy | None

    @classmethod
    def from_json(cls, data: Any) -> RuleRow:
        found = json_object(data, "rule row")
        return cls(str(found["rule"]), WinRates.from_json(found),
                   Accuracy.from_json(found.get("accuracy")))

    def to_json(self) -> JsonObject:
        return {"rule": self.rule, **self.rates.to_json(),
                "accuracy": _accuracy_json(self.accuracy)}


@dataclass(frozen=True)
class HeadToHead:
    """Table 6: one arm's answers judged against another's (a rule against the baseline)."""

    candidate: str
    base: str
    rates: WinRates
    accuracy: Accuracy | None
    base_accuracy: Accuracy | None

    @classmethod
    def from_json(cls, data: Any) -> HeadToHead:
        found = json_object(data, "head-to-head row")
        return cls(str(found["candidate"]), str(found["base"]), WinRates.from_json(found),
                   Accuracy.from_json(found.get("accuracy")),
                   Accuracy.from_json(found.get("base_accuracy")))

    def to_json(self) -> JsonObject:
        return {"candidate": self.candidate, "base": self.base, **self.rates.to_json(),
                "accuracy": _accuracy_json(self.accuracy),
                "base_accuracy": _accuracy_json(self.base_accuracy)}


@dataclass(frozen=True)
class Training:
    """One rule's fine-tuning: steps, time, loss and where the model was saved."""

    steps: int
    seconds: float
    examples: int
    train_loss: float | None
    resumed_from: str | None
    method: str
    adapter: str | None
    """The adapter's folder, relative to the run directory."""
    merged: str | None

    @classmethod
    def from_json(cls, data: Any) -> Training:
        found = json_object(data, "training")
        return cls(int(found["steps"]), float(found["seconds"]), int(found["examples"]),
                   number(found.get("train_loss")), found.get("resumed_from"),
                   str(found.get("method", "lora")), found.get("adapter"), found.get("merged"))

    def to_json(self) -> JsonObject:
        return {"steps": self.steps, "seconds": self.seconds, "examples": self.examples,
                "train_loss": self.train_loss, "resumed_from": self.resumed_from,
                "method": self.method, "adapter": self.adapter, "merged": self.merged}


@dataclass(frozen=True)
class IclSummary:
    """What an ``icl`` run adds: its example settings, pool and Table 6's rows."""

    settings: Mapping[str, Any]
    """The ICL settings as described (examples, pool, format, zero_shot, template)."""
    pool_size: int
    head_to_head: tuple[HeadToHead, ...]
    accuracy: Mapping[str, Accuracy | None]
    """Accuracy on the labels of every arm."""


@dataclass(frozen=True)
class FinetuneSummary:
    """What a ``finetune`` run adds: the training of each rule and the LoRA settings."""

    training: Mapping[str, Training]
    method: str
    lora: Mapping[str, Any]
    """The fine-tuning settings as given."""


@dataclass(frozen=True)
class MitigationResults:
    """An ``icl`` or ``finetune`` run's results.json: the split, the base arm's accuracy and
    each rule's row, and what the mode adds."""

    mode: str
    dataset: str
    judge: str
    model: str
    n_train: int
    n_test: int
    base_name: str
    base_accuracy: Accuracy | None
    rows: tuple[RuleRow, ...]
    icl: IclSummary | None = None
    finetune: FinetuneSummary | None = None

    @classmethod
    def from_json(cls, data: Any) -> MitigationResults:
        found = json_object(data, "mitigation results")
        icl = finetune = None
        if found.get("mode") == "icl":
            icl = IclSummary({k: found[k] for k in _ICL_SETTINGS if k in found},
                             int(found.get("pool_size") or 0),
                             tuple(HeadToHead.from_json(r) for r in found.get("head_to_head")
                                   or ()),
                             {str(k): Accuracy.from_json(v)
                              for k, v in (found.get("accuracy") or {}).items()})
        elif "training" in found:
            finetune = FinetuneSummary({str(k): Training.from_json(v)
                                        for k, v in found["training"].items()},
                                       str(found.get("method", "lora")),
                                       json_object(found.get("lora") or {}, "lora"))
        return cls(str(found["mode"]), str(found.get("dataset", "")), str(found.get("judge")),
                   str(found.get("model")), int(found.get("n_train") or 0),
                   int(found.get("n_test") or 0), str(found.get("base_name", "base")),
                   Accuracy.from_json(found.get("base_accuracy")),
                   tuple(RuleRow.from_json(r) for r in found.get("rows") or ()), icl, finetune)

    def to_json(self) -> JsonObject:
        head: JsonObject = {"method": "mitigation", "mode": self.mode,
                            "dataset": self.dataset, "judge": self.judge, "model": self.model}
        rows = [r.to_json() for r in self.rows]
        base = _accuracy_json(self.base_accuracy)
        if self.icl is not None:
            return head | dict(self.icl.settings) | {
                "n_train": self.n_train, "n_test": self.n_test, "pool_size": self.icl.pool_size,
                "head_to_head": [r.to_json() for r in self.icl.head_to_head],
                "base_name": self.base_name, "base_accuracy": base, "rows": rows,
                "accuracy": {k: _accuracy_json(v) for k, v in self.icl.accuracy.items()}}
        body: JsonObject = {"n_train": self.n_train, "n_test": self.n_test,
                            "base_name": self.base_name, "base_accuracy": base}
        if self.finetune is None:
            return head | body | {"rows": rows}
        # results.json has always carried the fine-tuning method in "method"
        return head | body | {
            "training": {k: t.to_json() for k, t in self.finetune.training.items()},
            "method": self.finetune.method, "lora": dict(self.finetune.lora), "rows": rows}


_ICL_SETTINGS = ("examples", "pool", "format", "zero_shot", "icl_template")
