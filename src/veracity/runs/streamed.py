"""The records of a streamed run, read back from its samples.jsonl only when asked for."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Generic, TypeVar, overload

from veracity.data.jsonl import stream_objects
from veracity.records import Record

R = TypeVar("R", bound=Record)


class StoredRecords(Sequence[R], Generic[R]):
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

    @overload
    def __getitem__(self, index: int) -> R: ...

    @overload
    def __getitem__(self, index: slice) -> list[R]: ...

    def __getitem__(self, index: int | slice) -> R | list[R]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self.size)
            return list(islice(iter(self), start, stop, step))
        position = index + self.size if index < 0 else index
        if not 0 <= position < self.size:
            raise IndexError("record index out of range")
        return next(islice(iter(self), position, None))
