"""Self-consistency runs in bounded memory: chunks of questions through the greedy answer,
the M samples, the embeddings and the scores, each chunk's records appended to samples.jsonl
as it is scored. The summary is a running one
(:class:`~veracity.methods.consistency.running.RunningConsistency`), equal to the last digit
to the whole run's; every answer is cached as it arrives, so a run cut short in the middle of
a chunk resumes with no repeated model call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veracity.methods.consistency.core import ConsistencySettings
from veracity.methods.consistency.records import ConsistencyRecord
from veracity.methods.consistency.running import RunningConsistency
from veracity.methods.consistency.scored import consistency_records, results_of
from veracity.runs.common import Context
from veracity.runs.result import RunResult
from veracity.runs.streamed import StoredRecords
from veracity.store import RunDir, check_run_target
from veracity.streaming import SampleWriter, chunks, one_bar
from veracity.types import Item

LIVE_CHUNK = 256
"""Questions per chunk: M + 1 generations each, sent to the backend at once."""


def stream_consistency(
    items: Sequence[Item], model: str, embedder: str, settings: ConsistencySettings,
    ctx: Context, out: Path, dataset: str, chunk_size: int = LIVE_CHUNK,
) -> RunResult[ConsistencyRecord]:
    """:func:`veracity.methods.consistency.run.run_consistency` into ``out``, chunk by chunk:
    the same run directory, holding one chunk's answers, vectors and records at a time."""
    check_run_target(out)  # before any model call
    client = ctx.client(model)
    ctx.embedder(embedder)  # a bad spec fails before the run directory is written
    config = {"model": model, "embedder": embedder, "dataset": dataset,
              "settings": settings.describe(), "model_options": ctx.options_record()}
    run = RunDir.create(out, "consistency", config, ctx.started)
    running = RunningConsistency()
    with one_bar([client], ctx.progress, "consistency: answers",
                 len(items) * (settings.m + 1)), \
            SampleWriter(run.path / "samples.jsonl") as writer:
        for chunk in chunks(items, chunk_size):
            records = consistency_records(chunk, model, embedder, settings, ctx)
            running.add(records)
            writer.write(r.to_json() for r in records)
    results = results_of(model, embedder, dataset, settings, running.result())
    run.update_config({"model_options": ctx.options_record()})  # as the backend resolved them
    run.write_results(results)
    run.finish(ctx.stats())
    return RunResult(StoredRecords(run.path / "samples.jsonl", ConsistencyRecord, writer.count),
                     results, run)
