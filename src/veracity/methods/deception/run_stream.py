"""Deception runs in bounded memory. Live: chunks of items answered (normal and misleading at
once, then the retries), each chunk's records appended to samples.jsonl as it finishes.
``score-recorded``: records written as each results file is matched (one results file in
memory at a time). Either way the metrics come from answer counts per subject, so they equal
the whole run's to the last digit; every answer is cached as it arrives, so a live run cut
short in the middle of a chunk resumes with no repeated model call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veracity.backends.base import require
from veracity.client import LLMClient
from veracity.data.mc import DatasetSpec, parse_dataset_spec
from veracity.methods.deception.core import (
    Counts,
    DeceptionSettings,
    answer_items,
    count_pairs,
    metrics_from_counts,
    pairs_from_records,
)
from veracity.methods.deception.recorded import recorded_subjects, subject_records
from veracity.methods.deception.records import DeceptionRecord
from veracity.runs.common import Context
from veracity.runs.result import RunResult
from veracity.runs.streamed import StoredRecords
from veracity.store import RunDir, check_run_target
from veracity.streaming import SampleWriter, chunks, one_bar
from veracity.types import MCItem

LIVE_CHUNK = 256
"""Items per chunk of a live run: a normal and a misleading answer each, sent to the backend at
once (the invalid ones asked again in a second batch)."""


def stream_deception(
    items: Sequence[MCItem], client: LLMClient, dataset: DatasetSpec,
    settings: DeceptionSettings, ctx: Context, out: Path,
    limit_per_subject: int | None = None, chunk_size: int = LIVE_CHUNK,
) -> RunResult[DeceptionRecord]:
    """:func:`veracity.methods.deception.run.run_deception` into ``out``, chunk by chunk: the
    same run directory, holding one chunk's generations and records at a time."""
    check_run_target(out)
    require(client.backend, "prefill", "deception benchmarking")  # before the run directory
    config = {
        "model": client.spec,
        "model_identity": client.backend.identity(),
        "dataset": str(dataset),
        "subjects": sorted({item.subject for item in items}),
        "limit_per_subject": limit_per_subject,
        "n_items": len(items),
        "source": "live",
        "settings": settings.describe(),
        "model_options": ctx.options_record(),
    }
    run = RunDir.create(out, "deception", config, ctx.started)
    by_subject: dict[str, Counts] = {}
    total = Counts()
    # the bar counts first attempts; retries carry it past the total
    with one_bar([client], ctx.progress, "deception: answers", 2 * len(items)), \
            SampleWriter(run.path / "samples.jsonl") as writer:
        for chunk in chunks(items, chunk_size):
            records = answer_items(chunk, client, settings)
            count_pairs(pairs_from_records(records), by_subject, total)
            writer.write(r.to_json() for r in records)
    results = {"method": "deception", "model": client.spec, "dataset": str(dataset),
               "source": "live", "settings": settings.describe(),
               "n_unscored": writer.count - total.n}
    results |= metrics_from_counts(by_subject, total, settings.threshold,
                                   settings.susceptibility)
    run.update_config({"model_options": ctx.options_record()})  # as the backend resolved them
    run.write_results(results)
    run.finish(ctx.stats())
    return RunResult(StoredRecords(run.path / "samples.jsonl", DeceptionRecord, writer.count),
                     results, run)


def stream_deception_recorded(
    results_dir: Path,
    dataset: str | DatasetSpec,
    threshold: float,
    out: Path,
    subjects: Sequence[str] | None = None,
    model: str | None = None,
    susceptibility: str = "pooled",
) -> RunResult[DeceptionRecord]:
    """:func:`veracity.methods.deception.run.run_deception_recorded` into ``out``: the same run
    directory, holding one subject's records at a time."""
    check_run_target(out)
    spec = dataset if isinstance(dataset, DatasetSpec) else parse_dataset_spec(dataset)
    chosen, found, dataset_files = recorded_subjects(results_dir, spec, subjects)
    name = model or results_dir.name
    DeceptionSettings(threshold=threshold, susceptibility=susceptibility)  # checked first
    metrics_from_counts({}, Counts(), threshold, susceptibility)
    recorded = {"threshold": threshold, "susceptibility": susceptibility}
    config = {"model": name, "dataset": str(spec), "source": "recorded",
              "recorded": str(results_dir), "n_items": None,
              "subjects": None, "settings": recorded}
    run = RunDir.create(out, "deception", config)
    by_subject: dict[str, Counts] = {}
    total = Counts()
    n_records = 0
    present: set[str] = set()
    with SampleWriter(run.path / "samples.jsonl") as writer:
        for subject in chosen:
            records = subject_records(spec, subject, found, dataset_files, name)
            count_pairs(pairs_from_records(records), by_subject, total)
            writer.write(r.to_json() for r in records)
            n_records += len(records)
            present.update(r.subject for r in records)
    results = {"method": "deception", "model": name, "dataset": str(spec), "source": "recorded",
               "settings": recorded, "n_unscored": n_records - total.n}
    results |= metrics_from_counts(by_subject, total, threshold, susceptibility)
    run.update_config({"n_items": n_records, "subjects": sorted(present)})
    run.write_results(results)
    run.finish({})
    return RunResult(StoredRecords(run.path / "samples.jsonl", DeceptionRecord, n_records),
                     results, run)
