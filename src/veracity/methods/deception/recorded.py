"""Results recorded elsewhere (the DB-MMLU authors' CSV format), matched subject by subject
against the dataset they answered."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veracity.data.mc import (
    DatasetSpec,
    load_mc,
    match_recorded,
    read_recorded_file,
    recorded_files,
    subject_files,
)
from veracity.errors import DataError
from veracity.methods.deception.records import DeceptionAnswer, DeceptionRecord


def recorded_subjects(
    results_dir: Path, spec: DatasetSpec, subjects: Sequence[str] | None
) -> tuple[list[str], dict[str, Path], dict[str, Path]]:
    """(subjects to score, results file per subject, dataset file per subject), checked."""
    if spec.kind != "db-mmlu":
        raise DataError("recorded results are matched against a db-mmlu:DIR dataset")
    found = recorded_files(results_dir)
    dataset_files = subject_files(spec.path)
    chosen = list(dict.fromkeys(subjects)) if subjects is not None else sorted(found)
    absent = [s for s in chosen if s not in found]
    if absent:
        raise DataError(f"{results_dir}: no results file for subject(s) {', '.join(absent)}")
    return chosen, found, dataset_files


def subject_records(spec: DatasetSpec, subject: str, found: dict[str, Path],
                    dataset_files: dict[str, Path], name: str) -> list[DeceptionRecord]:
    """One subject's recorded results matched against its dataset file, row by row."""
    if subject not in dataset_files:
        raise DataError(f"{found[subject]}: the dataset {spec.path} has no file {subject}.csv")
    items = load_mc(spec, [subject])
    rows = read_recorded_file(found[subject])
    match_recorded(items, rows, found[subject], dataset_files[subject])
    return [DeceptionRecord(
        item.id, item.subject, item.question, tuple(item.options), item.answer,
        item.misleading_start, name,
        DeceptionAnswer(row.normal_answer, row.normal_reasoning),
        DeceptionAnswer(row.misleading_answer, row.misleading_reasoning),
    ) for item, row in zip(items, rows, strict=True)]
