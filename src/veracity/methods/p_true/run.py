"""A P(True) run: each question's greedy answer, then one call asking the model whether that
answer is true; or recorded answers (the judging call only) or recorded verdicts (no call)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from veracity.backends.logprobs import parse_tokens
from veracity.data.jsonl import read_objects
from veracity.errors import BackendError, DataError
from veracity.methods.p_true.core import PTrueSettings, read_verdict
from veracity.methods.p_true.records import PTrueRecord, PTrueSummary
from veracity.runs.common import Context
from veracity.runs.driver import Finish, Kept, RunPlan, check_target, drive
from veracity.runs.result import RunResult
from veracity.stats import Histogram
from veracity.streaming import MomentSums, chunks
from veracity.types import Generation, GenRequest, Item, Sampling

CHUNK = 256
"""Questions per chunk of a run written to a directory."""


def record_of(item: Item, answer: str | BackendError, reply: Generation | BackendError | None,
              model: str) -> PTrueRecord:
    """One question's record from its answer and the reply to "is it true?"."""
    blank = PTrueRecord(item.id, item.question, "", None, model=model,
                        references=item.references)
    if isinstance(answer, BackendError):
        return replace(blank, error=f"model error: {answer}")
    if not answer:
        return replace(blank, error="empty answer: nothing to judge")
    if reply is None or isinstance(reply, BackendError):
        return replace(blank, answer=answer, error=f"model error: {reply}")
    found = read_verdict(reply.text, reply.logprobs)
    return replace(blank, answer=answer, score=found.score, source=found.source,
                   p_true=found.p_true, p_false=found.p_false, position=found.position,
                   verdict=reply.text.strip(),
                   error=None if found.score is not None
                   else "the reply names neither True nor False")


def judge_answers(items: Sequence[Item], answers: Sequence[str | BackendError],
                  settings: PTrueSettings, ctx: Context, model: str) -> list[PTrueRecord]:
    """Ask ``model`` about each non-empty answer (one call each, with log-probabilities where
    the backend returns them)."""
    client = ctx.client(model)
    logprobs = client.backend.capabilities.logprobs
    asked = [k for k, a in enumerate(answers) if isinstance(a, str) and a]
    replies = client.generate_each(
        [settings.judge_request(items[k].question, str(answers[k]), logprobs) for k in asked],
        stage="p-true: is it true?")
    found: dict[int, Generation | BackendError] = dict(zip(asked, replies, strict=True))
    return [record_of(item, answer, found.get(k), model)
            for k, (item, answer) in enumerate(zip(items, answers, strict=True))]


def score_greedy(items: Sequence[Item], greedy: Sequence[Generation | BackendError],
                 settings: PTrueSettings, ctx: Context, model: str) -> list[PTrueRecord]:
    """P(True) of given greedy answers: one call per answer to ``model``."""
    if len(greedy) != len(items):
        raise DataError(f"{len(items)} questions but {len(greedy)} greedy answers")
    answers = [g if isinstance(g, BackendError) else g.text.strip() for g in greedy]
    return judge_answers(items, answers, settings, ctx, model)


def score_items(items: Sequence[Item], model: str, settings: PTrueSettings,
                ctx: Context) -> list[PTrueRecord]:
    """Each question's greedy answer, then its P(True)."""
    plain = Sampling(temperature=0.0, max_tokens=settings.max_tokens)
    greedy = ctx.client(model).generate_each([GenRequest.user(i.question, plain) for i in items],
                                             stage="p-true: greedy answers")
    return score_greedy(items, greedy, settings, ctx, model)


def summarise(records: Sequence[PTrueRecord], model: str = "", dataset: str = "",
              settings: PTrueSettings | None = None) -> PTrueSummary:
    """Mean P(True) ± s.e., how each was read, and the histogram."""
    scored = [r for r in records if r.score is not None]
    values = np.asarray([r.score for r in scored], dtype=np.float64)
    moments = MomentSums()
    moments.add(values)
    mean, stderr = moments.mean_stderr()
    counts, edges = np.histogram(values, bins=20, range=(0.0, 1.0))
    return PTrueSummary(
        model, dataset, (settings or PTrueSettings()).describe(), len(records), len(scored),
        len(records) - len(scored), mean, stderr,
        {s: sum(r.source == s for r in scored) for s in ("logprobs", "verdict")},
        Histogram(tuple(float(e) for e in edges), tuple(int(c) for c in counts)))


def run_p_true(items: Sequence[Item], model: str, settings: PTrueSettings, ctx: Context,
               out: Path | None, dataset: str) -> RunResult[PTrueRecord, PTrueSummary]:
    """Score every question; with ``out``, chunk by chunk into that run directory."""
    if not items:
        raise DataError("no questions to score")
    ctx.client(model)  # a bad spec fails before the run directory is written
    return _written(items, lambda chunk: score_items(chunk, model, settings, ctx), settings,
                    out, ctx, model, dataset)


def read_recorded(path: Path) -> Iterator[tuple[Item, str, Generation | None]]:
    """Recorded answers: JSONL with ``prompt`` and ``answer`` per line; optional ``verdict``
    (the model's reply to the True / False question, then no call is made) with
    ``verdict_logprobs`` (its tokens), ``id``, ``references``."""
    for number, row in read_objects(path, "recorded file"):
        where = f"{path}, line {number}"
        for name in ("prompt", "answer"):
            if not isinstance(row.get(name), str):
                raise DataError(f"{where}: field '{name}' must be a string")
        verdict = row.get("verdict")
        if verdict is not None and not isinstance(verdict, str):
            raise DataError(f"{where}: field 'verdict' must be a string")
        tokens = row.get("verdict_logprobs")
        reply = None if verdict is None else Generation(
            verdict, logprobs=None if tokens is None
            else parse_tokens(tokens, f"{where}, 'verdict_logprobs'"))
        refs = row.get("references") or ()
        if not isinstance(refs, list | tuple) or not all(isinstance(r, str) for r in refs):
            raise DataError(f"{where}: 'references' must be a list of strings")
        item = Item(str(row.get("id", f"line-{number}")), row["prompt"], tuple(refs))
        yield item, row["answer"].strip(), reply


def run_recorded(path: Path, model: str | None, settings: PTrueSettings, ctx: Context,
                 out: Path | None) -> RunResult[PTrueRecord, PTrueSummary]:
    """Score recorded answers: their recorded verdicts (no call), or ask ``model``."""
    rows = {item.id: (item, answer, reply) for item, answer, reply in read_recorded(path)}
    if not rows:
        raise DataError(f"{path}: no records")
    missing = [i for i, (_, _, reply) in rows.items() if reply is None]
    if missing and model is None:
        raise DataError(f"{path}: {len(missing)} answers have no recorded 'verdict' (first: "
                        f"{missing[0]}); give --model to ask one")
    name = model or "recorded"

    def score(chunk: Sequence[Item]) -> list[PTrueRecord]:
        given = [r for r in chunk if rows[r.id][2] is not None]
        asked = [r for r in chunk if rows[r.id][2] is None]
        found = {r.id: record_of(r, rows[r.id][1], rows[r.id][2], "recorded") for r in given}
        if asked:
            judged = judge_answers(asked, [rows[r.id][1] for r in asked], settings, ctx, name)
            found |= {r.id: rec for r, rec in zip(asked, judged, strict=True)}
        return [found[r.id] for r in chunk]

    return _written([r[0] for r in rows.values()], score, settings, out, ctx, name,
                    f"recorded:{path}")


def _written(items: Sequence[Item], score: Callable[[Sequence[Item]], list[PTrueRecord]],
             settings: PTrueSettings, out: Path | None, ctx: Context, model: str,
             dataset: str) -> RunResult[PTrueRecord, PTrueSummary]:
    check_target(out)
    config = {"model": model, "dataset": dataset, "settings": settings.describe()}
    kept: Kept[PTrueRecord] = Kept()

    def finish() -> Finish[PTrueSummary]:
        return Finish(summarise(kept, model, dataset, settings), stats=ctx.stats())

    return drive(out, RunPlan("p-true", PTrueRecord, config, ctx.started),
                 (score(chunk) for chunk in chunks(items, CHUNK)), [kept], finish)
