"""Deception runs: live (model) or from recorded answers, into a run directory."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from veracity.backends.base import require
from veracity.data.mc import (
    DatasetSpec,
    load_mc,
    parse_dataset_spec,
    write_db_mmlu_file,
)
from veracity.errors import ConfigError, DataError
from veracity.jsontypes import JsonObject
from veracity.methods.deception.core import (
    Counts,
    DeceptionSettings,
    answer_items,
    count_pairs,
    metrics_from_counts,
    pairs_from_records,
)
from veracity.methods.deception.dataset import (
    OPENING_PREFIX,
    Done,
    Failed,
    MakeSettings,
    Written,
    clean_opening,
    shuffle_within_subjects,
    write_openings,
)
from veracity.methods.deception.recorded import recorded_subjects, subject_records
from veracity.methods.deception.records import DeceptionRecord, DeceptionResults
from veracity.paths import check_output_dir
from veracity.runs.common import Context
from veracity.runs.driver import Finish, RunPlan, check_target, drive
from veracity.runs.result import RunResult
from veracity.store import dumps, package_versions, timestamp, write_jsonl
from veracity.streaming import chunks, one_bar
from veracity.types import MCItem

LIVE_CHUNK = 256
"""Items per chunk of a live run: a normal and a misleading answer each, sent to the backend at
once (the invalid ones asked again in a second batch)."""


class RunningDeception:
    """Answer counts per subject and overall, fed chunk by chunk: the metrics are functions
    of these counts alone, so they equal the whole run's to the last digit."""

    def __init__(self) -> None:
        self.by_subject: dict[str, Counts] = {}
        self.total = Counts()
        self.n_records = 0
        self.subjects: set[str] = set()

    def add(self, records: Sequence[DeceptionRecord]) -> None:
        count_pairs(pairs_from_records(records), self.by_subject, self.total)
        self.n_records += len(records)
        self.subjects.update(r.subject for r in records)

    def results(self, model: str, dataset: str, source: str, settings: Mapping[str, Any],
                threshold: float, susceptibility: str) -> DeceptionResults:
        """The run's summary (results.json): its setup, the unscored count and the paper's
        metrics."""
        return DeceptionResults(model, dataset, source, settings, self.n_records - self.total.n,
                                metrics_from_counts(self.by_subject, self.total, threshold,
                                                    susceptibility).to_json())


@dataclass(frozen=True)
class DeceptionRunConfig:
    """run.json's ``config`` of a live deception run."""

    model: str
    model_identity: JsonObject
    dataset: str
    subjects: list[str]
    limit_per_subject: int | None
    n_items: int
    settings: DeceptionSettings
    model_options: JsonObject

    def to_json(self) -> JsonObject:
        return {"model": self.model, "model_identity": self.model_identity,
                "dataset": self.dataset, "subjects": self.subjects,
                "limit_per_subject": self.limit_per_subject, "n_items": self.n_items,
                "source": "live", "settings": self.settings.describe(),
                "model_options": self.model_options}


@dataclass(frozen=True)
class RecordedDeceptionConfig:
    """run.json's ``config`` of a deception run scored from recorded answers."""

    model: str
    dataset: str
    recorded: str
    """The directory of recorded results."""
    threshold: float
    susceptibility: str
    n_items: int | None = None
    """Known once every subject is read."""
    subjects: list[str] | None = None

    def to_json(self) -> JsonObject:
        return {"model": self.model, "dataset": self.dataset, "source": "recorded",
                "recorded": self.recorded, "n_items": self.n_items, "subjects": self.subjects,
                "settings": {"threshold": self.threshold,
                             "susceptibility": self.susceptibility}}


def run_deception(
    model: str,
    dataset: str | DatasetSpec,
    ctx: Context,
    settings: DeceptionSettings | None = None,
    out: Path | None = None,
    subjects: Sequence[str] | None = None,
    limit_per_subject: int | None = None,
    items: Sequence[MCItem] | None = None,
    chunk_size: int = LIVE_CHUNK,
) -> RunResult[DeceptionRecord, DeceptionResults]:
    """Benchmark a model on a deception dataset, ``chunk_size`` items at a time (records into
    ``out``, appended as each chunk finishes, or a list; metrics from counts per subject).
    Every generation goes through the cache, so a rerun makes no model call and an
    interrupted run resumes where it stopped, with no repeated call."""
    check_target(out)  # before any model call
    settings = settings or DeceptionSettings()
    spec = dataset if isinstance(dataset, DatasetSpec) else parse_dataset_spec(dataset)
    if items is None:
        items = load_mc(spec, subjects, limit_per_subject)
    missing = (item.id for item in items if not item.misleading_start)  # one pass, no list
    first = next(missing, None)
    if first is not None:
        raise DataError(
            f"dataset '{spec}' has {1 + sum(1 for _ in missing)} item(s) without a misleading "
            f"opening (first: {first}); build them with `veracity deception make-dataset`"
        )
    client = ctx.client(model)
    require(client.backend, "prefill", "deception benchmarking")  # before the run directory
    config = DeceptionRunConfig(client.spec, client.backend.identity(), str(spec),
                                sorted({item.subject for item in items}), limit_per_subject,
                                len(items), settings, ctx.options_record())
    running = RunningDeception()
    batches = (answer_items(chunk, client, settings) for chunk in chunks(items, chunk_size))

    def finish() -> Finish[DeceptionResults]:
        return Finish(running.results(client.spec, str(spec), "live", settings.describe(),
                                      settings.threshold, settings.susceptibility),
                      stats=ctx.stats(),  # and the options as the backend resolved them:
                      config=replace(config, model_options=ctx.options_record()))

    # the bar counts first attempts; retries carry it past the total
    with one_bar([client], ctx.progress, "deception: answers", 2 * len(items)):
        return drive(out, RunPlan("deception", DeceptionRecord, config, ctx.started), batches,
                     [running], finish)


def run_deception_recorded(
    results_dir: Path,
    dataset: str | DatasetSpec,
    threshold: float = 0.4,
    out: Path | None = None,
    subjects: Sequence[str] | None = None,
    model: str | None = None,
    susceptibility: str = "pooled",
) -> RunResult[DeceptionRecord, DeceptionResults]:
    """Score results recorded elsewhere (the DB-MMLU authors' CSV format) with no model,
    subject by subject (one results file in memory at a time); ``susceptibility`` names the
    headline formula (both are reported)."""
    check_target(out)
    spec = dataset if isinstance(dataset, DatasetSpec) else parse_dataset_spec(dataset)
    chosen, found, dataset_files = recorded_subjects(results_dir, spec, subjects)
    name = model or results_dir.name
    DeceptionSettings(threshold=threshold, susceptibility=susceptibility)  # checked first
    metrics_from_counts({}, Counts(), threshold, susceptibility)
    recorded = {"threshold": threshold, "susceptibility": susceptibility}
    config = RecordedDeceptionConfig(name, str(spec), str(results_dir), threshold,
                                     susceptibility)
    running = RunningDeception()
    batches = (subject_records(spec, subject, found, dataset_files, name) for subject in chosen)

    def finish() -> Finish[DeceptionResults]:
        return Finish(running.results(name, str(spec), "recorded", recorded, threshold,
                                      susceptibility),
                      config=replace(config, n_items=running.n_records,
                                     subjects=sorted(running.subjects)))

    return drive(out, RunPlan("deception", DeceptionRecord, config), batches, [running], finish)


@dataclass
class MadeDataset:
    """What make-dataset wrote: counts per subject, and the items that failed."""

    out: Path
    summary: dict[str, Any]
    failed: list[Failed]


JOURNAL = "progress.jsonl"
"""Questions finished so far, appended batch by batch: a rerun resumes from it."""
TO_COMPLETE = "to_complete.csv"
"""Questions no valid opening was written for, to complete by hand (then rerun)."""
_TO_COMPLETE_HEADER = ["source_id", "subject", "target", "question", "A", "B", "C", "D",
                       "answer", "misleading_start"]


def _read_journal(out: Path, fingerprint: str) -> dict[str, Done]:
    """Finished questions of an earlier (interrupted) build with the same settings and model."""
    path = out / JOURNAL
    done: dict[str, Done] = {}
    if not path.is_file():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:  # a line cut off by the interruption
            continue
        if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprint:
            continue
        fields = (entry.get("source_id"), entry.get("target"), entry.get("mistake"),
                  entry.get("misleading_start"))
        if all(isinstance(f, str) and f for f in fields):
            done[entry["source_id"]] = Done(entry["target"], entry["mistake"],
                                            entry["misleading_start"], int(entry.get("attempts") or 1))
    return done


def _journal(out: Path, fingerprint: str) -> Callable[[list[Written]], None]:
    def append(written: list[Written]) -> None:
        with (out / JOURNAL).open("a", encoding="utf-8") as fh:
            for w in written:
                fh.write(dumps({"fingerprint": fingerprint, "source_id": w.item.id,
                                "target": w.target, "mistake": w.mistake,
                                "misleading_start": w.misleading_start,
                                "attempts": w.attempts}) + "\n")
            fh.flush()
    return append


def read_completed(path: Path) -> dict[str, Done]:
    """Openings written by hand into ``to_complete.csv`` (rows whose misleading_start says
    more than "Let's reason step by step.")."""
    done: dict[str, Done] = {}
    if not path.is_file():
        return done
    try:
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"), newline="")))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: cannot read the hand-completed questions ({exc})") from None
    if not rows or rows[0] != _TO_COMPLETE_HEADER:
        raise DataError(f"{path}: expected the header {','.join(_TO_COMPLETE_HEADER)}")
    for number, row in enumerate(rows[1:], 2):
        if len(row) != len(_TO_COMPLETE_HEADER):
            raise DataError(f"{path}, row {number}: expected {len(_TO_COMPLETE_HEADER)} cells")
        record = dict(zip(_TO_COMPLETE_HEADER, row, strict=True))
        opening = clean_opening(record["misleading_start"])
        if opening:
            done[record["source_id"]] = Done(record["target"].strip(), "(written by hand)",
                                             OPENING_PREFIX + opening, 0)
    return done


def _write_to_complete(path: Path, failed: Sequence[Failed]) -> None:
    if not failed:
        path.unlink(missing_ok=True)
        return
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(_TO_COMPLETE_HEADER)
        for f in failed:
            writer.writerow([f.item.id, f.item.subject, f.target, f.item.question,
                             *f.item.options, f.item.answer, OPENING_PREFIX])


def make_dataset(
    model: str,
    source: str | DatasetSpec,
    out: Path,
    ctx: Context,
    settings: MakeSettings | None = None,
    subjects: Sequence[str] | None = None,
    limit_per_subject: int | None = None,
) -> MadeDataset:
    """Write a DB-MMLU-format dataset (``<subject>.csv``) with generated misleading openings.

    The paper's construction (§3.1): the splits of an MMLU directory merged per subject, the
    questions shuffled within each subject (seeded), worked examples and batches per request,
    a wrong option drawn at random per question. Side files: ``targets.jsonl`` (per written
    row: the targeted wrong option, the named mistake, the source item), ``failures.jsonl``
    and ``to_complete.csv`` (questions with no valid opening after all retries; fill in their
    misleading_start by hand and rerun), ``progress.jsonl`` (the journal an interrupted build
    resumes from) and ``dataset.json`` (model, settings, counts).
    """
    settings = settings or MakeSettings()
    spec = source if isinstance(source, DatasetSpec) else parse_dataset_spec(source)
    _check_out(out, spec)
    loaded = load_mc(spec, subjects, limit_per_subject)
    items = shuffle_within_subjects(loaded, settings.seed) if settings.shuffle else loaded
    client = ctx.client(model)
    files = {subject: subject_file(subject) for subject in {item.subject for item in items}}
    owners: dict[str, str] = {}
    for subject, name in sorted(files.items()):
        if owners.setdefault(name, subject) != subject:
            raise ConfigError(f"subjects '{owners[name]}' and '{subject}' would both be written "
                              f"to {name}")
    out.mkdir(parents=True, exist_ok=True)
    fingerprint = settings.fingerprint(client.spec)
    resumed = _read_journal(out, fingerprint)
    by_hand = read_completed(out / TO_COMPLETE)
    written, failed = write_openings(items, client, settings, {**resumed, **by_hand},
                                     _journal(out, fingerprint))
    _remove_previous(out)
    by_subject: dict[str, list[Written]] = {}
    for w in written:
        by_subject.setdefault(w.item.subject, []).append(w)
    targets: list[dict[str, Any]] = []
    done: list[Path] = []
    try:
        for original, rows in by_subject.items():
            subject = files[original].removesuffix(".csv")  # what `run` will read it as
            made = [replace(w.item, id=f"{subject}/{row}", misleading_start=w.misleading_start)
                    for row, w in enumerate(rows, 1)]
            write_db_mmlu_file(out / files[original], made)
            done.append(out / files[original])
            targets.extend(
                {"id": m.id, "subject": subject, "row": row, "source_id": w.item.id,
                 "answer": m.answer, "target": w.target, "mistake": w.mistake,
                 "attempts": w.attempts}
                for row, (m, w) in enumerate(zip(made, rows, strict=True), 1)
            )
    except OSError as exc:  # no partial dataset: it would block the rerun
        for path in done:
            path.unlink(missing_ok=True)
        raise DataError(f"{out}: cannot write the dataset ({exc.strerror or exc})") from None
    write_jsonl(out / "targets.jsonl", targets)
    write_jsonl(out / "failures.jsonl", [
        {"source_id": f.item.id, "subject": f.item.subject, "target": f.target,
         "errors": list(f.errors)} for f in failed
    ])
    _write_to_complete(out / TO_COMPLETE, failed)
    ids = {item.id for item in items}
    summary = {
        "model": client.spec, "input": str(spec), "n_items": len(items),
        "n_written": len(written), "n_failed": len(failed),
        "n_resumed": sum(1 for w in written if w.item.id in resumed and w.attempts > 0),
        "n_by_hand": sum(1 for w in written if w.attempts == 0),
        "order": (f"shuffled within each subject (seed {settings.seed})" if settings.shuffle
                  else "as read"),
        "splits": sorted({i.split("/")[1] for i in ids if i.count("/") == 2}),
        "per_subject": {s: len(r) for s, r in sorted(by_subject.items())},
        "files": sorted(files[s] for s in by_subject),
        "settings": settings.describe(), "versions": package_versions(),
        "created": timestamp(),
    }
    (out / "dataset.json").write_text(dumps(summary, indent=2) + "\n", encoding="utf-8")
    return MadeDataset(out, summary, failed)


_MAX_STEM = 100
"""Characters of a subject file name (file systems allow 255 bytes)."""


def subject_file(subject: str) -> str:
    """``<subject>.csv``, with anything that could leave the directory replaced; a long
    subject is cut and given a hash of the whole name, so files stay distinct."""
    stem = re.sub(r"[^A-Za-z0-9._ -]+", "_", subject).strip(" .") or "subject"
    if len(stem) > _MAX_STEM:
        digest = hashlib.sha256(subject.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        stem = f"{stem[:_MAX_STEM - 11].rstrip(' .')}-{digest}"
    return stem + ".csv"


def _check_out(out: Path, source: DatasetSpec) -> None:
    """Refuse to overwrite the input, or CSV files that make-dataset did not write."""
    check_output_dir(out)
    if out.resolve() == source.path.resolve():
        raise ConfigError(f"--out {out} would overwrite the input {source.path}: pick another")
    if any(out.glob("*.csv*")) and not (out / "dataset.json").is_file():
        raise ConfigError(f"--out {out} holds CSV files that make-dataset did not write: "
                          "pick an empty or new directory")


def _remove_previous(out: Path) -> None:
    """A rebuild replaces the dataset: subject files of an earlier make-dataset go."""
    summary = out / "dataset.json"
    if not summary.is_file():
        return
    try:
        previous = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        previous = {}
    if not isinstance(previous, dict):
        previous = {}
    names = previous.get("files") or [subject_file(str(s)) for s in previous.get("per_subject", {})]
    for name in names if isinstance(names, list) else []:
        if isinstance(name, str) and name and Path(name).name == name:  # a bare name in out
            (out / name).unlink(missing_ok=True)
    summary.unlink()
