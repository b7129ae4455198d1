"""What every run returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
