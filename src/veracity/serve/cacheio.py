"""The gateway's cache traffic, batched across concurrent scores and kept off the event loop.

Reads of cached generations wait for one SQLite query shared by every score that asked
meanwhile; writes (generations, embeddings) are queued and written in batches. Only real
answers are ever handed to :meth:`CacheIO.save_generations`: the scorer drops errors and
empty replies first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from veracity.cache import Cache
from veracity.embed.base import Matrix
from veracity.serve.batching import BatchWriter, MicroBatcher
from veracity.types import Generation

Write = tuple[str, str, dict[str, Any]]
"""(kind, spec, {key: value}) of one queued cache write."""


class CacheIO:
    """Batched reads of generations and batched writes of generations and embeddings."""

    def __init__(self, cache: Cache | None) -> None:
        self.cache = cache
        self._reads: MicroBatcher[list[str], dict[str, Any]] = MicroBatcher(self._read)
        self._writes: BatchWriter[Write] = BatchWriter(
            None if cache is None else self._write, "cache entries")

    def start(self) -> None:
        if self.cache is not None:
            self._reads.start()
        self._writes.start()

    async def generations(self, keys: Sequence[str]) -> dict[str, Generation]:
        """The cached generations among ``keys``."""
        if self.cache is None or not keys:
            return {}
        found = await self._reads(list(keys))
        return {k: Generation(**v) for k, v in found.items()}

    def save_generations(self, spec: str, items: Mapping[str, Generation]) -> None:
        if items:
            self._writes.put(("generation", spec, {k: _stored(g) for k, g in items.items()}))

    def save_vectors(self, spec: str, items: Mapping[str, Matrix]) -> None:
        if items:
            self._writes.put(("embedding", spec, dict(items)))

    def _read(self, groups: list[list[str]]) -> list[dict[str, Any]]:
        assert self.cache is not None
        found = self.cache.get_json([k for keys in groups for k in keys])
        return [{k: found[k] for k in keys if k in found} for keys in groups]

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

    async def aclose(self) -> None:
        """Stop reading; write what is queued."""
        await self._reads.aclose()
        await self._writes.close()


def _stored(generation: Generation) -> dict[str, Any]:
    """A generation as the project's client caches it (``replaced_chars`` only when set)."""
    value = asdict(generation)
    if not value.get("replaced_chars"):
        value.pop("replaced_chars", None)
    return value
