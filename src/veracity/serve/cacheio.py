"""The gateway's cache traffic: writes batched off the event loop, reads on a connection of
their own.

Writes (generations, embeddings) are queued and written in batches by a worker thread. A read
of one answer's few generations is an indexed lookup of tens of microseconds on its own
connection (SQLite's WAL mode lets it read while the writer writes): cheaper on the event loop
than the thread hop that would carry it. Generations still waiting in the queue are read from
memory, so a repeated request never asks the upstream again for an answer it already has.
Only real answers are ever handed to :meth:`CacheIO.save_generations`: the scorer drops errors
and empty replies first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from veracity.cache import Cache
from veracity.client import GENERATIONS
from veracity.embed.base import Matrix
from veracity.jsontypes import JsonObject
from veracity.serve.batching import BatchWriter
from veracity.types import Generation

Write = tuple[str, str, dict[str, Any]]
"""(kind, spec, {key: value}) of one queued cache write."""


class CacheIO:
    """Batched reads of generations and batched writes of generations and embeddings."""

    def __init__(self, cache: Cache | None) -> None:
        self.cache = cache
        self._reader = None if cache is None else Cache(cache.path)
        self._writes: BatchWriter[Write] = BatchWriter(
            None if cache is None else self._write, "cache entries")
        self._pending: dict[str, Generation] = {}

    def start(self) -> None:
        self._writes.start()

    def generations(self, keys: Sequence[str]) -> dict[str, Generation]:
        """The cached generations among ``keys``."""
        if self._reader is None or not keys:
            return {}
        queued = {k: self._pending[k] for k in keys if k in self._pending}
        stored = self._reader.get_json([k for k in keys if k not in queued])
        return queued | {k: GENERATIONS.load(v) for k, v in stored.items()}

    def save_generations(self, spec: str, items: Mapping[str, Generation]) -> None:
        if items and self.cache is not None:
            self._pending.update(items)
            self._writes.put(("generation", spec, {k: _stored(g) for k, g in items.items()}))

    def save_vectors(self, spec: str, items: Mapping[str, Matrix]) -> None:
        if items:
            self._writes.put(("embedding", spec, dict(items)))

    def _write(self, writes: list[Write]) -> None:
        assert self.cache is not None
        merged: dict[tuple[str, str], dict[str, Any]] = {}
        for kind, spec, items in writes:
            merged.setdefault((kind, spec), {}).update(items)
        for (kind, spec), items in merged.items():
            if kind == "embedding":
                self.cache.put_vectors(spec, items)
            else:
                self.cache.put_json(kind, spec, items)
                for key in items:
                    self._pending.pop(key, None)

    async def aclose(self) -> None:
        """Write what is queued; close the reading connection."""
        await self._writes.close()
        if self._reader is not None:
            self._reader.close()


def _stored(generation: Generation) -> JsonObject:
    """A generation as the project's client caches it."""
    stored: dict[str, Any] = GENERATIONS.dump(generation)
    return stored
