"""FEWL modes on top of :mod:`veracity.methods.fewl.run`: ``run`` / ``rank`` (score answers, rank
models), ``validate`` (measurement accuracy with ablations) and ``select`` (best candidate,
ICL prompts and a fine-tuning set)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from veracity.data.labelled import LabelledItem, finetune_set, icl_prompts
from veracity.errors import ConfigError, DataError
from veracity.methods.fewl.core import (
    FewlScores,
    Floats,
    measurement_accuracy,
    sample_level_agreement,
    tqa_metric,
)
from veracity.methods.fewl.figures import figure_three, figure_two
from veracity.methods.fewl.records import FewlRecord
from veracity.methods.fewl.run import (
    AnswerSource,
    FewlSettings,
    Prepared,
    aggregate_values,
    answers_from,
    as_number,
    build_records,
    finish_run,
    model_summaries,
    prepare_inputs,
    question_spec,
    score_sets,
)
from veracity.methods.fewl.run_stream import stream_fewl, streamable
from veracity.methods.fewl.similarity import Similarity, choose_options
from veracity.runs.common import Context
from veracity.runs.result import RunResult
from veracity.stats import mean_stderr, spearman
from veracity.store import check_run_target
from veracity.types import Item


def run_fewl(items: Sequence[Item], sources: Sequence[AnswerSource], settings: FewlSettings,
             ctx: Context, out: Path | None = None, dataset: str = "", mode: str = "run",
             ) -> RunResult[FewlRecord]:
    """Score the answers of one or more sources; ``rank`` adds labels where items have them.

    A ``run`` into a directory with the nearest-neighbour penalty goes chunk by chunk, in
    bounded memory (:mod:`veracity.methods.fewl.run_stream`): models asked a chunk of
    questions at a time, files read as streams; the same records and aggregates."""
    if out is not None:
        check_run_target(out)  # before any model call
    if not sources:
        raise ConfigError("give at least one --answers source")
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ConfigError(f"answer sources must have distinct names, got {names}")
    extra = {"answers": [_describe(s) for s in sources]}
    if out is not None and mode == "run" and streamable(sources, settings):
        return stream_fewl(items, sources, settings, ctx, out, dataset, extra)
    answer_sets: dict[str, list[str | None]] = {
        s.name: [(a[0] if a else None) for a in answers_from(s, items, settings, ctx)]
        for s in sources}
    prep = prepare_inputs(items, settings, ctx)
    scores = score_sets(items, answer_sets, prep, settings)
    recs = build_records(items, answer_sets, prep, scores, settings, variants=False)
    results: dict[str, Any] = {"models": model_summaries(recs, names)}
    if mode == "rank":
        results["ranking"] = ranking(items, answer_sets, recs, prep, names)
        level = sample_level(items, answer_sets, recs, prep, scores, settings.divergence)
        if level is not None:
            results["ranking"]["sample_level"] = level
    return finish_run(mode, dataset, items, recs, results, prep, settings, ctx, out, extra)


def _describe(source: AnswerSource) -> dict[str, Any]:
    """An answer source for run.json (given answers are in the samples, not repeated)."""
    out: dict[str, Any] = {"name": source.name, "model": source.model,
                           "path": str(source.path) if source.path else None}
    return out | ({"given": True} if source.texts is not None else {})


def _accuracy(items: Sequence[Item], choices: Sequence[str | None]) -> float:
    return float(np.mean([c == item.metadata["correct"] for item, c in zip(items, choices,
                                                                           strict=True)]))


def ranking(items: Sequence[Item], answer_sets: dict[str, list[str | None]],
            recs: list[FewlRecord], prep: Prepared, names: Sequence[str]) -> dict[str, Any]:
    """Mean FEWL per model, and where items are multiple choice the true error rate, the two
    rankings and their Spearman correlation (FEWL vs accuracy: +1 = same order). Each
    multiple-choice record in ``recs`` is replaced by one naming the option each answer
    matches."""
    means = {n: mean_stderr([r.answers[n].fewl for r in recs])[0] for n in names}
    out: dict[str, Any] = {"mean_fewl": means}
    labelled = [i for i, item in enumerate(items) if "options" in item.metadata]
    if labelled:
        errors = {}
        for name in names:
            choices = choose_options(prep.similarity, [answer_sets[name][i] for i in labelled],
                                     [items[i].metadata["options"] for i in labelled])
            for i, choice in zip(labelled, choices, strict=True):
                recs[i] = recs[i].with_answer_keys(name, choice=choice)
            errors[name] = 1.0 - _accuracy([items[i] for i in labelled], choices)
        scored = [n for n in names if not math.isnan(means[n])]  # no FEWL score: no rank
        rho, p = spearman([means[n] for n in scored], [1.0 - errors[n] for n in scored])
        out |= {"error_rate": errors, "n_labelled": len(labelled), "spearman": rho,
                "spearman_p": p, "spearman_models": scored,
                "match": "leading option letter, else the most similar option"}
    order = sorted(names, key=lambda n: -means[n] if not math.isnan(means[n]) else math.inf)
    out["rank_by_fewl"] = order
    if "error_rate" in out:
        out["rank_by_error"] = sorted(names, key=lambda n: out["error_rate"][n])
    return out


TABLE_ROWS: tuple[tuple[str, str], ...] = (
    ("single", "Single"),
    ("single_penalty", "Single + Penalty"),
    ("multi_uniform_no_penalty", "Multi + No Penalty (uniform λ, §4.1)"),
    ("multi_expertise_no_penalty", "Multi + No Penalty (expertise λ, C.8)"),
    ("single_best_no_penalty", "Single-best + No Penalty (C.8)"),
    ("fewl", "FEWL"),
    ("fewl_uniform", "FEWL (uniform λ)"),
    ("fewl_ideal", "FEWL (ideal λ)"),
)
"""The rows of Tables 1, 3 and 10 (plus C.8 and Table 2's weightings), variant -> label."""


def _comparisons(items: Sequence[LabelledItem], scores: Any) -> dict[str, Any]:
    """Measurement accuracy per comparison (better vs each worse answer), divergence, variant."""
    better = items[0].better_name
    table: dict[str, Any] = {}
    for name, _ in items[0].worse:
        same = np.array([x.better.strip() == dict(x.worse)[name].strip() for x in items])
        comparison: dict[str, Any] = {"identical_skipped": int(same.sum())}
        for div, per in scores.sets[better].items():
            comparison[div] = {}
            for variant, terms in per.items():
                worse = np.where(same, np.nan, scores.sets[name][div][variant].fewl)
                comparison[div][variant] = measurement_accuracy(terms.fewl, worse)
        table[f"{better} vs {name}"] = comparison
    return table


def combine_repeats(tables: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per cell: ``accuracy`` = the mean over repeats, ``std`` = their sample standard
    deviation (None for one repeat), ``repeats`` = each repeat's accuracy; n and ties of the
    first repeat."""
    out: dict[str, Any] = {}
    for comparison, first in tables[0].items():
        merged: dict[str, Any] = {"identical_skipped": first["identical_skipped"]}
        for div, cells in first.items():
            if div == "identical_skipped":
                continue
            merged[div] = {}
            for variant, cell in cells.items():
                values = [t[comparison][div][variant]["accuracy"] for t in tables]
                finite = [v for v in values if not math.isnan(v)]
                mean = float(np.mean(finite)) if finite else math.nan
                std = float(np.std(finite, ddof=1)) if len(finite) > 1 else None
                merged[div][variant] = cell | {"accuracy": mean, "std": std, "repeats": values}
        out[comparison] = merged
    return out


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


def sample_level(items: Sequence[Item], answer_sets: dict[str, list[str | None]],
                 recs: list[FewlRecord], prep: Prepared, scores: FewlScores,
                 divergence: str) -> dict[str, Any] | None:
    """Table 5: for every two answer sources, on the questions with TruthfulQA labels, how
    often the answer the TQA metric prefers also gets the higher FEWL, with the penalty
    (FEWL) and without it (expertise λ, no penalty). None without such labels or sources.
    Each labelled record in ``recs`` is replaced by one carrying its answers' TQA metric."""
    rows = [i for i, item in enumerate(items)
            if item.references and item.metadata.get("incorrect_answers")]
    names = list(answer_sets)
    if not rows or len(names) < 2:
        return None
    correct = [list(items[i].references) for i in rows]
    incorrect = [[str(t) for t in items[i].metadata["incorrect_answers"]] for i in rows]
    metric = {}
    for name in names:
        metric[name] = tqa_metrics(prep.similarity, [answer_sets[name][i] for i in rows], correct,
                                   incorrect)
        for k, i in enumerate(rows):
            recs[i] = recs[i].with_answer_keys(name, tqa_metric=as_number(metric[name][k]))
    pairs = []
    for a, b in combinations(names, 2):
        entry: dict[str, Any] = {"a": a, "b": b}
        for key, variant in (("with_penalty", "fewl"), ("without_penalty",
                                                        "multi_expertise_no_penalty")):
            per = scores.sets
            entry[key] = sample_level_agreement(
                metric[a], metric[b], per[a][divergence][variant].fewl[rows],
                per[b][divergence][variant].fewl[rows])
        pairs.append(entry)
    return {"n_questions": len(rows), "pairs": pairs,
            "metric": "TruthfulQA diff: max SIM to a correct answer − max SIM to an incorrect "
                      "one (SIM = the run's similarity)"}


def run_fewl_validate(items: Sequence[LabelledItem], settings: FewlSettings, ctx: Context,
                      out: Path | None = None, dataset: str = "", repeats: int = 1,
                      judge: str | None = None) -> RunResult[FewlRecord]:
    """Measurement accuracy of FEWL and its ablations (x tv / js / kl) on labelled answers,
    as mean ± std over ``repeats`` (seed + r for the stochastic parts; the per-question
    records are those of the first repeat). With a ``judge`` model, also the data of the
    paper's Figures 2 and 3 (see :mod:`veracity.methods.fewl.figures`)."""
    if out is not None:
        check_run_target(out)  # before any model call
    if not items:
        raise DataError("no labelled questions")
    if repeats < 1:
        raise ConfigError(f"repeats must be at least 1, got {repeats}")
    plain = [Item(x.id, x.question, (x.gold,)) for x in items]
    sets: dict[str, list[str | None]] = {items[0].better_name: [x.better for x in items]}
    for name, _ in items[0].worse:
        sets[name] = [dict(x.worse)[name] for x in items]
    labels = [(x.better, [text for _, text in x.worse]) for x in items]
    tables = []
    first: tuple[Prepared, Any, list[FewlRecord]] | None = None
    for r in range(repeats):
        current = replace(settings, repeat=settings.repeat + r)
        prep = prepare_inputs(plain, current, ctx)
        scores = score_sets(plain, sets, prep, current, labelled=labels)
        tables.append(_comparisons(items, scores))
        if first is None:
            first = (prep, scores, build_records(plain, sets, prep, scores, current,
                                                 variants=True))
    assert first is not None
    prep, scores, recs = first
    results = {"models": model_summaries(recs, list(sets)), "validation": combine_repeats(tables),
               "repeats": repeats,
               "repeat_seeds": [settings.stochastic_seed() + r for r in range(repeats)],
               "table_rows": [list(row) for row in TABLE_ROWS]}
    if judge is not None:
        client = ctx.client(judge)
        questions, golds = [x.question for x in items], [x.gold for x in items]
        vectors = ctx.embedder(question_spec(settings)).embed(questions)
        results["figures"] = {
            "figure2": figure_two(client, questions, golds, vectors, settings.near_duplicate),
            "figure3": figure_three(client, questions, golds, prep.references,
                                    prep.reference_names)}
    return finish_run("validate", dataset, plain, recs, results, prep, settings, ctx, out,
                      {"repeats": repeats, "judge": judge})


def run_fewl_select(items: Sequence[Item], source: AnswerSource, settings: FewlSettings, ctx: Context,
                out: Path | None = None, dataset: str = "", samples: int = 4,
                temperature: float = 0.7, icl_examples: int = 3,
                min_fewl: float | None = None) -> RunResult[FewlRecord]:
    """Best of several candidates per question by FEWL; exports ICL prompts using the best
    answers of each question's nearest neighbours, and a chat-format fine-tuning set."""
    if out is not None:
        check_run_target(out)  # before any model call
    if source.model is not None and samples > 1 and temperature <= 0:
        raise ConfigError("several candidates from one model need --temperature > 0")
    candidates = answers_from(source, items, settings, ctx, samples, temperature)
    width = max(len(c) for c in candidates)
    sets: dict[str, list[str | None]] = {
        f"candidate-{k}": [c[k] if k < len(c) else None for c in candidates] for k in range(width)}
    prep = prepare_inputs(items, settings, ctx)
    scores = score_sets(items, sets, prep, settings)
    recs = build_records(items, sets, prep, scores, settings, variants=False)
    matrix = np.stack([scores.sets[n][settings.divergence]["fewl"].fewl for n in sets], axis=1)
    best: list[int | None] = [None if np.isnan(row).all() else int(np.nanargmax(row))
                              for row in matrix]
    chosen: list[str | None] = []
    for i, (rec, index) in enumerate(zip(recs, best, strict=True)):
        recs[i] = replace(rec, value=None if index is None else as_number(matrix[i, index]),
                          answer=None if index is None else candidates[i][index],
                          extra={**rec.extra, "selected": index})
        chosen.append(recs[i].answer)
    results: dict[str, Any] = {"models": model_summaries(recs, list(sets)),
                               "selection": aggregate_values([r.value for r in recs])}
    mc = [item for item in items if "options" in item.metadata]
    if mc:
        options = [item.metadata["options"] for item in mc]
        first = choose_options(prep.similarity, [a for a, i in zip(sets["candidate-0"], items,
                               strict=True) if "options" in i.metadata], options)
        picked = choose_options(prep.similarity, [a for a, i in zip(chosen, items, strict=True)
                                if "options" in i.metadata], options)
        results["selection"] |= {"accuracy_first_candidate": _accuracy(mc, first),
                                 "accuracy_selected": _accuracy(mc, picked), "n_labelled": len(mc)}
    outcome = finish_run("select", dataset, items, recs, results, prep, settings, ctx, out,
                         {"candidates": _describe(source) | {"samples": samples,
                                                             "temperature": temperature}})
    if outcome.run is not None:
        nb = prep.neighbours
        keep = [a is not None and (min_fewl is None or (r.value is not None and r.value >=
                min_fewl)) for a, r in zip(chosen, recs, strict=True)]
        shots = [[int(k) for k, m in zip(nb.index[i], nb.mask[i], strict=True) if m and keep[k]]
                 [:icl_examples] for i in range(len(items))]
        questions = [(item.id, item.question) for item in items]
        outcome.run.write_jsonl("icl_prompts.jsonl", icl_prompts(
            questions, chosen, [r.value for r in recs], shots, settings.answer_template))
        outcome.run.write_jsonl("finetune.jsonl", finetune_set(
            [q for q, k in zip(questions, keep, strict=True) if k],
            [a for a, k in zip(chosen, keep, strict=True) if k]))
    return outcome
