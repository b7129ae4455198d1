"""``fewl rank``'s labels, counted a chunk of questions at a time: the true error rate of each
answer source on multiple-choice questions and the paper's Table 5 (sample-level agreement
with the TruthfulQA metric). Only counts are kept, so a run cut into chunks gets the same
numbers as one held whole."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from veracity.methods.fewl.core import FewlScores, Floats, sample_level_agreement, tqa_metric
from veracity.methods.fewl.records import (
    AgreementCounts,
    ErrorRates,
    FewlRanking,
    FewlRecord,
    SampleLevel,
    SampleLevelPair,
)
from veracity.methods.fewl.similarity import Similarity, choose_options
from veracity.stats import spearman
from veracity.types import Item

_LEVELS = (("with_penalty", "fewl"), ("without_penalty", "multi_expertise_no_penalty"))


def tqa_metrics(similarity: Similarity, answers: Sequence[str | None],
                correct: Sequence[Sequence[str]], incorrect: Sequence[Sequence[str]]) -> Floats:
    """TruthfulQA's diff score of each answer (``tqa_metric``) with SIM as the similarity;
    NaN for a missing answer. One table and one vectorised pass."""
    texts: dict[str, int] = {}

    def grid(rows: Sequence[Sequence[str]]) -> tuple[Any, Any]:
        width = max((len(r) for r in rows), default=0) or 1
        idx = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=bool)
        for i, row in enumerate(rows):
            for j, text in enumerate(row):
                idx[i, j], mask[i, j] = texts.setdefault(text, len(texts)), True
        return idx, mask

    good, good_mask = grid(correct)
    bad, bad_mask = grid(incorrect)
    ok = np.array([bool(a and a.strip()) for a in answers])
    ans = np.array([texts.setdefault(a, len(texts)) if a and a.strip() else 0 for a in answers],
                   dtype=np.int64)
    table = similarity.table(list(texts))

    def sims(idx: Any, mask: Any) -> Any:
        out = np.full(idx.shape, np.nan)
        valid = mask & ok[:, None]
        if valid.any():
            a, b = np.broadcast_arrays(ans[:, None], idx)
            out[valid] = table(a[valid], b[valid])
        return out

    found = tqa_metric(sims(good, good_mask), good_mask & ok[:, None], sims(bad, bad_mask),
                       bad_mask & ok[:, None])
    return found


class RankTally:
    """Counts behind a run's :class:`~veracity.methods.fewl.records.FewlRanking`, added a
    chunk of questions at a time."""

    def __init__(self, names: Sequence[str], divergence: str) -> None:
        self.names, self.divergence = list(names), divergence
        self.correct = dict.fromkeys(self.names, 0)
        self.labelled = 0
        self.level_questions = 0
        self.levels = {pair: {key: {"agree": 0, "n": 0, "metric_ties": 0} for key, _ in _LEVELS}
                       for pair in combinations(self.names, 2)}

    def add(self, items: Sequence[Item], answer_sets: dict[str, list[str | None]],
            recs: list[FewlRecord], scores: FewlScores, similarity: Similarity) -> None:
        """One chunk: its questions, their answers, records and scores (rows 0..len(items)-1
        of ``scores``). A multiple-choice record in ``recs`` is replaced by one naming the
        option each answer matches; a record with TruthfulQA labels, by one carrying its
        answers' TQA metric."""
        labelled = [i for i, item in enumerate(items) if "options" in item.metadata]
        if labelled:
            options = [items[i].metadata["options"] for i in labelled]
            self.labelled += len(labelled)
            for name in self.names:
                choices = choose_options(similarity, [answer_sets[name][i] for i in labelled],
                                         options)
                for i, choice in zip(labelled, choices, strict=True):
                    recs[i] = recs[i].with_answer_keys(name, choice=choice)
                    self.correct[name] += choice == items[i].metadata["correct"]
        rows = [i for i, item in enumerate(items)
                if item.references and item.metadata.get("incorrect_answers")]
        if not rows or len(self.names) < 2:
            return
        self.level_questions += len(rows)
        correct = [list(items[i].references) for i in rows]
        incorrect = [[str(t) for t in items[i].metadata["incorrect_answers"]] for i in rows]
        metric = {}
        for name in self.names:
            metric[name] = tqa_metrics(similarity, [answer_sets[name][i] for i in rows], correct,
                                       incorrect)
            for k, i in enumerate(rows):
                value = float(metric[name][k])
                recs[i] = recs[i].with_answer_keys(
                    name, tqa_metric=None if math.isnan(value) else value)
        at = np.array(rows, dtype=np.int64)
        for (a, b), entry in self.levels.items():
            for key, variant in _LEVELS:
                per = scores.sets
                found = sample_level_agreement(metric[a], metric[b],
                                               per[a][self.divergence][variant].fewl[at],
                                               per[b][self.divergence][variant].fewl[at])
                for count, value in found.items():
                    entry[key][count] += value

    def result(self, means: Mapping[str, float | None]) -> FewlRanking:
        """The ranking from the counts and each source's mean FEWL: the rankings by FEWL and,
        with multiple-choice labels, by true error rate and their Spearman correlation (FEWL
        vs accuracy: +1 = same order)."""
        names = self.names
        mean = {n: math.nan if means[n] is None else float(means[n] or 0.0) for n in names}
        labels = None
        if self.labelled:
            errors = {n: 1.0 - self.correct[n] / self.labelled for n in names}
            scored = [n for n in names if not math.isnan(mean[n])]  # no FEWL score: no rank
            rho, p = spearman([mean[n] for n in scored], [1.0 - errors[n] for n in scored])
            labels = ErrorRates(errors, self.labelled, rho, p, tuple(scored),
                                "leading option letter, else the most similar option",
                                tuple(sorted(names, key=lambda n: errors[n])))
        by_fewl = tuple(sorted(names, key=lambda n: -mean[n] if not math.isnan(mean[n])
                               else math.inf))
        level = None
        if self.level_questions:
            level = SampleLevel(self.level_questions, tuple(
                SampleLevelPair(a, b, *(AgreementCounts(**entry[key]) for key, _ in _LEVELS))
                for (a, b), entry in self.levels.items()),
                "TruthfulQA diff: max SIM to a correct answer − max SIM to an "
                "incorrect one (SIM = the run's similarity)")
        return FewlRanking(dict(means), by_fewl, labels, level)
