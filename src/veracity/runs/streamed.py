"""The records of a streamed run, read back from its samples.jsonl only when asked for."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Generic, TypeVar

from veracity.data.jsonl import stream_objects
from veracity.records import Record
from veracity.sequences import LazySequence

R = TypeVar("R", bound=Record)


class StoredRecords(LazySequence[R], Generic[R]):
    """A sequence of typed records backed by a JSONL file: ``records[:25]`` reads 25 lines,
    iterating reads one line at a time, and nothing is kept."""

    def __init__(self, path: Path, kind: type[R], count: int) -> None:
        self.path = path
        self.kind = kind
        self.size = count

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[R]:
        for _, row in stream_objects(self.path, "run file", surrogates=True):
            yield self.kind.from_json(row)

    def _item(self, index: int) -> R:
        return next(islice(iter(self), index, None))

    def _items(self, start: int, stop: int, step: int) -> list[R]:
        if step < 0:  # read forwards, then turn round
            return list(islice(iter(self), stop + 1, start + 1))[::step] if start > stop else []
        return list(islice(iter(self), start, stop, step))
