"""FEWL's typed per-question record and run summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

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

