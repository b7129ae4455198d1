"""Deterministic hashed character n-gram embedder (``hash/<dim>``), for tests and demos."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from veracity.embed.base import Matrix
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject

_SLOTS = 200_000  # features remembered (words and trigrams); past it the memory starts over


class HashEmbedder:
    """Bag of hashed word and character-trigram features, L2-normalised.

    Similar texts get similar vectors, identical texts identical ones; no model needed.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ConfigError("hash embedder dimension must be at least 8")
        self.dim = dim
        self.spec = f"hash/{dim}"
        self._slots: dict[str, tuple[int, float]] = {}

    def identity(self) -> JsonObject:
        return {"dim": self.dim, "version": 1}

    def _features(self, text: str) -> list[str]:
        lowered = text.lower()
        words = lowered.split()
        padded = f" {lowered} "
        return words + [padded[i : i + 3] for i in range(len(padded) - 2)]

    def _slot(self, feature: str) -> tuple[int, float]:
        """(column, sign) of a feature; remembered, since trigrams repeat across texts."""
        found = self._slots.get(feature)
        if found is None:
            if len(self._slots) >= _SLOTS:
                self._slots.clear()
            digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8)
            value = int.from_bytes(digest.digest(), "big")
            found = self._slots[feature] = ((value >> 1) % self.dim, 1.0 if value & 1 else -1.0)
        return found

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        rows: list[int] = []
        columns: list[int] = []
        signs: list[float] = []
        for row, text in enumerate(texts):
            for feature in self._features(text):
                column, sign = self._slot(feature)
                rows.append(row)
                columns.append(column)
                signs.append(sign)
        # counts of ±1 are exact in float32, so adding them at once changes no bit
        np.add.at(out, (np.asarray(rows, dtype=np.intp), np.asarray(columns, dtype=np.intp)),
                  np.asarray(signs, dtype=np.float32))
        for row in range(len(texts)):
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out


def load(name: str, **options: Any) -> HashEmbedder:
    """Registry factory for ``hash/<dim>`` (``hash/default`` is 256)."""
    if name in ("", "default"):
        return HashEmbedder(**options)
    try:
        return HashEmbedder(int(name), **options)
    except ValueError:
        raise ConfigError(f"hash embedder spec must be hash/<dim>, got 'hash/{name}'") from None
