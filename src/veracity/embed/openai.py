"""OpenAI-compatible ``/embeddings`` client (``openai/MODEL``, e.g. text-embedding-ada-002)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np

from veracity.backends.openai import HttpEndpoint
from veracity.embed.base import Matrix
from veracity.errors import ConfigError, PermanentError, RetryableError
from veracity.jsontypes import JsonObject


class OpenAIEmbedder:
    """Embeds texts in batches through an OpenAI-compatible server, with retries.

    The key handling, retries and error messages are those of the HTTP chat backend.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 5,
        batch_size: int = 256,
        dimensions: int | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not model:
            raise ConfigError("the openai embedder needs a model name: openai/MODEL")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.spec = f"openai/{model}"
        self.batch_size = batch_size
        self.dimensions = dimensions
        self._http = HttpEndpoint(base_url, api_key_env, timeout, max_retries, 4, transport, sleep)
        self.base_url = self._http.base_url

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(spec={self.spec!r}, base_url={self.base_url!r})"

    def identity(self) -> JsonObject:
        out: JsonObject = {"base_url": self.base_url}
        if self.dimensions:
            out["dimensions"] = self.dimensions
        return out

    def embed(self, texts: Sequence[str]) -> Matrix:
        """(n, d) float32, one row per text in input order; raises BackendError on failure."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        parts = [self._batch(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts).astype(np.float32, copy=False)

    def _batch(self, texts: Sequence[str]) -> Matrix:
        # OpenAI rejects empty strings; a lone space embeds "nothing" the same way every time
        body: dict[str, Any] = {"model": self.model, "input": [t if t else " " for t in texts]}
        if self.dimensions:
            body["dimensions"] = self.dimensions
        where = f"{self.spec} at {self.base_url}/embeddings"
        try:
            data = self._http.post("/embeddings", body)
        except PermanentError as exc:
            raise type(exc)(f"{self.spec}: {exc}") from None
        except RetryableError as exc:
            raise RetryableError(f"{self.spec}: {exc}", exc.retry_after) from None
        try:
            rows = sorted(data["data"], key=lambda row: int(row["index"]))
            indices = [int(row["index"]) for row in rows]
            vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise PermanentError(f"{where}: malformed embeddings response ({exc})") from None
        if indices != list(range(len(texts))) or vectors.ndim != 2:
            raise PermanentError(
                f"{where}: expected {len(texts)} embeddings indexed 0..{len(texts) - 1}, "
                f"got indices {indices[:10]}{'...' if len(indices) > 10 else ''}"
            )
        return vectors

    def close(self) -> None:
        self._http.close()


def load(name: str, **options: Any) -> OpenAIEmbedder:
    """Registry factory for the ``openai/MODEL`` embedder; ``options`` are OpenAIEmbedder's."""
    return OpenAIEmbedder(name, **options)
