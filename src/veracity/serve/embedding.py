"""One embedder for the whole gateway: the texts of all concurrent scores in one batch.

Embedders hold models that are not thread-safe and are far faster on one batch of 40 texts
than on ten batches of 4, so every score hands its texts to :class:`EmbedWorker`, whose single
worker takes everything pending, looks it up in a small memory and the cache, embeds the rest
in one call and queues the new vectors for the cache.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

import numpy as np

from veracity.cache import Cache
from veracity.client import embedding_key
from veracity.embed.base import Embedder, Matrix
from veracity.jsontypes import JsonObject
from veracity.serve.batching import MicroBatcher
from veracity.serve.cacheio import CacheIO

MEMORY = 4096
"""Vectors kept in memory (recent answers repeat: the same question, the same stable answer)."""


class EmbedWorker:
    """``await worker.embed(texts)``: a (len(texts), d) float32 matrix."""

    def __init__(self, embedder: Embedder, cache: Cache | None, io: CacheIO,
                 memory: int = MEMORY) -> None:
        self.embedder = embedder
        self.spec = embedder.spec
        self._identity = embedder.identity()
        self._cache = cache
        self._io = io
        self._memory: OrderedDict[str, Matrix] = OrderedDict()
        self._size = memory
        self._fresh: deque[dict[str, Matrix]] = deque()
        self._batcher: MicroBatcher[list[str], Matrix] = MicroBatcher(self._embed_groups)

    def identity(self) -> JsonObject:
        return self._identity

    def start(self) -> None:
        self._batcher.start()

    async def embed(self, texts: Sequence[str]) -> Matrix:
        matrix = await self._batcher(list(texts))
        while self._fresh:  # queued for the cache from the loop, where the writer lives
            self._io.save_vectors(self.spec, self._fresh.popleft())
        return matrix

    def _embed_groups(self, groups: list[list[str]]) -> list[Matrix]:
        """Runs in the worker thread (one at a time), so the memory needs no lock."""
        vectors: dict[str, Matrix] = {}
        for text in dict.fromkeys(t for g in groups for t in g):
            if text in self._memory:
                vectors[text] = self._memory[text]
                self._memory.move_to_end(text)
        missing = [t for t in dict.fromkeys(t for g in groups for t in g) if t not in vectors]
        if missing and self._cache is not None:
            keys = {t: embedding_key(self.spec, self._identity, t) for t in missing}
            stored = self._cache.get_vectors(list(keys.values()))
            vectors.update((t, stored[k]) for t, k in keys.items() if k in stored)
            missing = [t for t in missing if t not in vectors]
        if missing:
            fresh = dict(zip(missing, self.embedder.embed(missing), strict=True))
            vectors.update(fresh)
            if self._cache is not None:
                self._fresh.append({embedding_key(self.spec, self._identity, t): v
                                    for t, v in fresh.items()})
        for text, vector in vectors.items():
            self._memory[text] = vector
        while len(self._memory) > self._size:
            self._memory.popitem(last=False)
        return [np.stack([vectors[t] for t in g]).astype(np.float32, copy=False) for g in groups]

    async def aclose(self) -> None:
        await self._batcher.aclose()
