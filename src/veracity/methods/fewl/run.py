"""FEWL runs: generate (or read) answers, references and pairs, score, write a run directory.

The shared machinery of every mode (settings, answer sources, the batched generation stages,
scoring and the run directory); the modes themselves are in :mod:`veracity.methods.fewl.modes`.
Every generation stage is one batched client call across the questions it is given (the
whole dataset, or a chunk of a streamed run), and every stage can be replaced by a JSONL file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from veracity.checks import check_number
from veracity.data.labelled import read_pairs, read_texts
from veracity.errors import BackendError, ConfigError, DataError
from veracity.jsontypes import JsonObject
from veracity.methods.fewl.core import (
    DIVERGENCES,
    EXPERTISE_FORMS,
    Divergence,
    ExpertiseForm,
    FewlScores,
    LentReferences,
    Neighbours,
    score_texts,
)
from veracity.methods.fewl.neighbours.core import IndexSettings, SearchRecord, search_all
from veracity.methods.fewl.neighbours.random import random_neighbours
from veracity.methods.fewl.pairs import (
    Pair,
    PairOutcome,
    PairPrompt,
    PairSettings,
    generate_pairs,
)
from veracity.methods.fewl.records import (
    FewlAnswer,
    FewlModelSummary,
    FewlRanking,
    FewlRecord,
    FewlResults,
    FewlValidation,
    SelectionSummary,
)
from veracity.methods.fewl.reference_list import REFERENCE_MODES, list_prompt, parse_list
from veracity.methods.fewl.running import RunningFewl
from veracity.methods.fewl.similarity import Mapping as SimilarityMapping
from veracity.methods.fewl.similarity import (
    Similarity,
    is_cross_encoder,
    load_similarity,
)
from veracity.paths import user_path
from veracity.runs.common import Context
from veracity.runs.driver import Finish, RunPlan, drive
from veracity.runs.result import RunResult
from veracity.types import GenRequest, Item, Sampling

ANSWER_TEMPLATE = "Answer the question in one or two sentences.\n\nQuestion: {question}"
NEIGHBOUR_MODES = ("nearest", "random")


@dataclass(frozen=True)
class FewlSettings:
    """Everything that shapes a FEWL score; recorded in run.json. [reconstructed] marks our
    reading of the paper."""

    references: tuple[str, ...] = ()
    """Reference model specs (several models, or one with reference_samples > 1)."""
    reference_samples: int = 1
    """J answers per reference model; > 1 samples at reference_temperature (the paper's
    practical mode), sample_index 0..J-1."""
    reference_temperature: float = 0.7
    reference_mode: str = "samples"
    """samples: J independent answers (sampled when J > 1); one-call: one greedy request per
    question and reference asking for J diversified answers (the paper's setting, §4.1, C.6)."""
    references_file: Path | None = None
    """JSONL with id and references: no reference model is called."""
    pairs: PairSettings = field(default_factory=PairSettings)
    pairs_model: str | None = None
    """Model that writes the pairs; default the first reference."""
    pairs_file: Path | None = None
    pair_prompt: PairPrompt = field(default_factory=PairPrompt)
    """The pair prompt: built in (the paper's meaning of a corrected answer) or a user's file."""
    answer_template: str = ANSWER_TEMPLATE
    """Prompt for answers under evaluation and reference answers alike."""
    max_tokens: int = 96
    similarity: str = "st/default"
    similarity_label: str | None = None
    mapping: SimilarityMapping = "affine"
    """Cosine -> [0, 1]: (1 + cos) / 2 or max(cos, 0). [reconstructed]"""
    question_embedder: str | None = None
    """Embedder for neighbour search; default the similarity's embedder (st/default for a
    cross-encoder)."""
    neighbours: int = 25
    """K of the laziness penalty. [reconstructed]"""
    near_duplicate: float = 0.8
    """Neighbours with question cosine above this are excluded. [reconstructed]"""
    neighbours_mode: str = "nearest"
    """nearest: the K most similar questions; random: K random ones (Table 8), seeded by seed."""
    neighbours_index: str = "auto"
    """How the nearest neighbours are searched: exact, hnsw or ivf (faiss); auto: exact below
    100,000 questions, hnsw from there (see :mod:`veracity.methods.fewl.neighbours.core`)."""
    tau: float = 1.0
    """Softmax temperature of lambda. [reconstructed]"""
    expertise: ExpertiseForm = "gap"
    """s_j from the pairs: gap (CO − IW), wrong (−IW) or corrected (CO). [reconstructed]"""
    divergence: Divergence = "tv"
    seed: int = 0
    repeat: int = 0
    """Which repeat this is (``--repeats``): the stochastic parts (sampled reference answers,
    pair generation, random neighbours) use seed + repeat; greedy calls are the same."""

    def stochastic_seed(self) -> int:
        return self.seed + self.repeat

    def describe(self) -> JsonObject:
        out = asdict(self)
        out["pairs"] = asdict(self.pairs)
        out["pair_prompt"] = self.pair_prompt.describe()
        for name in ("references_file", "pairs_file"):
            out[name] = None if out[name] is None else str(out[name])
        out["references"] = list(self.references)
        out["R"], out["K"] = self.pairs.r, self.neighbours
        return out

    def check(self) -> None:
        if self.divergence not in DIVERGENCES or self.expertise not in EXPERTISE_FORMS:
            raise ConfigError(f"unknown divergence '{self.divergence}' or expertise form "
                              f"'{self.expertise}'")
        if self.neighbours_mode not in NEIGHBOUR_MODES:
            raise ConfigError(f"unknown neighbours mode '{self.neighbours_mode}'; known: "
                              f"{', '.join(NEIGHBOUR_MODES)}")
        IndexSettings(self.neighbours_index)  # a clear error for an unknown index
        if "{question}" not in self.answer_template:
            raise ConfigError("the answer template must contain {question}")
        if self.reference_samples < 1 or self.neighbours < 0 or not self.tau > 0:
            raise ConfigError("reference samples must be >= 1, neighbours >= 0, tau > 0")
        check_number("tau", self.tau, 0.0, low_open=True)
        check_number("near_duplicate", self.near_duplicate, -1.0, 1.0)
        check_number("reference_temperature", self.reference_temperature, 0.0)
        if not self.references and self.references_file is None:
            raise ConfigError("give reference models (--reference) or --references-file")
        if self.reference_mode not in REFERENCE_MODES:
            raise ConfigError(f"unknown reference mode '{self.reference_mode}'; known: "
                              f"{', '.join(REFERENCE_MODES)}")


@dataclass(frozen=True)
class AnswerSource:
    """Answers under evaluation: a model spec, a JSONL file (id + answer / answers), or the
    answers themselves (one per question, in order)."""

    name: str
    model: str | None = None
    path: Path | None = None
    texts: tuple[str, ...] | None = None


def answer_source(value: str) -> AnswerSource:
    """A path to an existing file or anything ending in .jsonl is a file; else a model spec."""
    path = user_path(value)
    if value.endswith(".jsonl") or path.is_file():
        if not path.is_file():
            raise DataError(f"answers file not found: {path}")
        return AnswerSource(path.stem, path=path)
    return AnswerSource(value, model=value)


def _ask(ctx: Context, spec: str, items: Sequence[Item], settings: FewlSettings, samples: int,
         temperature: float, stage: str) -> list[list[str]]:
    """samples answers per question from one model, in one batched call ("" = failed)."""
    seed = settings.stochastic_seed() if temperature > 0 else settings.seed
    sampling = Sampling(temperature=temperature, max_tokens=settings.max_tokens, seed=seed)
    requests = [GenRequest.user(settings.answer_template.format(question=item.question), sampling,
                                sample_index=s) for item in items for s in range(samples)]
    results = ctx.client(spec).generate_each(requests, stage)
    faults = [r for r in results if isinstance(r, BackendError) and not r.kind.blames_model]
    if faults:  # "" would be scored as the model's answer: only a rejection may stand for one
        raise BackendError(f"{spec}: {len(faults)} of {len(results)} requests got no answer in "
                           f"stage '{stage}' (the others are cached; rerun to retry). First error: "
                           f"{faults[0].kind.label}: {faults[0]}")
    texts = ["" if isinstance(r, BackendError) else r.text.strip() for r in results]
    return [texts[i * samples:(i + 1) * samples] for i in range(len(items))]


def _ask_list(ctx: Context, spec: str, items: Sequence[Item], settings: FewlSettings, j: int,
              stage: str) -> list[list[str]]:
    """j diversified answers per question from one greedy request each ("" = not given)."""
    sampling = Sampling(temperature=0.0, max_tokens=settings.max_tokens * j, seed=settings.seed)
    requests = [GenRequest.user(list_prompt(item.question, j), sampling) for item in items]
    results = ctx.client(spec).generate_each(requests, stage)
    faults = [r for r in results if isinstance(r, BackendError) and not r.kind.blames_model]
    if faults:
        raise BackendError(f"{spec}: {len(faults)} of {len(results)} requests got no answer in "
                           f"stage '{stage}' (the others are cached; rerun to retry). First error: "
                           f"{faults[0].kind.label}: {faults[0]}")
    return [[""] * j if isinstance(r, BackendError) else parse_list(r.text, j) for r in results]


def answers_from(source: AnswerSource, items: Sequence[Item], settings: FewlSettings, ctx: Context,
                 samples: int = 1, temperature: float = 0.0) -> list[list[str]]:
    """Answers per question (several when sampling candidates) from a model or a file."""
    if source.model is not None:
        return _ask(ctx, source.model, items, settings, samples, temperature,
                    f"fewl: answers {source.name}")
    if source.texts is not None:
        if len(source.texts) != len(items):
            raise DataError(f"answers '{source.name}': {len(source.texts)} answers for "
                            f"{len(items)} questions")
        return [[text.strip()] for text in source.texts]
    assert source.path is not None
    return _from_file(source.path, ("answers", "candidates", "answer"), items)


def _from_file(path: Path, fields: tuple[str, ...], items: Sequence[Item]) -> list[list[str]]:
    table = read_texts(path, fields)
    out = []
    for item in items:
        found = table.get(item.id, table.get(item.question))
        if found is None:
            raise DataError(f"{path}: no {fields[0]} for question '{item.id}'")
        out.append([text.strip() for text in found])
    return out


def references_for(items: Sequence[Item], settings: FewlSettings,
                   ctx: Context) -> tuple[list[list[str]], list[str]]:
    """J reference answers per question and the name of each reference slot."""
    if settings.references_file is not None:
        refs = _from_file(settings.references_file, ("references",), items)
        width = max(len(r) for r in refs)
        return refs, [f"{settings.references_file.name}#{j}" for j in range(width)]
    j = settings.reference_samples
    temperature = settings.reference_temperature if j > 1 else 0.0
    rows: list[list[str]] = [[] for _ in items]
    names: list[str] = []
    for spec in settings.references:
        stage = f"fewl: references {spec}"
        got = (_ask_list(ctx, spec, items, settings, j, stage)
               if settings.reference_mode == "one-call"
               else _ask(ctx, spec, items, settings, j, temperature, stage))
        for row, answers in zip(rows, got, strict=True):
            row.extend(answers)
        names += [spec if j == 1 else f"{spec}#{s}" for s in range(j)]
    return rows, names


def pairs_for(items: Sequence[Item], settings: FewlSettings, ctx: Context) -> PairOutcome:
    """Pairs per question from a file, or one call per question (with retries)."""
    if settings.pairs_file is not None:
        table = read_pairs(settings.pairs_file)
        pairs = [[Pair(w, c) for w, c in table.get(item.id, table.get(item.question, []))]
                 for item in items]
        missing = "not in the pairs file"
        return PairOutcome(pairs, [""] * len(items), [0] * len(items),
                           [None if p else missing for p in pairs])
    pair_settings = replace(settings.pairs, seed=settings.pairs.seed + settings.repeat)
    return generate_pairs(ctx.client(pairs_model(settings)), [i.question for i in items],
                          pair_settings, settings.pair_prompt)


def pairs_model(settings: FewlSettings) -> str:
    """The model that writes the pairs: --pairs-model, else the first reference."""
    model = settings.pairs_model or (settings.references[0] if settings.references else None)
    if model is None:
        raise ConfigError("pairs need a model (--pairs-model or --reference) or --pairs-file")
    return model


@dataclass
class Prepared:
    """Inputs shared by every answer set: references, pairs, neighbours, similarity."""

    references: list[list[str]]
    reference_names: list[str]
    pairs: PairOutcome
    similarity: Similarity
    neighbours: Neighbours
    search: SearchRecord | None = None
    """How the nearest neighbours were searched (index, recall): run.json's neighbour_search."""


def question_spec(settings: FewlSettings) -> str:
    """The embedder of the neighbour search: the question embedder, else the similarity's
    (st/default when the similarity is a cross-encoder)."""
    return settings.question_embedder or (
        "st/default" if is_cross_encoder(settings.similarity) else settings.similarity)


def prepare_inputs(items: Sequence[Item], settings: FewlSettings, ctx: Context) -> Prepared:
    settings.check()
    if not items:
        raise DataError("no questions to score")
    refs, names = references_for(items, settings, ctx)
    pairs = pairs_for(items, settings, ctx)
    similarity = load_similarity(settings.similarity, ctx.embedder, ctx.scorer, settings.mapping,
                                 settings.similarity_label)
    vectors = ctx.embedder(question_spec(settings)).embed([item.question for item in items])
    eligible = np.array([any(r.strip() for r in row) for row in refs], dtype=bool)
    if settings.neighbours_mode == "random":
        neighbours = random_neighbours(vectors, settings.neighbours, settings.near_duplicate,
                                       eligible, settings.stochastic_seed())
        return Prepared(refs, names, pairs, similarity, neighbours)
    neighbours, search = search_all(vectors, settings.neighbours, settings.near_duplicate,
                                    eligible, IndexSettings(settings.neighbours_index))
    return Prepared(refs, names, pairs, similarity, neighbours, search)


def score_sets(items: Sequence[Item], answer_sets: dict[str, list[str | None]], prep: Prepared,
               settings: FewlSettings,
               labelled: Sequence[tuple[str, Sequence[str]]] | None = None,
               widths: tuple[int, int] = (0, 0), scored: int | None = None,
               lent: LentReferences | None = None) -> FewlScores:
    """FEWL of the questions (of the first ``scored``; the rest lend their references as
    neighbours, as texts or ``lent`` vectors)."""
    none: list[tuple[str, str]] = []  # shared (read only) by the rows without pairs
    pairs = [[(p.wrong, p.corrected) for p in row] if row else none for row in prep.pairs.pairs]
    return score_texts(prep.references, pairs, answer_sets, prep.similarity, prep.neighbours,
                       settings.tau, labelled, DIVERGENCES, settings.pairs.min_pairs,
                       settings.expertise, widths, scored, lent)


def as_number(value: Any) -> float | None:
    v = float(value)
    return None if math.isnan(v) else v


def build_records(items: Sequence[Item], answer_sets: dict[str, list[str | None]], prep: Prepared,
            scores: FewlScores, settings: FewlSettings, variants: bool,
            count: int | None = None) -> list[FewlRecord]:
    """One record per question: references, pairs, expertise and lambda per reference,
    neighbours, and per answer set the truthfulness, penalty and FEWL (plus ablations).
    ``count``: records of the first questions only (the rest lent their references as
    neighbours and are not scored here)."""
    out = []
    div = settings.divergence
    nb = scores.neighbours
    for i, item in enumerate(items[:count]):
        answers: dict[str, FewlAnswer] = {}
        for name, values in answer_sets.items():
            terms = scores.sets[name][div]["fewl"]
            extra = {"variants": {d: {v: as_number(t.fewl[i]) for v, t in per.items()}
                                  for d, per in scores.sets[name].items()}} if variants else {}
            answers[name] = FewlAnswer(values[i], as_number(terms.truthfulness[i]),
                                       as_number(terms.penalty[i]), as_number(terms.fewl[i]),
                                       extra)
        refs = prep.references[i]
        first = next(iter(answers.values()))
        out.append(FewlRecord(
            id=str(item.id), question=item.question, value=first.fewl, answer=first.answer,
            references=tuple(refs), reference_models=tuple(prep.reference_names[:len(refs)]),
            pairs=tuple(asdict(p) for p in prep.pairs.pairs[i]),
            pairs_attempts=prep.pairs.attempts[i],
            pairs_failed=int(scores.pair_count[i]) < settings.pairs.min_pairs,
            scored=bool(scores.scorable[i]),
            pairs_error=prep.pairs.errors[i] if prep.pairs.errors else None,
            pairs_raw=prep.pairs.raw[i] if not prep.pairs.pairs[i] else None,
            expertise=tuple(as_number(s) for s in scores.expertise[i, :len(refs)]),
            weights=tuple(as_number(w) for w in scores.weights[i, :len(refs)]),
            neighbours=tuple(items[k].id for k, m in zip(nb.index[i], nb.mask[i], strict=True)
                             if m),
            neighbour_cosine=tuple(as_number(c) for c, m in zip(nb.cosine[i], nb.mask[i],
                                                                 strict=True) if m),
            answers=answers,
            extra={"agreement_wrong": [as_number(v)
                                       for v in scores.agreement_wrong[i, :len(refs)]],
                   "agreement_corrected": [as_number(v)
                                           for v in scores.agreement_corrected[i, :len(refs)]]},
        ))
    return out


def model_summaries(recs: Sequence[FewlRecord],
                    names: Sequence[str]) -> dict[str, FewlModelSummary]:
    """Mean ± s.e., bootstrap CI, n, mean T and mean L per answer source (exact sums: a
    streamed run adds the same records chunk by chunk and gets the same digits)."""
    running = RunningFewl(names)
    running.add(recs)
    return running.summaries()


def fewl_results(mode: str, dataset: str, n_questions: int, failed: Sequence[str],
                 similarity: Similarity, settings: FewlSettings,
                 models: Mapping[str, FewlModelSummary], ranking: FewlRanking | None = None,
                 validation: FewlValidation | None = None,
                 selection: SelectionSummary | None = None) -> FewlResults:
    """A FEWL run's summary: the setup every mode records, and what the mode adds."""
    return FewlResults(mode, dataset, n_questions, tuple(failed), settings.divergence,
                       similarity.describe(), settings.describe(), models, ranking, validation,
                       selection)


def run_config(mode: str, dataset: str, n_questions: int, similarity: Similarity,
               reference_names: list[str], settings: FewlSettings, ctx: Context,
               extra: dict[str, Any]) -> JsonObject:
    """run.json's config of a FEWL run."""
    config: JsonObject = {
        "mode": mode, "dataset": dataset, "n_questions": n_questions,
        "settings": settings.describe(), "similarity": similarity.describe(),
        "tau": settings.tau, "K": settings.neighbours, "R": settings.pairs.r,
        "near_duplicate": settings.near_duplicate, "divergence": settings.divergence,
        "reference_models": reference_names, "model_options": ctx.options_record()}
    return config | extra


def side_files(typed: Sequence[FewlRecord]) -> dict[str, list[dict[str, Any]]]:
    """references.jsonl, pairs.jsonl and answers/<source>.jsonl rows of these records: a
    later run can score from them with no model."""
    files: dict[str, list[dict[str, Any]]] = {
        "references.jsonl": [{"id": r.id, "question": r.question, "references": list(r.references),
                              "reference_models": list(r.reference_models)} for r in typed],
        "pairs.jsonl": [{"id": r.id, "question": r.question, "pairs": [dict(p) for p in r.pairs]}
                        for r in typed],
    }
    for name in typed[0].answers if typed else ():
        files[answers_file(name)] = [
            {"id": r.id, "question": r.question, "answer": r.answers[name].answer}
            for r in typed if r.answers[name].answer is not None]
    return files


def answers_file(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name)[:100].strip("-.") or "answers"
    return f"answers/{stem}.jsonl"


def finish_run(mode: str, dataset: str, items: Sequence[Item], recs: list[FewlRecord],
               prep: Prepared, settings: FewlSettings, ctx: Context, out: Path | None,
               extra: dict[str, Any], models: Mapping[str, FewlModelSummary],
               ranking: FewlRanking | None = None,
               validation: FewlValidation | None = None,
               selection: SelectionSummary | None = None,
               ) -> RunResult[FewlRecord, FewlResults]:
    """A run scored in one piece, written through the driver as one chunk (into ``out`` when
    given): its records, side files and summary."""
    summary = fewl_results(mode, dataset, len(items), [r.id for r in recs if r.pairs_failed],
                           prep.similarity, settings, models, ranking, validation, selection)
    if prep.search is not None:
        extra = extra | {"neighbour_search": prep.search.as_dict()}
    config = run_config(mode, dataset, len(items), prep.similarity, prep.reference_names,
                        settings, ctx, extra)
    files = side_files(recs)
    plan: RunPlan[FewlRecord] = RunPlan("fewl", FewlRecord, config, ctx.started)
    outcome = drive(out, plan, [recs], [],
                    lambda: Finish(summary, stats=ctx.stats() if out is not None else {},
                                   files=files))
    return RunResult(tuple(recs), outcome.summary, outcome.run)
