"""The embedder protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors: ``embed(texts)`` returns an (n, d) float32 array."""

    spec: str

    def identity(self) -> dict[str, Any]:
        """Everything besides the text that changes the vectors (no secrets)."""
        ...

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed a batch of texts, one row per text, in order."""
        ...
