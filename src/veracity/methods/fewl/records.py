"""FEWL's typed per-question record and run summary."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from veracity.jsontypes import JsonObject
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

    def to_json(self) -> JsonObject:
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

    def to_json(self) -> JsonObject:
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

    def to_json(self) -> JsonObject:
        return {"mean": self.mean, "stderr": self.stderr, "ci95": list(self.ci95), "n": self.n,
                "mean_truthfulness": self.mean_truthfulness, "mean_penalty": self.mean_penalty}


@dataclass(frozen=True)
class AgreementCounts:
    """Questions where the answer the TruthfulQA metric prefers also scores higher."""

    agree: int
    n: int
    metric_ties: int

    @classmethod
    def from_json(cls, data: Any) -> AgreementCounts:
        found = json_object(data, "agreement counts")
        return cls(int(found["agree"]), int(found["n"]), int(found["metric_ties"]))

    def to_json(self) -> JsonObject:
        return {"agree": self.agree, "n": self.n, "metric_ties": self.metric_ties}


@dataclass(frozen=True)
class SampleLevelPair:
    """Two answer sources compared question by question (the paper's Table 5)."""

    a: str
    b: str
    with_penalty: AgreementCounts
    without_penalty: AgreementCounts

    @classmethod
    def from_json(cls, data: Any) -> SampleLevelPair:
        found = json_object(data, "sample-level pair")
        return cls(str(found["a"]), str(found["b"]),
                   AgreementCounts.from_json(found["with_penalty"]),
                   AgreementCounts.from_json(found["without_penalty"]))

    def to_json(self) -> JsonObject:
        return {"a": self.a, "b": self.b, "with_penalty": self.with_penalty.to_json(),
                "without_penalty": self.without_penalty.to_json()}


@dataclass(frozen=True)
class SampleLevel:
    """Table 5 over the questions with TruthfulQA labels."""

    n_questions: int
    pairs: tuple[SampleLevelPair, ...]
    metric: str

    @classmethod
    def from_json(cls, data: Any) -> SampleLevel:
        found = json_object(data, "sample level")
        return cls(int(found["n_questions"]),
                   tuple(SampleLevelPair.from_json(p) for p in found["pairs"]),
                   str(found["metric"]))

    def to_json(self) -> JsonObject:
        return {"n_questions": self.n_questions, "pairs": [p.to_json() for p in self.pairs],
                "metric": self.metric}


@dataclass(frozen=True)
class ErrorRates:
    """Multiple-choice labels: each source's true error rate and how FEWL's order agrees."""

    error_rate: Mapping[str, float]
    n_labelled: int
    spearman: float | None
    spearman_p: float | None
    spearman_models: tuple[str, ...]
    match: str
    """How an answer is matched to an option."""
    rank_by_error: tuple[str, ...]


@dataclass(frozen=True)
class FewlRanking:
    """``fewl rank``: the sources ordered by mean FEWL, and by true error rate where the
    questions carry labels."""

    mean_fewl: Mapping[str, float | None]
    rank_by_fewl: tuple[str, ...]
    labels: ErrorRates | None = None
    sample_level: SampleLevel | None = None

    @classmethod
    def from_json(cls, data: Any) -> FewlRanking:
        found = json_object(data, "ranking")
        labels = None
        if "error_rate" in found:
            labels = ErrorRates(
                {str(k): float(v) for k, v in json_object(found["error_rate"], "error rates")
                 .items()}, int(found["n_labelled"]), number(found.get("spearman")),
                number(found.get("spearman_p")),
                tuple(str(n) for n in found.get("spearman_models") or ()),
                str(found.get("match", "")),
                tuple(str(n) for n in found.get("rank_by_error") or ()))
        level = found.get("sample_level")
        return cls({str(k): number(v) for k, v in
                    json_object(found["mean_fewl"], "mean FEWL").items()},
                   tuple(str(n) for n in found["rank_by_fewl"]), labels,
                   None if not level else SampleLevel.from_json(level))

    def to_json(self) -> JsonObject:
        out: JsonObject = {"mean_fewl": dict(self.mean_fewl)}
        labels = self.labels
        if labels is not None:
            out |= {"error_rate": dict(labels.error_rate), "n_labelled": labels.n_labelled,
                    "spearman": labels.spearman, "spearman_p": labels.spearman_p,
                    "spearman_models": list(labels.spearman_models), "match": labels.match}
        out["rank_by_fewl"] = list(self.rank_by_fewl)
        if labels is not None:
            out["rank_by_error"] = list(labels.rank_by_error)
        if self.sample_level is not None:
            out["sample_level"] = self.sample_level.to_json()
        return out


@dataclass(frozen=True)
class AccuracyCell:
    """Measurement accuracy of one variant: the share of questions where the better answer
    scores higher (ties ½); over repeats, their mean, sample std and each repeat's value."""

    accuracy: float
    n: int
    ties: int
    std: float | None = None
    repeats: tuple[float, ...] | None = None
    """Each repeat's accuracy (None: one repeat's cell, not combined)."""

    @classmethod
    def from_json(cls, data: Any) -> AccuracyCell:
        found = json_object(data, "accuracy cell")
        accuracy = number(found.get("accuracy"))
        repeats = found.get("repeats")
        return cls(math.nan if accuracy is None else accuracy, int(found.get("n") or 0),
                   int(found.get("ties") or 0), number(found.get("std")),
                   None if repeats is None else tuple(float(math.nan if v is None else v)
                                                      for v in repeats))

    def to_json(self) -> JsonObject:
        out: JsonObject = {"accuracy": self.accuracy, "n": self.n, "ties": self.ties}
        if self.repeats is not None:
            out["std"], out["repeats"] = self.std, list(self.repeats)
        return out


@dataclass(frozen=True)
class Comparison:
    """The better answer against one worse answer: a cell per divergence and variant."""

    identical_skipped: int
    """Questions whose worse answer is the better one's text (left out of the cells)."""
    cells: Mapping[str, Mapping[str, AccuracyCell]]
    """divergence -> variant -> cell."""

    @classmethod
    def from_json(cls, data: Any) -> Comparison:
        found = dict(json_object(data, "comparison"))
        skipped = int(found.pop("identical_skipped", 0) or 0)
        return cls(skipped, {div: {v: AccuracyCell.from_json(c)
                                   for v, c in json_object(per, "cells").items()}
                             for div, per in found.items()})

    def to_json(self) -> JsonObject:
        return {"identical_skipped": self.identical_skipped} | {
            div: {v: c.to_json() for v, c in per.items()} for div, per in self.cells.items()}


@dataclass(frozen=True)
class FigureTwo:
    """Figure 2: per question, how many of its k nearest neighbours' gold answers the judge
    accepts."""

    k: int
    judge: str
    per_question: tuple[int | None, ...]
    """Each question's count (None: a verdict is missing)."""
    histogram: tuple[int, ...]
    """Questions by count, 0 to k."""
    mean_correct: float | None
    n_questions: int
    """Questions with every verdict."""
    unjudged: int

    @classmethod
    def from_json(cls, data: Any) -> FigureTwo:
        found = json_object(data, "figure 2")
        return cls(int(found["k"]), str(found["judge"]),
                   tuple(None if c is None else int(c) for c in found["per_question"]),
                   tuple(int(n) for n in found["histogram"]), number(found["mean_correct"]),
                   int(found["n_questions"]), int(found["unjudged"]))

    def to_json(self) -> JsonObject:
        return {"k": self.k, "judge": self.judge, "per_question": list(self.per_question),
                "histogram": list(self.histogram), "mean_correct": self.mean_correct,
                "n_questions": self.n_questions, "unjudged": self.unjudged}


@dataclass(frozen=True)
class ReferenceRating:
    """One reference slot's ratings in Figure 3."""

    counts: tuple[int, int, int]
    """Answers rated 0, 1 and 2."""
    unrated: int
    mean: float | None

    @classmethod
    def from_json(cls, data: Any) -> ReferenceRating:
        found = json_object(data, "reference rating")
        zero, one, two = (int(c) for c in found["counts"])
        return cls((zero, one, two), int(found["unrated"]), number(found["mean"]))

    def to_json(self) -> JsonObject:
        return {"counts": list(self.counts), "unrated": self.unrated, "mean": self.mean}


@dataclass(frozen=True)
class FigureThree:
    """Figure 3: each reference answer rated 0 / 1 / 2 by the judge, per reference slot."""

    judge: str
    references: Mapping[str, ReferenceRating]

    @classmethod
    def from_json(cls, data: Any) -> FigureThree:
        found = json_object(data, "figure 3")
        return cls(str(found["judge"]),
                   {str(k): ReferenceRating.from_json(v)
                    for k, v in json_object(found["references"], "references").items()})

    def to_json(self) -> JsonObject:
        return {"judge": self.judge,
                "references": {k: v.to_json() for k, v in self.references.items()}}


@dataclass(frozen=True)
class Figures:
    """The data of the paper's Figures 2 and 3 (``fewl validate --judge``)."""

    figure2: FigureTwo
    figure3: FigureThree

    def to_json(self) -> JsonObject:
        return {"figure2": self.figure2.to_json(), "figure3": self.figure3.to_json()}


@dataclass(frozen=True)
class FewlValidation:
    """``fewl validate``: measurement accuracy per comparison, over the repeats."""

    comparisons: Mapping[str, Comparison]
    repeats: int
    repeat_seeds: tuple[int, ...]
    table_rows: tuple[tuple[str, str], ...]
    """The table's rows: variant and label."""
    figures: Figures | None = None

    @classmethod
    def from_results(cls, found: Mapping[str, Any]) -> FewlValidation:
        figures = found.get("figures")
        return cls({k: Comparison.from_json(v)
                    for k, v in json_object(found["validation"], "validation").items()},
                   int(found.get("repeats", 1)),
                   tuple(int(s) for s in found.get("repeat_seeds") or ()),
                   tuple((str(v), str(label)) for v, label in found.get("table_rows") or ()),
                   None if not figures else Figures(FigureTwo.from_json(figures["figure2"]),
                                                    FigureThree.from_json(figures["figure3"])))

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "validation": {k: c.to_json() for k, c in self.comparisons.items()},
            "repeats": self.repeats, "repeat_seeds": list(self.repeat_seeds),
            "table_rows": [list(row) for row in self.table_rows]}
        if self.figures is not None:
            out["figures"] = self.figures.to_json()
        return out


@dataclass(frozen=True)
class SelectionSummary:
    """``fewl select``: the chosen answers' FEWL and, with multiple-choice labels, the accuracy
    of the first and of the chosen candidate."""

    mean: float | None
    stderr: float | None
    ci95: tuple[float | None, float | None]
    n: int
    accuracy_first_candidate: float | None = None
    accuracy_selected: float | None = None
    n_labelled: int = 0

    @classmethod
    def from_json(cls, data: Any) -> SelectionSummary:
        found = json_object(data, "selection")
        low, high = found.get("ci95") or (None, None)
        return cls(number(found.get("mean")), number(found.get("stderr")),
                   (number(low), number(high)), int(found.get("n") or 0),
                   number(found.get("accuracy_first_candidate")),
                   number(found.get("accuracy_selected")), int(found.get("n_labelled") or 0))

    def to_json(self) -> JsonObject:
        out: JsonObject = {"mean": self.mean, "stderr": self.stderr, "ci95": list(self.ci95),
                              "n": self.n}
        if self.n_labelled:
            out["accuracy_first_candidate"] = self.accuracy_first_candidate
            out["accuracy_selected"] = self.accuracy_selected
            out["n_labelled"] = self.n_labelled
        return out


@dataclass(frozen=True)
class FewlResults:
    """A FEWL run's results.json: the setup, each answer source's summary, and what the mode
    adds (a ranking, a validation table or a selection)."""

    mode: str
    dataset: str
    n_questions: int
    pairs_failed: tuple[str, ...]
    """Ids of the questions whose pair generation failed (not scored)."""
    divergence: str
    similarity: Mapping[str, Any]
    """The similarity as described (kind, spec and what identifies its model)."""
    settings: Mapping[str, Any]
    """The run's :class:`~veracity.methods.fewl.run.FewlSettings` as described."""
    models: Mapping[str, FewlModelSummary]
    ranking: FewlRanking | None = None
    validation: FewlValidation | None = None
    selection: SelectionSummary | None = None

    @property
    def summary(self) -> FewlSummary:
        return FewlSummary(self.mode, self.models, self.pairs_failed)

    @classmethod
    def from_json(cls, data: Any) -> FewlResults:
        found = json_object(data, "FEWL results")
        ranking, selection = found.get("ranking"), found.get("selection")
        return cls(str(found["mode"]), str(found.get("dataset", "")),
                   int(found.get("n_questions") or 0),
                   tuple(str(q) for q in found.get("pairs_failed") or ()),
                   str(found.get("divergence", "tv")),
                   json_object(found.get("similarity") or {}, "similarity"),
                   json_object(found.get("settings") or {}, "settings"),
                   {k: FewlModelSummary.from_json(v)
                    for k, v in json_object(found.get("models") or {}, "models").items()},
                   None if ranking is None else FewlRanking.from_json(ranking),
                   FewlValidation.from_results(found) if found.get("validation") else None,
                   None if selection is None else SelectionSummary.from_json(selection))

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "method": "fewl", "mode": self.mode, "dataset": self.dataset,
            "n_questions": self.n_questions, "pairs_failed": list(self.pairs_failed),
            "divergence": self.divergence, "similarity": self.similarity,
            "settings": self.settings,
            "models": {k: m.to_json() for k, m in self.models.items()}}
        if self.ranking is not None:
            out["ranking"] = self.ranking.to_json()
        if self.validation is not None:
            out |= self.validation.to_json()
        if self.selection is not None:
            out["selection"] = self.selection.to_json()
        return out


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
