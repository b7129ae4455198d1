"""``fewl validate`` in bounded memory: each repeat a streamed pass over the labelled questions.

A repeat generates its references and pairs a chunk of questions at a time into lookup tables,
builds the question index and NN_K in files, and scores each chunk with the neighbours it needs
(the pieces of :mod:`veracity.methods.fewl.chunked`); the labelled answers come with the
items. Measurement accuracy is kept as integer counts of wins, ties and compared questions per
comparison x divergence x variant (:class:`MeasurementTally`), so it equals
:func:`~veracity.methods.fewl.core.measurement_accuracy` on the whole arrays to the last digit.
The first repeat's records are written as they come, as the in-memory run keeps the first
repeat's; with a judge, Figures 2 and 3 are asked a block of questions at a time from the
first repeat's index and references.
"""

from __future__ import annotations

import math
import shutil
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from veracity.client import LLMClient
from veracity.data.labelled import LabelledItem
from veracity.errors import ConfigError, DataError
from veracity.heap import frozen_heap
from veracity.methods.fewl.chunked import (
    CHUNK,
    GENERATE_CHUNK,
    _Index,
    _Inputs,
    _scored_chunks,
    _total,
    fresh_work,
    generation_bar,
    reference_names,
)
from veracity.methods.fewl.core import FewlScores, neighbour_blocks, unit_rows
from veracity.methods.fewl.records import (
    AccuracyCell,
    Comparison,
    FewlRecord,
    FewlResults,
    FewlValidation,
    Figures,
)
from veracity.methods.fewl.run import (
    FewlSettings,
    answers_file,
    fewl_results,
    pairs_model,
    run_config,
    side_files,
)
from veracity.methods.fewl.running import RunningFewl
from veracity.methods.fewl.similarity import Similarity, load_similarity
from veracity.methods.fewl.validation.core import TABLE_ROWS, combine_repeats
from veracity.methods.fewl.validation.figures import (
    FIGURE_TWO_NEIGHBOURS,
    ReferenceRatings,
    figure_two_data,
    judged_neighbours,
)
from veracity.runs.common import Context
from veracity.runs.driver import Finish, RunPlan, check_target, drive
from veracity.runs.result import RunResult
from veracity.sequences import LazySequence
from veracity.types import Item


class AccuracyCounts:
    """Measurement accuracy of one cell as integer counts, added a chunk at a time.

    >>> c = AccuracyCounts()
    >>> c.add([0.5, 0.2, float("nan")], [0.1, 0.2, 0.3])
    >>> c.add([0.1], [0.4])
    >>> c.result()
    AccuracyCell(accuracy=0.5, n=3, ties=1, std=None, repeats=None)
    """

    def __init__(self) -> None:
        self.n = self.wins = self.ties = 0

    def add(self, better: npt.ArrayLike, worse: npt.ArrayLike) -> None:
        """Scores of the better and the worse answer of some questions (NaN = unscored)."""
        b = np.asarray(better, dtype=np.float64)
        w = np.asarray(worse, dtype=np.float64)
        both = np.isfinite(b) & np.isfinite(w)
        self.n += int(both.sum())
        self.wins += int((b[both] > w[both]).sum())
        self.ties += int((b[both] == w[both]).sum())

    def result(self) -> AccuracyCell:
        """What :func:`~veracity.methods.fewl.core.measurement_accuracy` gives on every
        question added: the same expression on the same counts."""
        if self.n == 0:
            return AccuracyCell(math.nan, 0, 0)
        return AccuracyCell((float(self.wins) + 0.5 * self.ties) / self.n, self.n, self.ties)


class MeasurementTally:
    """The validation table of one repeat (better vs each worse answer, x divergence x
    variant), added a chunk of questions at a time; a :class:`ChunkTally` of the streamed
    scoring. Questions whose worse answer is the better one's text are left out of the cells
    and counted as ``identical_skipped``."""

    def __init__(self, better: str, worse: Sequence[str]) -> None:
        self.better, self.worse = better, list(worse)
        self.skipped = dict.fromkeys(self.worse, 0)
        self.cells: dict[str, dict[str, dict[str, AccuracyCounts]]] = {n: {} for n in self.worse}

    def add(self, items: Sequence[Item], answer_sets: dict[str, list[str | None]],
            recs: list[FewlRecord], scores: FewlScores, similarity: Similarity) -> None:
        """One chunk: rows 0..len(items)-1 of ``scores`` are its questions."""
        size = len(items)
        good = [(t or "").strip() for t in answer_sets[self.better]]
        for name in self.worse:
            same = np.array([g == (t or "").strip() for g, t in zip(good, answer_sets[name],
                                                                    strict=True)], dtype=bool)
            self.skipped[name] += int(same.sum())
            for div, per in scores.sets[self.better].items():
                cells = self.cells[name].setdefault(div, {})
                for variant, terms in per.items():
                    worse = np.where(same, np.nan, scores.sets[name][div][variant].fewl[:size])
                    cells.setdefault(variant, AccuracyCounts()).add(terms.fewl[:size], worse)

    def result(self) -> dict[str, Comparison]:
        """The table the in-memory run computes from the whole arrays."""
        return {f"{self.better} vs {name}": Comparison(
                    self.skipped[name], {div: {variant: c.result() for variant, c in cells.items()}
                                         for div, cells in self.cells[name].items()})
                for name in self.worse}


class _Plain(LazySequence[Item]):
    """The labelled items as the questions FEWL scores (id, question, gold), made on access."""

    def __init__(self, items: Sequence[LabelledItem]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def _item(self, index: int) -> Item:
        x = self.items[index]
        return Item(x.id, x.question, (x.gold,))

    def _items(self, start: int, stop: int, step: int) -> list[Item]:
        return [Item(x.id, x.question, (x.gold,)) for x in self.items[start:stop:step]]


class _Texts(LazySequence[str]):
    """One text field of the labelled items (question or gold), read on access."""

    def __init__(self, items: Sequence[LabelledItem], field: str) -> None:
        self.items, self.field = items, field

    def __len__(self) -> int:
        return len(self.items)

    def _item(self, index: int) -> str:
        return str(getattr(self.items[index], self.field))

    def _items(self, start: int, stop: int, step: int) -> list[str]:
        return [str(getattr(x, self.field)) for x in self.items[start:stop:step]]


@frozen_heap()  # the run's questions are not scanned again after every chunk
def stream_fewl_validate(
    items: Sequence[LabelledItem], settings: FewlSettings, ctx: Context, out: Path | None,
    dataset: str = "", repeats: int = 1, judge: str | None = None, chunk_size: int = CHUNK,
    generate_chunk: int = GENERATE_CHUNK,
) -> RunResult[FewlRecord, FewlResults]:
    """:func:`veracity.methods.fewl.modes.run_fewl_validate` chunk by chunk: the same run
    directory, records and aggregates, in memory bounded by the chunk sizes."""
    check_target(out)
    settings.check()
    if not items:
        raise DataError("no labelled questions")
    if repeats < 1:
        raise ConfigError(f"repeats must be at least 1, got {repeats}")
    if settings.pairs_file is None:
        pairs_model(settings)  # a ConfigError before any model call
    judge_client = ctx.client(judge) if judge is not None else None
    plain = _Plain(items)
    better = items[0].better_name
    worse = [name for name, _ in items[0].worse]
    set_names = [better, *worse]

    def given(start: int, stop: int) -> dict[str, list[str | None]]:
        part = items[start:stop]
        sets: dict[str, list[str | None]] = {better: [x.better for x in part]}
        for name in worse:
            sets[name] = [dict(x.worse)[name] for x in part]
        return sets

    def labels(positions: Sequence[int]) -> list[tuple[str, list[str]]]:
        # a chunk's own questions come first; the neighbours after them lend their references
        # only (their ideal λ is never read), so they carry the first question's labels, texts
        # the chunk embeds anyway, rather than having labels of their own embedded
        start = positions[0]
        stop = min(start + chunk_size, len(items))
        own = [(items[g].better, [text for _, text in items[g].worse])
               for g in positions[:stop - start]]
        return own + [own[0]] * (len(positions) - len(own))

    work = fresh_work(out)
    tables: list[dict[str, Comparison]] = []
    running = RunningFewl(set_names)
    figures: list[Figures] = []

    def repeat(r: int) -> _Repeat:
        current = replace(settings, repeat=settings.repeat + r)
        here = work / f"repeat-{r}"
        here.mkdir()
        db = sqlite3.connect(here / "lookup.sqlite")
        try:
            inputs = _Inputs(db, (), current)
            _generate(plain, inputs, current, ctx, chunk_size, generate_chunk)
            similarity = load_similarity(current.similarity, ctx.embedder, ctx.scorer,
                                         current.mapping, current.similarity_label)
            index = _Index(here, plain, inputs, current, ctx, chunk_size, similarity)
            names = reference_names(inputs, current, index)
        except BaseException:
            db.close()
            raise
        tally = MeasurementTally(better, worse)
        batches = _scored_chunks(plain, inputs, index, similarity, names, current, chunk_size,
                                 tally, given, labels, variants=r == 0)
        return _Repeat(here, db, inputs, index, similarity, names, tally, batches, current)

    def scored(first: _Repeat) -> Iterator[list[FewlRecord]]:
        """The first repeat's records; then every other repeat, scored for its table only."""
        for r in range(repeats):
            current = first if r == 0 else repeat(r)
            try:
                if r == 0:
                    yield from current.batches
                    if judge_client is not None:
                        figures.append(_figures(judge_client, items, current.inputs,
                                                    current.index, current.settings,
                                                    current.names, chunk_size))
                else:
                    for _ in current.batches:  # the records are the first repeat's
                        pass
                tables.append(current.tally.result())
            finally:
                current.db.close()
            shutil.rmtree(current.here)

    first = repeat(0)
    config = run_config("validate", dataset, len(items), first.similarity, first.names,
                        settings, ctx, {"repeats": repeats, "judge": judge}
                        | first.index.described())

    def finish() -> Finish[FewlResults]:
        validation = FewlValidation(
            combine_repeats(tables), repeats,
            tuple(settings.stochastic_seed() + r for r in range(repeats)), TABLE_ROWS,
            figures[0] if figures else None)
        results = fewl_results("validate", dataset, len(items), running.failed,
                               first.similarity, settings, running.summaries(),
                               validation=validation)
        return Finish(results, {"model_options": ctx.options_record()}, ctx.stats())

    files = tuple(dict.fromkeys(["references.jsonl", "pairs.jsonl",
                                 *(answers_file(n) for n in set_names)]))
    try:
        outcome = drive(out, RunPlan("fewl", FewlRecord, config, ctx.started, files, side_files),
                        scored(first), [running], finish)
    finally:
        first.db.close()  # a no-op once closed: only an early failure leaves it open
    shutil.rmtree(work)
    return outcome


@dataclass
class _Repeat:
    """One repeat's lookup tables, neighbour index and scored chunks (a lazy iterator)."""

    here: Path
    db: sqlite3.Connection
    inputs: _Inputs
    index: _Index
    similarity: Similarity
    names: list[str]
    tally: MeasurementTally
    batches: Iterator[list[FewlRecord]]
    settings: FewlSettings


def _generate(plain: Sequence[Item], inputs: _Inputs, settings: FewlSettings, ctx: Context,
              chunk_size: int, generate_chunk: int) -> None:
    """One repeat's references and pairs, a chunk of questions at a time, under one bar."""
    if not inputs.generated():
        return
    inputs.check_files(plain, chunk_size)
    with generation_bar(ctx, settings, [], _total(plain, (), settings, inputs)):
        inputs.generate(plain, (), settings, ctx, generate_chunk)


def _figures(judge: LLMClient, items: Sequence[LabelledItem], inputs: _Inputs, index: _Index,
             settings: FewlSettings, names: list[str], chunk_size: int) -> Figures:
    """Figures 2 and 3 (:mod:`veracity.methods.fewl.validation.figures`): each question's ten nearest
    neighbours found over the index's question vectors a block at a time and their gold
    answers judged; the references of the first repeat rated a chunk at a time."""
    questions, golds = _Texts(items, "question"), _Texts(items, "gold")
    n = len(items)
    counts: list[int | None] = []
    for start, nb in neighbour_blocks(lambda a, b: unit_rows(index.questions.read(a, b)), n,
                                      FIGURE_TWO_NEIGHBOURS, settings.near_duplicate):
        counts += judged_neighbours(judge, questions, golds, start, nb)
    ratings = ReferenceRatings(judge)
    plain = _Plain(items)
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        refs = inputs.references_of(range(start, stop), plain[start:stop])
        ratings.add(questions[start:stop], golds[start:stop], refs, names)
    return Figures(figure_two_data(judge.spec, counts, FIGURE_TWO_NEIGHBOURS), ratings.result())
