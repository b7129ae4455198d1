"""The embedder protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from veracity.jsontypes import JsonObject

Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors: ``embed(texts)`` returns an (n, d) float32 array."""

    spec: str

    def identity(self) -> JsonObject:
        """Everything besides the text that changes the vectors (no secrets)."""
        ...

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed a batch of texts, one row per text, in order."""
        ...


@runtime_checkable
class PairScorer(Protocol):
    """Scores pairs of texts at once (a cross-encoder or NLI model): one float per pair."""

    spec: str

    def identity(self) -> JsonObject:
        """Everything besides the pair that changes the scores (no secrets)."""
        ...

    def score(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.float64]:
        """One score in [0, 1] per (a, b) pair, in order."""
        ...

    def close(self) -> None:
        """Release the model."""
        ...
