"""The one path every run takes: the method scores chunk after chunk, the driver keeps the
records and feeds the method's running summary, and at the end the summary becomes the run's
results.

Where the records go is the only thing ``out`` decides: a list in memory, or samples.jsonl of
a run directory, appended and flushed chunk by chunk (an interrupted run leaves every
finished chunk on disk; every model call is cached as it arrives, so a rerun makes exactly the
missing calls). Either way the records and the results are the same: the summaries are exact
running sums, so the chunks do not change a digit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from veracity.heap import frozen_heap
from veracity.jsontypes import JsonObject, JsonValue
from veracity.records import Record
from veracity.runs.config import RunConfig
from veracity.runs.result import Results, RunResult, S
from veracity.runs.streamed import StoredRecords
from veracity.store import RunDir, check_run_target
from veracity.streaming import SampleWriter

R = TypeVar("R", bound=Record)
R_contra = TypeVar("R_contra", bound=Record, contravariant=True)


class Tally(Protocol[R_contra]):
    """A method's running summary: fed each chunk of records as it is scored."""

    def add(self, records: Sequence[R_contra]) -> None: ...


class Kept(list[R]):
    """A tally that keeps every record, for a summary that needs them all at once."""

    def add(self, records: Sequence[R]) -> None:
        self.extend(records)


@dataclass(frozen=True)
class RunPlan(Generic[R]):
    """What the driver needs to know of a run before its first chunk."""

    method: str
    """run.json's ``method``."""
    kind: type[R]
    """The records' type (to read samples.jsonl back)."""
    config: RunConfig | Mapping[str, Any]
    """run.json's ``config`` as known before the run (``Finish.config`` replaces it at the end);
    a mapping for a method whose config is not typed yet."""
    started: str | None = None
    """When the run began (default: when its directory is made)."""
    side_files: tuple[str, ...] = ()
    """JSONL files beside samples.jsonl that grow chunk by chunk (``side`` gives their rows)."""
    side: Callable[[Sequence[R]], Mapping[str, Sequence[Mapping[str, JsonValue]]]] | None = None
    """A chunk's rows of each side file (a run kept in memory has no side files)."""


@dataclass(frozen=True)
class Finish(Generic[S]):
    """What the driver writes once every chunk is scored."""

    summary: S
    """The method's summary: results.json is its ``to_json()``."""
    late_config: Mapping[str, Any] = field(default_factory=dict)
    """run.json config values only known at the end (e.g. options as the backend resolved
    them), for a method whose config is not typed yet."""
    stats: Mapping[str, JsonValue] = field(default_factory=dict)
    """Call statistics for run.json."""
    files: Mapping[str, Iterable[Mapping[str, JsonValue]]] = field(default_factory=dict)
    """Side files (JSONL, by name) written beside samples.jsonl."""
    exports: Callable[[RunDir], None] | None = None
    """Writes files made from the whole run into its directory (e.g. a fine-tuning set);
    a run kept in memory has none."""
    config: RunConfig | None = None
    """run.json's ``config`` as finally known (the plan's, with the values only known at
    the end replaced)."""


class _Sink(Protocol[R]):
    def write(self, records: Sequence[R]) -> None: ...

    def abandon(self) -> None: ...

    def close(self, finish: Finish[S]) -> RunResult[R, S]: ...


class _Memory(Generic[R]):
    """Records kept in a list."""

    def __init__(self) -> None:
        self.records: list[R] = []

    def write(self, records: Sequence[R]) -> None:
        self.records.extend(records)

    def abandon(self) -> None:
        self.records.clear()

    def close(self, finish: Finish[S]) -> RunResult[R, S]:
        return RunResult(tuple(self.records), finish.summary, None)


class _Directory(Generic[R]):
    """Records appended to samples.jsonl of a run directory, chunk by chunk."""

    def __init__(self, out: Path, plan: RunPlan[R]) -> None:
        self.kind = plan.kind
        self.side = plan.side
        self.run = RunDir.create(out, plan.method, config_json(plan.config), plan.started)
        self.writer = SampleWriter(self.run.path / "samples.jsonl").__enter__()
        self.sides = {name: SampleWriter(self.run.record(name)).__enter__()
                      for name in plan.side_files}

    def write(self, records: Sequence[R]) -> None:
        self.writer.write(r.to_json() for r in records)
        if self.side is not None:
            rows = self.side(records)
            for name, writer in self.sides.items():
                writer.write(rows.get(name, []))

    def abandon(self) -> None:
        for writer in (self.writer, *self.sides.values()):
            writer.__exit__(None, None, None)

    def close(self, finish: Finish[S]) -> RunResult[R, S]:
        self.abandon()  # every record file complete: closed
        for name, rows in finish.files.items():
            self.run.write_jsonl(name, rows)
        if finish.exports is not None:
            finish.exports(self.run)
        if finish.config is not None:
            self.run.update_config(finish.config.to_json())
        if finish.late_config:
            self.run.update_config(dict(finish.late_config))
        self.run.write_results(finish.summary.to_json())
        self.run.finish(dict(finish.stats))
        return RunResult(StoredRecords(self.writer.path, self.kind, self.writer.count),
                         finish.summary, self.run)


def config_json(config: RunConfig | Mapping[str, Any]) -> JsonObject:
    """run.json's ``config`` of a typed config or of a method's mapping."""
    return dict(config) if isinstance(config, Mapping) else config.to_json()


def check_target(out: Path | None) -> None:
    """Refuse a run directory that cannot be written, before any model call."""
    if out is not None:
        check_run_target(out)


def drive(out: Path | None, plan: RunPlan[R], batches: Iterable[Sequence[R]],
          tallies: Sequence[Tally[R]], finish: Callable[[], Finish[S]]) -> RunResult[R, S]:
    """Score ``batches`` (a lazy iterable: each chunk is scored when the driver asks for it),
    keep each chunk's records (in ``out`` when given, else in memory) and add them to every
    tally; then ``finish`` gives the summary, written beside the records as results.json."""
    sink: _Sink[R] = _Memory() if out is None else _Directory(out, plan)
    try:
        with frozen_heap():  # what the run holds is not scanned again after every chunk
            for records in batches:
                for tally in tallies:
                    tally.add(records)
                sink.write(records)
    except BaseException:
        sink.abandon()  # a run directory keeps every finished chunk for the rerun
        raise
    return sink.close(finish())


def save_summary(
    out: Path | None,
    method: str,
    config: RunConfig | Mapping[str, Any],
    records: Sequence[R],
    summary: S,
    started: str | None = None,
    stats: Mapping[str, JsonValue] | None = None,
    files: Mapping[str, Iterable[Mapping[str, JsonValue]]] | None = None,
) -> RunResult[R, S]:
    """A run scored in one piece (a search, a table) through the driver, as one chunk: run.json,
    samples.jsonl, any side ``files``, results.json (``summary.to_json()``) and the finish time
    into ``out`` (nothing when None); the run's result either way."""
    plan: RunPlan[Record] = RunPlan(method, Record, config, started)
    whole: list[Sequence[Record]] = [records]
    outcome = drive(out, plan, whole, [],
                    lambda: Finish(summary, stats=stats or {}, files=files or {}))
    return RunResult(tuple(records), outcome.summary, outcome.run)  # as given, not read back


def save_run(
    out: Path | None,
    method: str,
    config: RunConfig | Mapping[str, Any],
    records: Sequence[R],
    results: JsonObject,
    started: str | None = None,
    stats: Mapping[str, JsonValue] | None = None,
    files: Mapping[str, Iterable[Mapping[str, JsonValue]]] | None = None,
) -> RunResult[R, Results]:
    """:func:`save_summary` of a summary that is not typed yet (results.json as a dict)."""
    return save_summary(out, method, config, records, Results(results), started, stats, files)
