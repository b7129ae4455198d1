"""What every run returns: its typed records, its typed summary (results.json is written from
it), and the run directory if one was written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from veracity.jsontypes import JsonObject
from veracity.records import Record
from veracity.store import RunDir

R = TypeVar("R", bound=Record)


class Summary(Protocol):
    """A method's summary of a run: results.json is its ``to_json()``."""

    def to_json(self) -> JsonObject: ...


S = TypeVar("S", bound=Summary)


@dataclass(frozen=True)
class Results:
    """The summary of a method that does not type its own yet: results.json as a dict."""

    data: JsonObject

    def to_json(self) -> JsonObject:
        return self.data


@dataclass(frozen=True)
class RunResult(Generic[R, S]):
    """A run's typed per-item records, its typed summary, and the run directory if one was
    written."""

    records: Sequence[R]
    """A tuple, or for a run written to a directory its samples.jsonl read back on demand."""
    summary: S
    """The method's summary; results.json is ``summary.to_json()``."""
    run: RunDir | None

    @property
    def results(self) -> JsonObject:
        """results.json as a dict (for JSON output; read the fields from ``summary``)."""
        return self.summary.to_json()

    def records_json(self) -> list[JsonObject]:
        """The records as samples.jsonl holds them."""
        return [record.to_json() for record in self.records]
