"""``deception score-recorded`` subject by subject: records written as each results file is
matched, the metrics from counts per subject (one results file in memory at a time)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veracity.data.mc import DatasetSpec, parse_dataset_spec
from veracity.methods.deception.core import (
    Counts,
    DeceptionSettings,
    count_pairs,
    metrics_from_counts,
    pairs_from_records,
)
from veracity.methods.deception.recorded import recorded_subjects, subject_records
from veracity.methods.deception.records import DeceptionRecord
from veracity.runs.result import RunResult
from veracity.runs.streamed import StoredRecords
from veracity.store import RunDir, check_run_target
from veracity.streaming import SampleWriter


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
