"""A length run: the greedy answer of each question (one call), or recorded answers (no
model), scored by their length in tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from veracity.data.jsonl import read_objects
from veracity.errors import BackendError, DataError
from veracity.methods.length.core import LengthSettings, answer_length, greedy_request
from veracity.methods.length.records import LengthRecord, LengthSummary
from veracity.runs.common import Context
from veracity.runs.driver import Finish, Kept, RunPlan, check_target, drive
from veracity.runs.result import RunResult
from veracity.stats import Histogram
from veracity.streaming import MomentSums, chunks
from veracity.types import Generation, Item

CHUNK = 256
"""Questions per chunk of a run written to a directory."""


def record_of(item: Item, reply: Generation | BackendError, model: str) -> LengthRecord:
    """One question's record from its greedy reply (or the error in its place)."""
    blank = LengthRecord(item.id, item.question, "", None, model=model,
                         references=item.references)
    if isinstance(reply, BackendError):
        return replace(blank, error=f"model error: {reply}")
    answer = reply.text.strip()
    if not answer:
        return replace(blank, error="empty answer: nothing to measure")
    tokens, counted_by = answer_length(reply)
    return replace(blank, answer=answer, score=float(tokens), counted_by=counted_by,
                   finish_reason=reply.finish_reason)


def score_greedy(items: Sequence[Item], greedy: Sequence[Generation | BackendError],
                 settings: LengthSettings, ctx: Context | None = None,
                 model: str = "") -> list[LengthRecord]:
    """Score given greedy answers: no model call (``ctx`` unused; the baselines' signature)."""
    if len(greedy) != len(items):
        raise DataError(f"{len(items)} questions but {len(greedy)} greedy answers")
    return [record_of(i, g, model) for i, g in zip(items, greedy, strict=True)]


def score_items(items: Sequence[Item], model: str, settings: LengthSettings,
                ctx: Context) -> list[LengthRecord]:
    """The greedy answer of each question, measured."""
    replies = ctx.client(model).generate_each(
        [greedy_request(i.question, settings) for i in items], stage="length: greedy answers")
    return score_greedy(items, replies, settings, ctx, model)


def summarise(records: Sequence[LengthRecord], model: str = "", dataset: str = "",
              settings: LengthSettings | None = None) -> LengthSummary:
    """Mean length ± s.e., its quartiles, how lengths were counted, and answers cut short."""
    scored = [r for r in records if r.score is not None]
    values = np.asarray([r.score for r in scored], dtype=np.float64)
    moments = MomentSums()
    moments.add(values)
    mean, stderr = moments.mean_stderr()
    quartiles = tuple(float(q) for q in np.percentile(values, [25, 50, 75])) if values.size else ()
    top = float(values.max()) if values.size else 1.0
    counts, edges = np.histogram(values, bins=20, range=(0.0, max(top, 1.0)))
    return LengthSummary(
        model, dataset, (settings or LengthSettings()).describe(), len(records), len(scored),
        len(records) - len(scored), mean, stderr, quartiles,
        {k: sum(r.counted_by == k for r in scored) for k in ("model", "words")},
        sum(r.finish_reason == "length" for r in scored),
        Histogram(tuple(float(e) for e in edges), tuple(int(c) for c in counts)))


def run_length(items: Sequence[Item], model: str, settings: LengthSettings, ctx: Context,
               out: Path | None, dataset: str) -> RunResult[LengthRecord, LengthSummary]:
    """Measure every question's greedy answer; with ``out``, chunk by chunk into that run
    directory."""
    if not items:
        raise DataError("no questions to score")
    ctx.client(model)  # a bad spec fails before the run directory is written
    return _written(items, lambda chunk: score_items(chunk, model, settings, ctx), settings,
                    out, ctx, model, dataset)


def read_recorded(path: Path) -> Iterator[tuple[Item, Generation]]:
    """Recorded answers: JSONL with ``prompt`` and ``answer`` per line; optional ``id``,
    ``references`` and ``tokens`` (the answer's length by the model's tokenizer)."""
    for number, row in read_objects(path, "recorded file"):
        where = f"{path}, line {number}"
        for name in ("prompt", "answer"):
            if not isinstance(row.get(name), str):
                raise DataError(f"{where}: field '{name}' must be a string")
        tokens = row.get("tokens", 0)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise DataError(f"{where}: field 'tokens' must be a whole number >= 0")
        refs = row.get("references") or ()
        if not isinstance(refs, list | tuple) or not all(isinstance(r, str) for r in refs):
            raise DataError(f"{where}: 'references' must be a list of strings")
        item = Item(str(row.get("id", f"line-{number}")), row["prompt"], tuple(refs))
        yield item, Generation(row["answer"], completion_tokens=tokens)


def run_recorded(path: Path, settings: LengthSettings, ctx: Context,
                 out: Path | None) -> RunResult[LengthRecord, LengthSummary]:
    """Measure recorded answers: no model call."""
    rows = list(read_recorded(path))
    if not rows:
        raise DataError(f"{path}: no records")
    replies = {i.id: g for i, g in rows}
    return _written([i for i, _ in rows],
                    lambda chunk: score_greedy(chunk, [replies[i.id] for i in chunk], settings,
                                               ctx, "recorded"),
                    settings, out, ctx, "recorded", f"recorded:{path}")


def _written(items: Sequence[Item], score: Callable[[Sequence[Item]], list[LengthRecord]],
             settings: LengthSettings, out: Path | None, ctx: Context, model: str,
             dataset: str) -> RunResult[LengthRecord, LengthSummary]:
    check_target(out)
    config = {"model": model, "dataset": dataset, "settings": settings.describe()}
    kept: Kept[LengthRecord] = Kept()

    def finish() -> Finish[LengthSummary]:
        return Finish(summarise(kept, model, dataset, settings), stats=ctx.stats())

    return drive(out, RunPlan("length", LengthRecord, config, ctx.started),
                 (score(chunk) for chunk in chunks(items, CHUNK)), [kept], finish)
