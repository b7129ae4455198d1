"""``fewl select`` in bounded memory, and the selection shared with the in-memory run.

Candidates are sampled from a model a chunk of questions at a time into an SQLite table
(S texts a question) or read from a JSONL file indexed once; references, pairs and the
nearest-neighbour index are made as :func:`~veracity.methods.fewl.chunked.stream_fewl`
makes them, and each chunk of questions is scored with the neighbours it needs. Per chunk the
best candidate of each question is chosen, its record written, the selection's aggregates
kept as exact running sums and the multiple-choice accuracies as integer counts. The chosen
answer and value of each question go to a table by position; the ICL prompts (which show
each question's neighbours' chosen answers) and the fine-tuning set are then written in a
second pass over the neighbour index, chunk by chunk.
"""

from __future__ import annotations

import math
import shutil
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from veracity.data.labelled import text_rows
from veracity.data.stored import take
from veracity.errors import ConfigError, DataError
from veracity.heap import frozen_heap
from veracity.methods.fewl.chunked import (
    _ANSWER_FIELDS,
    _LOOKUP,
    CHUNK,
    GENERATE_CHUNK,
    Generated,
    KeyedRows,
    _Index,
    _Inputs,
    _scored_chunks,
    _texts,
    _total,
    fresh_work,
    generation_bar,
    reference_names,
)
from veracity.methods.fewl.records import FewlRecord, FewlResults, SelectionSummary
from veracity.methods.fewl.run import (
    AnswerSource,
    FewlSettings,
    answers_file,
    answers_from,
    as_number,
    fewl_results,
    pairs_model,
    run_config,
    side_files,
)
from veracity.methods.fewl.running import RunningFewl
from veracity.methods.fewl.selection.core import finetune_set, icl_prompts
from veracity.methods.fewl.similarity import Similarity, choose_options, load_similarity
from veracity.runs.common import Context
from veracity.runs.driver import Finish, RunPlan, check_target, drive
from veracity.runs.result import RunResult
from veracity.stats import bootstrap_ci
from veracity.store import RunDir, dumps
from veracity.streaming import FloatColumn, MomentSums, SampleWriter
from veracity.types import Item


def candidate_names(width: int) -> list[str]:
    """The answer sets of a selection: one per candidate slot."""
    return [f"candidate-{k}" for k in range(width)]


def candidate_sets(candidates: Sequence[Sequence[str]],
                   width: int) -> dict[str, list[str | None]]:
    """Candidate slot -> the k-th candidate of each question (None where it has fewer)."""
    return {name: [c[k] if k < len(c) else None for c in candidates]
            for k, name in enumerate(candidate_names(width))}


def pick_best(record: FewlRecord) -> FewlRecord:
    """The record with the candidate of highest FEWL as its answer and value (ties to the
    first; no answer and no value when none was scored), its slot in ``extra["selected"]``."""
    entries = list(record.answers.values())
    row = np.array([math.nan if e.fewl is None else e.fewl for e in entries], dtype=np.float64)
    best = None if np.isnan(row).all() else int(np.nanargmax(row))
    return replace(record, value=None if best is None else as_number(row[best]),
                   answer=None if best is None else entries[best].answer,
                   extra={**record.extra, "selected": best})


def kept(answer: str | None, value: float | None, min_fewl: float | None) -> bool:
    """Whether a chosen answer is exported (as an example or a fine-tuning target)."""
    return answer is not None and (min_fewl is None or (value is not None and value >= min_fewl))


class SelectionTally:
    """The ``selection`` block of results.json, added to chunk by chunk: mean ± s.e.,
    bootstrap CI and n of the chosen values (exact sums), and for multiple-choice questions
    how many the first and the chosen candidate answer correctly."""

    def __init__(self, similarity: Similarity) -> None:
        self.similarity = similarity
        self.sums = MomentSums()
        self.values = FloatColumn()
        self.labelled = self.first_correct = self.selected_correct = 0

    def add(self, items: Sequence[Item], records: Sequence[FewlRecord]) -> None:
        """Questions and their records after :func:`pick_best`."""
        column = np.array([math.nan if r.value is None else r.value for r in records],
                          dtype=np.float64)
        self.sums.add(column)
        self.values.extend(column[np.isfinite(column)])
        mc = [(item, r) for item, r in zip(items, records, strict=True)
              if "options" in item.metadata]
        if not mc:
            return
        options = [item.metadata["options"] for item, _ in mc]
        first = choose_options(self.similarity, [r.answers["candidate-0"].answer for _, r in mc],
                               options)
        picked = choose_options(self.similarity, [r.answer for _, r in mc], options)
        correct = [item.metadata["correct"] for item, _ in mc]
        self.labelled += len(mc)
        self.first_correct += sum(c == k for c, k in zip(first, correct, strict=True))
        self.selected_correct += sum(c == k for c, k in zip(picked, correct, strict=True))

    def result(self) -> SelectionSummary:
        mean, stderr = self.sums.mean_stderr()
        low, high = bootstrap_ci(self.values.array())  # type: ignore[arg-type]
        if not self.labelled:
            return SelectionSummary(mean, stderr, (low, high), self.sums.n)
        return SelectionSummary(mean, stderr, (low, high), self.sums.n,
                                self.first_correct / self.labelled,
                                self.selected_correct / self.labelled, self.labelled)


class _Candidates:
    """The candidates of each question: a file indexed once, or a model's samples generated
    a chunk at a time into a table by position."""

    def __init__(self, db: sqlite3.Connection, source: AnswerSource, samples: int) -> None:
        self.source = source
        self.column: KeyedRows | Generated = (
            Generated(db, "candidates") if source.path is None else
            KeyedRows(db, "candidates", source.path,
                      text_rows(source.path, _ANSWER_FIELDS, stream=True)))
        self.width = samples if source.path is None else 0

    def check(self, items: Sequence[Item], chunk_size: int) -> None:
        """Every question has candidates in the file (a DataError naming the first one
        missing, before any model call), and the most any question has."""
        if not isinstance(self.column, KeyedRows):
            return
        for start in range(0, len(items), chunk_size):
            rows = self.column.texts(items[start:start + chunk_size], "answers")
            self.width = max(self.width, *(len(r) for r in rows))
        if self.width == 0:
            raise DataError(f"{self.source.path}: no candidate answers")

    def generate(self, items: Sequence[Item], settings: FewlSettings, ctx: Context,
                 samples: int, temperature: float) -> None:
        if isinstance(self.column, Generated):
            self.column.append(answers_from(self.source, items, settings, ctx, samples,
                                            temperature))

    def sets(self, items: Sequence[Item], start: int,
             stop: int) -> dict[str, list[str | None]]:
        """The candidate slots of questions start..stop."""
        return candidate_sets(_texts(self.column, range(start, stop), items[start:stop],
                                     "answers"), self.width)


class _Chosen:
    """The chosen answer and value of each question, by position."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.rows = db, 0
        db.execute("CREATE TABLE chosen (seq INTEGER PRIMARY KEY, answer TEXT, value REAL)")

    def append(self, records: Sequence[FewlRecord]) -> None:
        self.db.executemany("INSERT INTO chosen (seq, answer, value) VALUES (?, ?, ?)",
                            [(self.rows + i, r.answer, r.value) for i, r in enumerate(records)])
        self.db.commit()
        self.rows += len(records)

    def get(self, positions: Sequence[int]) -> dict[int, tuple[str | None, float | None]]:
        found: dict[int, tuple[str | None, float | None]] = {}
        unique = list(dict.fromkeys(positions))
        for start in range(0, len(unique), _LOOKUP):
            part = unique[start:start + _LOOKUP]
            marks = ",".join("?" * len(part))
            for seq, answer, value in self.db.execute(
                    f"SELECT seq, answer, value FROM chosen WHERE seq IN ({marks})", part):
                found[seq] = (answer, value)
        return found


def _selected(items: Sequence[Item], batches: Iterable[list[FewlRecord]], tally: SelectionTally,
              chosen: _Chosen) -> Iterator[list[FewlRecord]]:
    start = 0
    for records in batches:
        picked = [pick_best(r) for r in records]
        tally.add(items[start:start + len(picked)], picked)
        chosen.append(picked)
        start += len(picked)
        yield picked


def _exports(run: RunDir, items: Sequence[Item], index: _Index, chosen: _Chosen,
             icl_examples: int, min_fewl: float | None, template: str, chunk_size: int) -> None:
    """icl_prompts.jsonl and finetune.jsonl, a chunk of questions at a time, each with the
    chosen answers of the neighbours its prompt shows."""
    with SampleWriter(run.record("icl_prompts.jsonl"), dumps) as icl, \
            SampleWriter(run.record("finetune.jsonl"), dumps) as tune:
        for start in range(0, len(items), chunk_size):
            stop = min(start + chunk_size, len(items))
            nb_index, nb_mask = index.index.read(start, stop), index.mask.read(start, stop)
            own = list(range(start, stop))
            others = sorted(set(nb_index[nb_mask].tolist()) - set(own))
            wanted = own + others
            found = chosen.get(wanted)
            at = {g: i for i, g in enumerate(wanted)}
            keep = {g: kept(*found[g], min_fewl) for g in wanted}
            shots = [[at[int(k)] for k, m in zip(nb_index[i], nb_mask[i], strict=True)
                      if m and keep[int(k)]][:icl_examples] for i in range(stop - start)]
            questions = [(item.id, item.question) for item in take(items, wanted)]
            icl.write(icl_prompts(questions, [found[g][0] for g in wanted],
                                  [found[g][1] for g in wanted],
                                  shots + [[] for _ in others], template)[:len(own)])
            tune.write(finetune_set([questions[i] for i, g in enumerate(own) if keep[g]],
                                    [found[g][0] for g in own if keep[g]]))


@frozen_heap()  # the run's questions are not scanned again after every chunk
def stream_select(
    items: Sequence[Item], source: AnswerSource, settings: FewlSettings, ctx: Context,
    out: Path | None, dataset: str, extra: dict[str, Any], samples: int = 4,
    temperature: float = 0.7,
    icl_examples: int = 3, min_fewl: float | None = None, chunk_size: int = CHUNK,
    generate_chunk: int = GENERATE_CHUNK,
) -> RunResult[FewlRecord, FewlResults]:
    """:func:`veracity.methods.fewl.modes.run_fewl_select` chunk by chunk: the same run
    directory, records, aggregates and exports."""
    check_target(out)
    settings.check()
    if not items:
        raise DataError("no questions to score")
    if source.path is None and source.model is None:
        raise ConfigError("a streamed FEWL selection takes candidates from a model or a file")
    if source.model is not None and samples < 1:
        raise ConfigError(f"samples must be at least 1, got {samples}")
    if settings.pairs_file is None:
        pairs_model(settings)  # a ConfigError before any model call
    work = fresh_work(out)
    db = sqlite3.connect(work / "lookup.sqlite")
    try:
        candidates = _Candidates(db, source, samples)
        inputs = _Inputs(db, [], settings)
        candidates.check(items, chunk_size)
        inputs.check_files(items, chunk_size)
        if source.model is not None or inputs.generated():
            total = _total(items, [], settings, inputs)
            if total is not None and source.model is not None:
                total += len(items) * samples
            models = [source.model] if source.model is not None else []
            with generation_bar(ctx, settings, models, total):
                for start in range(0, len(items), generate_chunk):
                    part = items[start:start + generate_chunk]
                    candidates.generate(part, settings, ctx, samples, temperature)
                    inputs.generate(part, [], settings, ctx, len(part))
        similarity = load_similarity(settings.similarity, ctx.embedder, ctx.scorer,
                                     settings.mapping, settings.similarity_label)
        index = _Index(work, items, inputs, settings, ctx, chunk_size, similarity)
        names = reference_names(inputs, settings, index)
        config = run_config("select", dataset, len(items), similarity, names, settings, ctx,
                            extra | index.described())
        sets = candidate_names(candidates.width)
        running = RunningFewl(sets)
        tally = SelectionTally(similarity)
        chosen = _Chosen(db)
        scored = _scored_chunks(items, inputs, index, similarity, names, settings, chunk_size,
                                None, lambda start, stop: candidates.sets(items, start, stop))

        def exports(run: RunDir) -> None:
            _exports(run, items, index, chosen, icl_examples, min_fewl, settings.answer_template,
                     chunk_size)

        def finish() -> Finish[FewlResults]:
            results = fewl_results("select", dataset, len(items), running.failed, similarity,
                                   settings, running.summaries(), selection=tally.result())
            return Finish(results, {"model_options": ctx.options_record()}, ctx.stats(),
                          exports=exports)

        files = tuple(dict.fromkeys(["references.jsonl", "pairs.jsonl",
                                     *(answers_file(n) for n in sets)]))
        outcome = drive(out, RunPlan("fewl", FewlRecord, config, ctx.started, files, side_files),
                        _selected(items, scored, tally, chosen), [running], finish)
    finally:
        db.close()
    shutil.rmtree(work)
    return outcome
