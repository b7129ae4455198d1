"""Comparing deception runs across models: the numbers behind the paper's Figures A1-A11, its
per-question examples and its Appendix D case studies (two models on the same questions). Pure
functions over per-item records (live and recorded runs alike)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from veracity.data.mc import LETTERS
from veracity.data.model_info import SIZE_COLUMN, ModelInfo
from veracity.errors import InvalidValueError
from veracity.methods.deception.core import deception_metrics, pairs_from_records
from veracity.methods.deception.records import DeceptionRecord
from veracity.stats import linear_fit, pearson

RANDOM_GUESS = 1 / len(LETTERS)
"""Accuracy of guessing uniformly among the options (A1/A2's reference line)."""
MIN_MODELS = 3
"""A relation across models needs at least this many points to be drawn."""

Correctness = Literal["only_normal", "only_misleading", "both", "neither"]
CORRECTNESS: tuple[Correctness, ...] = ("only_normal", "only_misleading", "both", "neither")


@dataclass(frozen=True)
class ModelRecords:
    """One run to compare: its label (unique), model name (matched against model info),
    per-item records and the normal-accuracy threshold of its susceptibility."""

    label: str
    model: str
    records: Sequence[DeceptionRecord]
    threshold: float = 0.4
    susceptibility: str = "pooled"
    """Which formula ``ModelSummary.susceptibility`` is (both are kept)."""


@dataclass(frozen=True)
class SubjectSusceptibility:
    """Susceptibility of one subject; ``counts`` is False when its normal accuracy is at or
    below the threshold, so the overall figure leaves it out (A4 greys it)."""

    subject: str
    normal_accuracy: float
    normal_correct: int
    misleading_correct: int
    counts: bool

    @property
    def value(self) -> float | None:
        """c_n / c_m (None when no misleading answer is correct)."""
        return self.normal_correct / self.misleading_correct if self.misleading_correct else None

    @property
    def unbounded(self) -> bool:
        return self.misleading_correct == 0 and self.normal_correct > 0


@dataclass(frozen=True)
class ModelSummary:
    """Overall figures of one run (A1-A3, A5, A7), fractions in [0, 1]."""

    label: str
    model: str
    n_items: int
    normal_accuracy: float
    misleading_accuracy: float
    susceptibility: float | None
    susceptibility_unbounded: bool
    consistency: float
    consistent_correct: float
    consistent_incorrect: float
    error_rate_normal: float
    error_rate_misleading: float
    threshold: float
    subjects: tuple[SubjectSusceptibility, ...]
    """Per subject, sorted by name (A4)."""
    consistency_by_subject: dict[str, tuple[float, float]]
    """Subject -> (consistent correct, consistent incorrect) shares (A6)."""
    by_correctness: dict[Correctness, tuple[int, ...]]
    """Indices of the records in each per-question category."""
    susceptibility_pooled: float | None = None
    susceptibility_subject_weighted: float | None = None
    truncation_rate_normal: float = 0.0
    """Share of items whose normal answer ran out of tokens (part of error_rate_normal)."""
    truncation_rate_misleading: float = 0.0


@dataclass(frozen=True)
class Relation:
    """One across-model relation: each point a model, least-squares line, Pearson r, p."""

    key: str
    x_label: str
    y_label: str
    labels: tuple[str, ...]
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    excluded: dict[str, str] = field(default_factory=dict)
    """Label -> why that run is not a point (no value in the model info, ∞ susceptibility)."""

    @property
    def n(self) -> int:
        return len(self.xs)

    @property
    def enough(self) -> bool:
        return self.n >= MIN_MODELS

    def fit(self) -> dict[str, float]:
        """r, two-tailed p, slope and intercept (NaN with fewer than MIN_MODELS points or a
        constant axis)."""
        if not self.enough:
            return {"r": math.nan, "p": math.nan, "slope": math.nan, "intercept": math.nan}
        r, p = pearson(self.xs, self.ys)
        slope, intercept = linear_fit(self.xs, self.ys)
        return {"r": r, "p": p, "slope": slope, "intercept": intercept}


def correctness(record: DeceptionRecord) -> Correctness:
    """Which of the two answers of one item are correct."""
    normal = record.normal.answer == record.gold
    misleading = record.misleading.answer == record.gold
    if normal and misleading:
        return "both"
    if normal:
        return "only_normal"
    return "only_misleading" if misleading else "neither"


def _share(value: float | None) -> float:
    """A share over a non-empty set of items (only an empty one has none)."""
    if value is None:
        raise InvalidValueError("a share over no items")
    return value


def model_summary(run: ModelRecords) -> ModelSummary:
    """Every per-model figure of one run, from its per-item records."""
    if not run.records:
        raise InvalidValueError(f"run {run.label!r} has no items")
    try:
        m = deception_metrics(pairs_from_records(run.records), run.threshold,
                              run.susceptibility)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidValueError(f"run {run.label!r}: {exc!s}") from exc
    subjects = tuple(
        SubjectSusceptibility(s, _share(e.normal_accuracy), e.normal_correct, e.misleading_correct,
                              s in m.susceptibility_subjects)
        for s, e in m.per_subject.items()
    )
    groups: dict[Correctness, list[int]] = {o: [] for o in CORRECTNESS}
    for index, record in enumerate(run.records):
        groups[correctness(record)].append(index)
    o = m.overall
    return ModelSummary(
        label=run.label, model=run.model, n_items=o.n_items,
        normal_accuracy=_share(o.normal_accuracy),
        misleading_accuracy=_share(o.misleading_accuracy),
        susceptibility=o.susceptibility, susceptibility_unbounded=o.susceptibility_unbounded,
        consistency=_share(o.consistency), consistent_correct=_share(o.consistent_correct),
        consistent_incorrect=_share(o.consistent_incorrect),
        error_rate_normal=_share(o.error_rate_normal),
        error_rate_misleading=_share(o.error_rate_misleading), threshold=run.threshold,
        susceptibility_pooled=m.susceptibility_pooled,
        susceptibility_subject_weighted=m.susceptibility_subject_weighted,
        truncation_rate_normal=_share(o.truncation_rate_normal),
        truncation_rate_misleading=_share(o.truncation_rate_misleading), subjects=subjects,
        consistency_by_subject={s: (_share(e.consistent_correct), _share(e.consistent_incorrect))
                                for s, e in m.per_subject.items()},
        by_correctness={o: tuple(groups[o]) for o in CORRECTNESS},
    )


Axis = Callable[[ModelSummary], tuple[float | None, str]]
"""A model's value on one axis, or None with the reason it has none."""


def _summary_axis(attr: str, scale: float = 100.0) -> Axis:
    def axis(s: ModelSummary) -> tuple[float | None, str]:
        value = getattr(s, attr)
        return (None, "undefined") if value is None else (scale * float(value), "")
    return axis


def _susceptibility(s: ModelSummary) -> tuple[float | None, str]:
    if s.susceptibility is None:
        return None, ("∞ susceptibility" if s.susceptibility_unbounded else
                      "no subject above the normal-accuracy threshold")
    return s.susceptibility, ""


def _info_axis(info: ModelInfo | None, column: str) -> Axis:
    def axis(s: ModelSummary) -> tuple[float | None, str]:
        if info is None:
            return None, "no model info given"
        value = info.value(s.model, column)
        return (value, "") if value is not None else (None, f"no {column} in the model info")
    return axis


def relation(key: str, summaries: Sequence[ModelSummary], x: tuple[str, Axis],
             y: tuple[str, Axis]) -> Relation:
    """Points of the runs that have a value on both axes; the others listed with why."""
    labels, xs, ys, excluded = [], [], [], {}
    for s in summaries:
        (xv, x_why), (yv, y_why) = x[1](s), y[1](s)
        if xv is None or yv is None:
            excluded[s.label] = x_why or y_why
            continue
        labels.append(s.label)
        xs.append(xv)
        ys.append(yv)
    return Relation(key, x[0], y[0], tuple(labels), tuple(xs), tuple(ys), excluded)


def relations(summaries: Sequence[ModelSummary], info: ModelInfo | None = None) -> list[Relation]:
    """A8-A11: normal vs misleading accuracy; susceptibility vs each external score, model
    size, normal accuracy and consistency. Accuracies and consistency in %."""
    susceptibility = ("susceptibility", _susceptibility)
    normal = ("normal accuracy %", _summary_axis("normal_accuracy"))
    found = [
        relation("A8", summaries, normal, ("misleading accuracy %", _summary_axis("misleading_accuracy"))),
    ]
    scores = (info.scores if info is not None else ()) or ("external score",)
    found += [relation("A9", summaries, (c, _info_axis(info, c)), susceptibility) for c in scores]
    found.append(relation("A10", summaries, ("model size (billions of parameters)",
                                             _info_axis(info, SIZE_COLUMN)), susceptibility))
    found.append(relation("A10", summaries, normal, susceptibility))
    found.append(relation("A11", summaries, ("consistency %", _summary_axis("consistency")),
                          susceptibility))
    return found


def compare(runs: Sequence[ModelRecords], info: ModelInfo | None = None
            ) -> tuple[list[ModelSummary], list[Relation]]:
    """Per-run summaries and the relations across them; model info must name only known models."""
    labels = [r.label for r in runs]
    if len(set(labels)) != len(labels):
        raise InvalidValueError("run labels must be unique")
    if info is not None:
        info.check_models(r.model for r in runs)
    summaries = [model_summary(r) for r in runs]
    return summaries, relations(summaries, info)


Contrast = Literal["a_resists_b_misled", "b_resists_a_misled", "same", "other"]
CONTRASTS: tuple[Contrast, ...] = ("a_resists_b_misled", "b_resists_a_misled", "same", "other")


@dataclass(frozen=True)
class CaseStudy:
    """One question answered by two runs (Appendix D): each run's answers and group."""

    a: DeceptionRecord
    b: DeceptionRecord

    @property
    def group_a(self) -> Correctness:
        return correctness(self.a)

    @property
    def group_b(self) -> Correctness:
        return correctness(self.b)

    @property
    def contrast(self) -> Contrast:
        """Whether one run resists the misleading opening (both answers correct) where the
        other is misled by it (only the normal answer correct)."""
        if self.group_a == "both" and self.group_b == "only_normal":
            return "a_resists_b_misled"
        if self.group_b == "both" and self.group_a == "only_normal":
            return "b_resists_a_misled"
        return "same" if self.group_a == self.group_b else "other"


def case_studies(
    a: Sequence[DeceptionRecord], b: Sequence[DeceptionRecord],
    subjects: Collection[str] | None = None, groups_a: Collection[Correctness] | None = None,
    groups_b: Collection[Correctness] | None = None,
) -> list[CaseStudy]:
    """The questions both runs answered (same id and question, in A's order), filtered by
    subject and by each run's correctness group."""
    for name, groups in (("groups_a", groups_a), ("groups_b", groups_b)):
        unknown = sorted(set(groups or ()) - set(CORRECTNESS))
        if unknown:
            raise InvalidValueError(f"{name}: unknown group(s) {', '.join(unknown)} (known: "
                                    f"{', '.join(CORRECTNESS)})")
    by_id = {(r.id, r.question): r for r in b}
    found = []
    for record in a:
        other = by_id.get((record.id, record.question))
        if other is None or (subjects is not None and record.subject not in subjects):
            continue
        case = CaseStudy(record, other)
        if groups_a is not None and case.group_a not in groups_a:
            continue
        if groups_b is not None and case.group_b not in groups_b:
            continue
        found.append(case)
    return found
