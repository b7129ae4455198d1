"""FEWL modes on top of :mod:`veracity.methods.fewl.run`: ``run`` / ``rank`` (score answers, rank
models), ``validate`` (measurement accuracy with ablations) and ``select`` (best candidate,
ICL prompts and a fine-tuning set)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from veracity.data.labelled import LabelledItem
from veracity.errors import ConfigError, DataError
from veracity.jsontypes import JsonObject
from veracity.method import Signal, SignalRequest, SignalUnavailable
from veracity.methods.fewl.chunked import stream_fewl, streamable
from veracity.methods.fewl.core import FewlScores
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.ranking import RankTally
from veracity.methods.fewl.records import (
    AccuracyCell,
    Comparison,
    FewlRecord,
    FewlResults,
    FewlValidation,
    Figures,
)
from veracity.methods.fewl.run import (
    AnswerSource,
    FewlSettings,
    Prepared,
    answers_from,
    as_number,
    build_records,
    finish_run,
    model_summaries,
    prepare_inputs,
    question_spec,
    score_sets,
)
from veracity.methods.fewl.selection.core import finetune_set, icl_prompts
from veracity.methods.fewl.selection.run import (
    SelectionTally,
    candidate_sets,
    kept,
    pick_best,
    stream_select,
)
from veracity.methods.fewl.validation.core import TABLE_ROWS, accuracy_cell, combine_repeats
from veracity.methods.fewl.validation.figures import figure_three, figure_two
from veracity.methods.fewl.validation.run import stream_fewl_validate
from veracity.runs.common import Context
from veracity.runs.driver import check_target
from veracity.runs.result import RunResult
from veracity.types import Item


def run_fewl(items: Sequence[Item], sources: Sequence[AnswerSource], settings: FewlSettings,
             ctx: Context, out: Path | None = None, dataset: str = "", mode: str = "run",
             ) -> RunResult[FewlRecord, FewlResults]:
    """Score the answers of one or more sources; ``rank`` adds labels where items have them.

    A ``run`` or ``rank`` (nearest or random neighbours, answers from models or files) goes
    chunk by chunk through the run driver, in bounded memory
    (:mod:`veracity.methods.fewl.chunked`): models asked a chunk of questions at a time,
    files read as streams; the records kept in a list or written to ``out``."""
    check_target(out)  # before any model call
    if not sources:
        raise ConfigError("give at least one --answers source")
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ConfigError(f"answer sources must have distinct names, got {names}")
    extra = {"answers": [_describe(s) for s in sources]}
    if mode in ("run", "rank") and streamable(sources, settings):
        return stream_fewl(items, sources, settings, ctx, out, dataset, extra, mode)
    answer_sets: dict[str, list[str | None]] = {
        s.name: [(a[0] if a else None) for a in answers_from(s, items, settings, ctx)]
        for s in sources}
    prep = prepare_inputs(items, settings, ctx)
    scores = score_sets(items, answer_sets, prep, settings)
    recs = build_records(items, answer_sets, prep, scores, settings, variants=False)
    models = model_summaries(recs, names)
    ranking = None
    if mode == "rank":
        tally = RankTally(names, settings.divergence)
        tally.add(items, answer_sets, recs, scores, prep.similarity)
        ranking = tally.result({n: models[n].mean for n in names})
    return finish_run(mode, dataset, items, recs, prep, settings, ctx, out, extra, models,
                      ranking)


def _describe(source: AnswerSource) -> JsonObject:
    """An answer source for run.json (given answers are in the samples, not repeated)."""
    out: JsonObject = {"name": source.name, "model": source.model,
                           "path": str(source.path) if source.path else None}
    return out | ({"given": True} if source.texts is not None else {})


def _comparisons(items: Sequence[LabelledItem], scores: FewlScores) -> dict[str, Comparison]:
    """Measurement accuracy per comparison (better vs each worse answer), divergence, variant."""
    better = items[0].better_name
    table: dict[str, Comparison] = {}
    for name, _ in items[0].worse:
        same = np.array([x.better.strip() == dict(x.worse)[name].strip() for x in items])
        cells: dict[str, dict[str, AccuracyCell]] = {}
        for div, per in scores.sets[better].items():
            cells[div] = {}
            for variant, terms in per.items():
                worse = np.where(same, np.nan, scores.sets[name][div][variant].fewl)
                cells[div][variant] = accuracy_cell(terms.fewl, worse)
        table[f"{better} vs {name}"] = Comparison(int(same.sum()), cells)
    return table


def run_fewl_validate(items: Sequence[LabelledItem], settings: FewlSettings, ctx: Context,
                      out: Path | None = None, dataset: str = "", repeats: int = 1,
                      judge: str | None = None) -> RunResult[FewlRecord, FewlResults]:
    """Measurement accuracy of FEWL and its ablations (x tv / js / kl) on labelled answers,
    as mean ± std over ``repeats`` (seed + r for the stochastic parts; the per-question
    records are those of the first repeat). With a ``judge`` model, also the data of the
    paper's Figures 2 and 3 (see :mod:`veracity.methods.fewl.validation.figures`). Into a directory
    with the nearest-neighbour penalty it goes chunk by chunk, in bounded memory
    (:mod:`veracity.methods.fewl.validation.run`): the same records and aggregates."""
    check_target(out)  # before any model call
    if not items:
        raise DataError("no labelled questions")
    if repeats < 1:
        raise ConfigError(f"repeats must be at least 1, got {repeats}")
    if streamable((), settings):
        return stream_fewl_validate(items, settings, ctx, out, dataset, repeats, judge)
    plain = [Item(x.id, x.question, (x.gold,)) for x in items]
    sets: dict[str, list[str | None]] = {items[0].better_name: [x.better for x in items]}
    for name, _ in items[0].worse:
        sets[name] = [dict(x.worse)[name] for x in items]
    labels = [(x.better, [text for _, text in x.worse]) for x in items]
    tables = []
    first: tuple[Prepared, FewlScores, list[FewlRecord]] | None = None
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
    figures = None
    if judge is not None:
        client = ctx.client(judge)
        questions, golds = [x.question for x in items], [x.gold for x in items]
        vectors = ctx.embedder(question_spec(settings)).embed(questions)
        figures = Figures(
            figure_two(client, questions, golds, vectors, settings.near_duplicate),
            figure_three(client, questions, golds, prep.references, prep.reference_names))
    validation = FewlValidation(
        combine_repeats(tables), repeats,
        tuple(settings.stochastic_seed() + r for r in range(repeats)), TABLE_ROWS, figures)
    return finish_run("validate", dataset, plain, recs, prep, settings, ctx, out,
                      {"repeats": repeats, "judge": judge}, model_summaries(recs, list(sets)),
                      validation=validation)


def run_fewl_select(items: Sequence[Item], source: AnswerSource, settings: FewlSettings, ctx: Context,
                out: Path | None = None, dataset: str = "", samples: int = 4,
                temperature: float = 0.7, icl_examples: int = 3,
                min_fewl: float | None = None) -> RunResult[FewlRecord, FewlResults]:
    """Best of several candidates per question by FEWL; exports ICL prompts using the best
    answers of each question's nearest neighbours, and a chat-format fine-tuning set.

    Into a directory with the nearest-neighbour penalty it goes chunk by chunk, in bounded
    memory (:func:`~veracity.methods.fewl.selection.run.stream_select`); the same outputs."""
    check_target(out)  # before any model call
    if source.model is not None and samples < 1:
        raise ConfigError(f"samples must be at least 1, got {samples}")
    if source.model is not None and samples > 1 and temperature <= 0:
        raise ConfigError("several candidates from one model need --temperature > 0")
    extra = {"candidates": _describe(source) | {"samples": samples, "temperature": temperature}}
    if streamable([source], settings):
        return stream_select(items, source, settings, ctx, out, dataset, extra, samples,
                             temperature, icl_examples, min_fewl)
    candidates = answers_from(source, items, settings, ctx, samples, temperature)
    width = max(len(c) for c in candidates)
    if width == 0:
        raise DataError(f"{source.path}: no candidate answers")
    sets = candidate_sets(candidates, width)
    prep = prepare_inputs(items, settings, ctx)
    scores = score_sets(items, sets, prep, settings)
    recs = [pick_best(r) for r in build_records(items, sets, prep, scores, settings,
                                                variants=False)]
    tally = SelectionTally(prep.similarity)
    tally.add(items, recs)
    outcome = finish_run("select", dataset, items, recs, prep, settings, ctx, out, extra,
                         model_summaries(recs, list(sets)), selection=tally.result())
    if outcome.run is not None:
        nb = prep.neighbours
        chosen = [r.answer for r in recs]
        keep = [kept(r.answer, r.value, min_fewl) for r in recs]
        shots = [[int(k) for k, m in zip(nb.index[i], nb.mask[i], strict=True) if m and keep[k]]
                 [:icl_examples] for i in range(len(items))]
        questions = [(item.id, item.question) for item in items]
        outcome.run.write_jsonl("icl_prompts.jsonl", icl_prompts(
            questions, chosen, [r.value for r in recs], shots, settings.answer_template))
        outcome.run.write_jsonl("finetune.jsonl", finetune_set(
            [q for q, k in zip(questions, keep, strict=True) if k],
            [a for a, k in zip(chosen, keep, strict=True) if k]))
    return outcome


# ``veracity benchmark``'s way into FEWL (the spec's ``signal`` target)
#
# FEWL for ``veracity benchmark`` (given reference models only): the shared greedy answer of
# each question scored against the references' answers, weighted by their expertise from the
# pairs, with the laziness penalty over neighbouring questions — FEWL's own pipeline
# (:func:`~veracity.methods.fewl.run.prepare_inputs`, :func:`~veracity.methods.fewl.run.score_sets`).
#
# The budget: of the K − 1 calls per question beyond the greedy answer, one goes to the pair
# call (the first reference writes the pairs), and the rest is split evenly over the R reference
# models, J = ⌊(K − 2) / R⌋ answers each (sampled at the benchmark's temperature when J > 1);
# what is left over, K − 2 − R·J, pays for pair retries of a question that gave no pair. So
# K ≥ R + 2. The benchmark scores a chunk of questions at a time: the neighbours of the laziness
# penalty are the nearest questions of the same chunk (at most 25).

BENCHMARK_NEIGHBOURS = 25
"""K of the laziness penalty (FEWL's default), fewer in a chunk with fewer other questions."""


def budget_split(budget: int, references: int) -> tuple[int, int]:
    """(J answers per reference model, pair retries per question) within ``budget`` calls per
    question, the greedy answer and one pair call included.

    >>> budget_split(11, 3)  # 10 calls: 1 pair call, 3 x 3 reference answers, no retry
    (3, 0)
    >>> budget_split(11, 2)  # 1 pair call, 2 x 4 answers, 1 retry
    (4, 1)
    """
    spare = budget - 2
    if references < 1 or spare < references:
        raise SignalUnavailable(f"FEWL with {references} reference model(s) needs a budget of at "
                                f"least {references + 2} calls per question (the greedy answer, "
                                "one pair call, one answer per reference)")
    j = spare // references
    return j, spare - references * j


def benchmark_signal(ctx: Context, request: SignalRequest) -> list[Signal]:
    """FEWL (tv divergence) of each shared greedy answer; higher = more trustworthy."""
    if not request.references:
        raise SignalUnavailable("FEWL needs reference models (--reference MODEL)")
    j, retries = budget_split(request.budget, len(request.references))
    settings = FewlSettings(
        references=request.references, reference_samples=j,
        reference_temperature=request.temperature,
        pairs=PairSettings(retries=retries, seed=request.seed),
        max_tokens=request.sampling.max_tokens, similarity=request.embedder,
        question_embedder=request.embedder,
        neighbours=min(BENCHMARK_NEIGHBOURS, len(request.items) - 1), seed=request.seed)
    answers: list[str | None] = [a.text.strip() if a is not None and a.text.strip() else None
                                 for a in request.answers]
    prep = prepare_inputs(request.items, settings, ctx)
    scores = score_sets(request.items, {"answer": answers}, prep, settings)
    fewl = scores.sets["answer"][settings.divergence]["fewl"].fewl
    values = tuple(as_number(fewl[k]) if answers[k] is not None else None
                   for k in range(len(answers)))
    return [Signal("fewl", values, higher_is_better=True, baseline=False,
                   settings={"references": list(request.references), "J": j,
                             "pair_retries": retries, "R": settings.pairs.r,
                             "K": BENCHMARK_NEIGHBOURS, "divergence": settings.divergence,
                             "tau": settings.tau})]
