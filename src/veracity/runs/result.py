"""What every run returns, and the one place a run directory is written."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from veracity.records import Record
from veracity.store import RunDir

R = TypeVar("R", bound=Record)


@dataclass(frozen=True)
class RunResult(Generic[R]):
    """A run's typed per-item records, its aggregates (results.json), and the run directory
    if one was written."""

    records: Sequence[R]
    """A tuple, or for a streamed run its samples.jsonl read back on demand."""
    results: dict[str, Any]
    run: RunDir | None

    def records_json(self) -> list[dict[str, Any]]:
        """The records as samples.jsonl holds them."""
        return [record.to_json() for record in self.records]


def save_run(
    out: Path | None,
    method: str,
    config: dict[str, Any],
    records: Sequence[R],
    results: dict[str, Any],
    started: str | None = None,
    stats: dict[str, Any] | None = None,
    files: Mapping[str, Iterable[dict[str, Any]]] | None = None,
) -> RunResult[R]:
    """Write run.json, samples.jsonl, any side ``files`` (JSONL, by name), results.json and
    the finish time into ``out`` (nothing when None); the run's result either way."""
    if out is None:
        return RunResult(tuple(records), results, None)
    run = RunDir.create(out, method, config, started)
    run.write_samples(record.to_json() for record in records)
    for name, rows in (files or {}).items():
        run.write_jsonl(name, rows)
    run.write_results(results)
    run.finish(stats or {})
    return RunResult(tuple(records), results, run)
