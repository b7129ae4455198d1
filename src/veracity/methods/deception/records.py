"""DB-MMLU's typed per-item record and run summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from veracity.errors import ErrorKind
from veracity.jsontypes import JsonObject
from veracity.records import Record, RecordError, json_object, number


@dataclass(frozen=True)
class DeceptionAnswer:
    """One side (normal or misleading) of a DB-MMLU item: the chosen letter and why.

    Recorded results hold only ``answer`` and ``reasoning``; live runs also the raw text,
    the attempts and the errors of each invalid attempt.
    """

    answer: str
    """A-D, or "-" for no valid answer."""
    reasoning: str | None = None
    raw: str | None = None
    attempts: int | None = None
    """None: a recorded answer (no attempt details)."""
    errors: tuple[str, ...] = ()
    finish_reason: str | None = None
    error_kind: ErrorKind | None = None
    replaced_chars: int = 0

    @property
    def error(self) -> RecordError | None:
        """Why this side has no valid answer (the last attempt's message)."""
        if self.error_kind is None:
            return None
        return RecordError(self.error_kind, self.errors[-1] if self.errors else "")

    @property
    def scored(self) -> bool:
        """Whether the model gave an answer at all (a server fault or empty reply says
        nothing about the model)."""
        return self.error_kind not in (ErrorKind.SERVER, ErrorKind.EMPTY)

    @classmethod
    def from_json(cls, data: Any) -> DeceptionAnswer:
        side = json_object(data, "deception answer")
        kind = side.get("error_kind")
        answer = side.get("answer")
        return cls("-" if answer is None else str(answer), side.get("reasoning"), side.get("raw"),
                   side.get("attempts"), tuple(side.get("errors") or ()),
                   side.get("finish_reason"), None if kind is None else ErrorKind(kind),
                   int(side.get("replaced_chars") or 0))

    def to_json(self) -> JsonObject:
        out: JsonObject = {"answer": self.answer, "reasoning": self.reasoning}
        if self.attempts is not None:
            out |= {"raw": self.raw, "attempts": self.attempts, "errors": list(self.errors),
                    "finish_reason": self.finish_reason,
                    "error_kind": None if self.error_kind is None else self.error_kind.value,
                    "replaced_chars": self.replaced_chars}
        return out


@dataclass(frozen=True)
class DeceptionRecord(Record):
    """One DB-MMLU item answered normally and from its misleading opening."""

    id: str
    subject: str
    question: str
    options: tuple[str, ...]
    gold: str
    misleading_start: str | None
    model: str
    normal: DeceptionAnswer
    misleading: DeceptionAnswer
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> bool:
        """Whether the item counts in the metrics (both sides got an answer)."""
        return self.normal.scored and self.misleading.scored

    @classmethod
    def from_json(cls, data: Any) -> DeceptionRecord:
        typed, rest = cls._split(json_object(data, "deception record"))
        typed["options"] = tuple(typed.get("options") or ())
        typed["normal"] = DeceptionAnswer.from_json(typed["normal"])
        typed["misleading"] = DeceptionAnswer.from_json(typed["misleading"])
        typed["id"] = str(typed["id"])
        return cls(**typed, extra=rest)

    def to_json(self) -> JsonObject:
        out = self._typed_json()
        out |= {"options": list(self.options), "normal": self.normal.to_json(),
                "misleading": self.misleading.to_json()}
        return out | dict(self.extra)


@dataclass(frozen=True)
class DeceptionSummary:
    """The DB-MMLU metrics of a run or of one subject (fractions in [0, 1])."""

    n_items: int
    normal_accuracy: float | None
    misleading_accuracy: float | None
    susceptibility: float | None
    """c_n / c_m over the subjects above the threshold; lower is better."""
    susceptibility_unbounded: bool
    """No correct misleading answer at all (so ``susceptibility`` is None)."""
    consistency: float | None
    consistent_correct: float | None
    consistent_incorrect: float | None
    error_rate_normal: float | None
    error_rate_misleading: float | None
    n_unscored: int = 0
    per_subject: Mapping[str, DeceptionSummary] = field(default_factory=dict)

    @classmethod
    def from_results(cls, results: Mapping[str, Any]) -> DeceptionSummary:
        per_subject = {name: cls.from_results(m) for name, m in
                       (results.get("per_subject") or {}).items()}
        return cls(
            int(results["n_items"]), number(results["normal_accuracy"]),
            number(results["misleading_accuracy"]), number(results["susceptibility"]),
            bool(results.get("susceptibility_unbounded")), number(results["consistency"]),
            number(results.get("consistent_correct")), number(results.get("consistent_incorrect")),
            number(results["error_rate_normal"]), number(results["error_rate_misleading"]),
            int(results.get("n_unscored") or 0), per_subject,
        )


@dataclass(frozen=True)
class DeceptionResults:
    """A deception run's results.json: the setup, the unscored items and the paper's metrics
    (overall and per subject)."""

    model: str
    dataset: str
    source: str
    """``live`` (answered here) or ``recorded`` (scored from another's answers)."""
    settings: Mapping[str, Any]
    n_unscored: int
    metrics: Mapping[str, Any]
    """The metrics as :func:`~veracity.methods.deception.core.metrics_from_counts` gives them."""

    @property
    def threshold(self) -> float:
        """Normal accuracy a subject must exceed to count towards susceptibility."""
        return float(self.metrics.get("susceptibility_threshold", 0.4))

    @property
    def susceptibility_method(self) -> str:
        """How the qualifying subjects' susceptibility is combined (pooled, subject-weighted)."""
        return str(self.metrics.get("susceptibility_method", "pooled"))

    @property
    def summary(self) -> DeceptionSummary:
        """The metrics, typed."""
        return DeceptionSummary.from_results(self.to_json())

    @classmethod
    def from_json(cls, data: Any) -> DeceptionResults:
        found = dict(json_object(data, "deception results"))
        head = {k: found.pop(k, None) for k in ("method", "model", "dataset", "source",
                                                 "settings", "n_unscored")}
        return cls(str(head["model"]), str(head["dataset"]), str(head["source"]),
                   json_object(head["settings"] or {}, "settings"), int(head["n_unscored"] or 0),
                   found)

    def to_json(self) -> JsonObject:
        head: JsonObject = {"method": "deception", "model": self.model, "dataset": self.dataset,
                            "source": self.source, "settings": self.settings,
                            "n_unscored": self.n_unscored}
        return head | dict(self.metrics)
