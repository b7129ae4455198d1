"""A log-probability run: the greedy answer of each question with its tokens' log-probabilities
(one call per question), or recorded answers with theirs (no model), scored into records."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from veracity.backends.base import require
from veracity.backends.logprobs import parse_tokens
from veracity.data.jsonl import read_objects
from veracity.errors import BackendError, DataError
from veracity.methods.logprob.core import (
    LogprobSettings,
    greedy_request,
    logprob_scores,
)
from veracity.methods.logprob.records import STATISTICS, LogprobRecord, LogprobSummary
from veracity.records import Mean
from veracity.runs.common import Context
from veracity.runs.driver import Finish, Kept, RunPlan, check_target, drive
from veracity.runs.result import RunResult
from veracity.stats import Histogram
from veracity.streaming import MomentSums, chunks
from veracity.types import Generation, Item, TokenLogprob

CHUNK = 256
"""Questions per chunk of a run written to a directory."""


def record_of(item: Item, reply: Generation | BackendError, settings: LogprobSettings,
              model: str) -> LogprobRecord:
    """One question's record from its greedy reply (or the error in its place)."""
    blank = LogprobRecord(item.id, item.question, "", None, signal=settings.signal,
                          top_k=settings.top_k, model=model, references=item.references)
    if isinstance(reply, BackendError):
        return replace(blank, error=f"model error: {reply}")
    answer = reply.text.strip()
    if reply.logprobs is None:
        return replace(blank, answer=answer,
                       error="the backend returned no token log-probabilities")
    found = logprob_scores(reply.logprobs)
    if found is None or not answer:
        return replace(blank, answer=answer, error="empty answer: no tokens to score")
    return replace(
        blank, answer=answer, score=found.value(settings.signal),
        mean_logprob=found.mean_logprob, min_prob=found.min_prob,
        mean_entropy=found.mean_entropy, perplexity=found.perplexity, n_tokens=found.n_tokens,
        tokens=tuple((t.token, t.logprob) for t in reply.logprobs))


def score_greedy(items: Sequence[Item], greedy: Sequence[Generation | BackendError],
                 settings: LogprobSettings, ctx: Context | None = None,
                 model: str = "") -> list[LogprobRecord]:
    """Score given greedy answers (generated with :func:`greedy_request`, so they carry their
    tokens' log-probabilities): no model call. ``ctx`` is unused (the same signature as the
    other baselines')."""
    if len(greedy) != len(items):
        raise DataError(f"{len(items)} questions but {len(greedy)} greedy answers")
    return [record_of(i, g, settings, model) for i, g in zip(items, greedy, strict=True)]


def score_items(items: Sequence[Item], model: str, settings: LogprobSettings,
                ctx: Context) -> list[LogprobRecord]:
    """The greedy answer of each question with its log-probabilities, scored."""
    client = ctx.client(model)
    replies = client.generate_each([greedy_request(i.question, settings) for i in items],
                                   stage="logprob: greedy answers")
    return score_greedy(items, replies, settings, ctx, model)


def summarise(records: Sequence[LogprobRecord], settings: LogprobSettings, model: str = "",
              dataset: str = "") -> LogprobSummary:
    """Mean ± s.e. of every signal over the scored answers, the unscored count and the
    histogram of the run's signal."""
    scored = [r for r in records if r.score is not None]
    means = {}
    for name in STATISTICS:
        values = [float(v) for r in scored if (v := getattr(r, name)) is not None
                  and np.isfinite(v)]
        moments = MomentSums()
        moments.add(np.asarray(values, dtype=np.float64))
        mean, stderr = moments.mean_stderr()
        means[name] = Mean(mean, stderr, len(values))
    # over the values' own range: log-probabilities are negative, perplexities unbounded
    scores = np.asarray([r.score for r in scored if r.score is not None and np.isfinite(r.score)])
    low, high = (float(scores.min()), float(scores.max())) if scores.size else (0.0, 1.0)
    counts, edges = np.histogram(scores, bins=20, range=(low, high if high > low else low + 1))
    return LogprobSummary(model, dataset, settings.describe(), len(records), len(scored),
                          len(records) - len(scored), means,
                          Histogram(tuple(float(e) for e in edges),
                                    tuple(int(c) for c in counts)),
                          means[settings.signal].mean)


def run_logprob(items: Sequence[Item], model: str, settings: LogprobSettings, ctx: Context,
                out: Path | None, dataset: str) -> RunResult[LogprobRecord, LogprobSummary]:
    """Score every question; with ``out``, chunk by chunk into that run directory."""
    if not items:
        raise DataError("no questions to score")
    require(ctx.client(model).backend, "logprobs", "the logprob baseline")
    return _written(items, lambda chunk: score_items(chunk, model, settings, ctx), settings,
                    out, ctx, model, dataset)


def read_recorded(path: Path) -> Iterator[tuple[Item, Generation]]:
    """Recorded answers: JSONL with ``prompt``, ``answer`` and ``logprobs`` (the answer's tokens,
    OpenAI's ``logprobs.content`` shape or the compact one) per line; optional ``id`` and
    ``references``."""
    for number, row in read_objects(path, "recorded file"):
        where = f"{path}, line {number}"
        for name in ("prompt", "answer", "logprobs"):
            if name not in row:
                raise DataError(f"{where}: missing field '{name}'")
        if not isinstance(row["prompt"], str) or not isinstance(row["answer"], str):
            raise DataError(f"{where}: 'prompt' and 'answer' must be strings")
        tokens: tuple[TokenLogprob, ...] = parse_tokens(row["logprobs"], f"{where}, 'logprobs'")
        refs = row.get("references") or ()
        if not isinstance(refs, list | tuple) or not all(isinstance(r, str) for r in refs):
            raise DataError(f"{where}: 'references' must be a list of strings")
        item = Item(str(row.get("id", f"line-{number}")), row["prompt"], tuple(refs))
        yield item, Generation(row["answer"], completion_tokens=len(tokens), logprobs=tokens)


def run_recorded(path: Path, settings: LogprobSettings, ctx: Context,
                 out: Path | None) -> RunResult[LogprobRecord, LogprobSummary]:
    """Score recorded answers: no model call."""
    rows = list(read_recorded(path))
    if not rows:
        raise DataError(f"{path}: no records")
    items = [i for i, _ in rows]
    replies = {i.id: g for i, g in rows}
    model = "recorded"
    return _written(items, lambda chunk: score_greedy(chunk, [replies[i.id] for i in chunk],
                                                      settings, ctx, model),
                    settings, out, ctx, model, f"recorded:{path}")


def _written(items: Sequence[Item], score: Callable[[Sequence[Item]], list[LogprobRecord]],
             settings: LogprobSettings, out: Path | None, ctx: Context, model: str,
             dataset: str) -> RunResult[LogprobRecord, LogprobSummary]:
    check_target(out)
    config = {"model": model, "dataset": dataset, "settings": settings.describe()}
    kept: Kept[LogprobRecord] = Kept()

    def finish() -> Finish[LogprobSummary]:
        return Finish(summarise(kept, settings, model, dataset), stats=ctx.stats())

    return drive(out, RunPlan("logprob", LogprobRecord, config, ctx.started),
                 (score(chunk) for chunk in chunks(items, CHUNK)), [kept], finish)
