"""A self-consistency run: sample M answers per question at T > 0 and score their agreement
with the greedy answer; and its validation against reference answers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from veracity.correctness import Labelled, Verdict, label_answers
from veracity.errors import DataError
from veracity.jsontypes import JsonObject
from veracity.methods.consistency.core import ConsistencySettings
from veracity.methods.consistency.records import ConsistencyRecord, ConsistencySummary
from veracity.methods.consistency.running import RunningConsistency, ScoreFigures
from veracity.methods.consistency.scored import consistency_records, results_of
from veracity.runs.common import Context
from veracity.runs.driver import Finish, RunPlan, check_target, drive
from veracity.runs.result import RunResult
from veracity.stats import auroc, bootstrap_aurocs, percentile_ci
from veracity.store import VALIDATION_FILE, RunDir
from veracity.streaming import chunks, one_bar
from veracity.types import Item

LIVE_CHUNK = 256
"""Questions per chunk: M + 1 generations each, sent to the backend at once."""


def summarise(records: Sequence[ConsistencyRecord]) -> ScoreFigures:
    """Mean score with its standard error, the unscored items and the score histogram (exact
    sums: the same digits as a run summed chunk by chunk)."""
    running = RunningConsistency()
    running.add(records)
    return running.result()


@dataclass(frozen=True)
class ConsistencyRunConfig:
    """run.json's ``config`` of a self-consistency run."""

    model: str
    embedder: str
    dataset: str
    settings: ConsistencySettings
    model_options: JsonObject

    def to_json(self) -> JsonObject:
        return {"model": self.model, "embedder": self.embedder, "dataset": self.dataset,
                "settings": self.settings.describe(), "model_options": self.model_options}


def run_consistency(items: Sequence[Item], model: str, embedder: str,
                    settings: ConsistencySettings, ctx: Context, out: Path | None,
                    dataset: str, chunk_size: int = LIVE_CHUNK,
                    ) -> RunResult[ConsistencyRecord, ConsistencySummary]:
    """Score every question, chunk by chunk: the greedy answer, the M samples, their vectors
    and the scores of ``chunk_size`` questions at a time, the records into ``out`` (appended
    as each chunk is scored) or a list; the summary is a running one, equal to the last digit
    whatever the chunks. Every answer is cached as it arrives, so a run cut short in the
    middle of a chunk resumes with no repeated model call."""
    if not items:
        raise DataError("no questions to score")
    check_target(out)  # before any model call
    client = ctx.client(model)
    ctx.embedder(embedder)  # a bad spec fails before the run directory is written
    config = ConsistencyRunConfig(model, embedder, dataset, settings, ctx.options_record())
    running = RunningConsistency()
    batches = (consistency_records(chunk, model, embedder, settings, ctx)
               for chunk in chunks(items, chunk_size))

    def finish() -> Finish[ConsistencySummary]:
        return Finish(results_of(model, embedder, dataset, settings, running.result()),
                      stats=ctx.stats(),  # and the options as the backend resolved them:
                      config=replace(config, model_options=ctx.options_record()))

    with one_bar([client], ctx.progress, "consistency: answers",
                 len(items) * (settings.m + 1)):
        return drive(out, RunPlan("consistency", ConsistencyRecord, config, ctx.started),
                     batches, [running], finish)


@dataclass(frozen=True)
class FlagAuroc:
    """AUROC of 1 - score for flagging the wrong answers, with its bootstrap interval."""

    auroc: float
    ci: tuple[float, float]
    n: int
    n_incorrect: int

    def to_json(self) -> JsonObject:
        return {"auroc": self.auroc, "ci": list(self.ci), "n": self.n,
                "n_incorrect": self.n_incorrect}


@dataclass(frozen=True)
class LabelledScore:
    """One labelled question: its score and its verdict."""

    id: str
    score: float | None
    verdict: Verdict

    def to_json(self) -> JsonObject:
        return {"id": self.id, "score": self.score, "correct": self.verdict.correct,
                "rule": self.verdict.rule}


@dataclass(frozen=True)
class ConsistencyValidation:
    """What ``validate consistency`` finds; validation.json is its ``to_json()``."""

    run: str
    judge: str | None
    endpoints_from_run: list[str]
    """Endpoints taken from the run's own record, as lines to show."""
    n_items: int
    n_labelled: int
    accuracy: float
    auroc: FlagAuroc
    items: tuple[LabelledScore, ...]
    stats: dict[str, Any]

    def to_json(self) -> JsonObject:
        return {"method": "validate-consistency", "run": self.run, "judge": self.judge,
                "endpoints_from_run": self.endpoints_from_run, "n_items": self.n_items,
                "n_labelled": self.n_labelled, "accuracy": self.accuracy,
                "auroc": self.auroc.to_json(), "items": [i.to_json() for i in self.items],
                "stats": self.stats}


def validate_consistency(path: Path, ctx: Context, judge: str | None = None,
                         resamples: int = 2000, seed: int = 0,
                         level: float = 0.95) -> ConsistencyValidation:
    """Label each greedy answer against its references (or by a judge) and report the AUROC
    of 1 - score for flagging the wrong ones; written to the run's validation.json."""
    run = RunDir.open(path)
    if run.method != "consistency":
        raise DataError(f"{path} is a {run.method} run, not a consistency run")
    records = [ConsistencyRecord.from_json(r) for r in run.samples()]
    items = [Labelled(r.prompt, r.answer, r.references) for r in records]
    endpoints = ctx.reuse_endpoints(run.info.get("config", {}), (),
                                    (records[0].embedder,) if records else ())
    embedder = ctx.embedder(records[0].embedder) if records else None
    verdicts = label_answers(items, embedder=embedder,
                             judge=ctx.client(judge) if judge else None)
    kept = [k for k, (r, v) in enumerate(zip(records, verdicts, strict=True))
            if v.correct is not None and r.score is not None]
    if not kept:
        raise DataError(f"{path}: no answer could be labelled (no reference answers: "
                        "use --judge MODEL)")
    flags = [1.0 - float(records[k].score) for k in kept]  # type: ignore[arg-type]
    incorrect = [not verdicts[k].correct for k in kept]
    boot = bootstrap_aurocs([np.array(flags)], incorrect, resamples, seed)
    low, high = percentile_ci(boot[:, 0], level)
    results = ConsistencyValidation(
        str(path), judge, endpoints, len(records), len(kept),
        float(np.mean([not x for x in incorrect])),
        FlagAuroc(auroc(flags, incorrect), (low, high), len(kept), int(sum(incorrect))),
        tuple(LabelledScore(records[k].id, records[k].score, verdicts[k]) for k in kept),
        ctx.stats())
    run.write_json(VALIDATION_FILE, results.to_json())
    return results
