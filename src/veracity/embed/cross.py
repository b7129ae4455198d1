"""Cross-encoder / NLI pair scorer: a local sentence-transformers CrossEncoder directory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from veracity.embed.st import offline_sentence_transformers
from veracity.errors import ConfigError
from veracity.paths import user_path


class Predictor(Protocol):
    """What the scorer needs of a sentence_transformers.CrossEncoder."""

    def predict(self, inputs: list[tuple[str, str]], **kwargs: Any) -> Any: ...


class CrossEncoderScorer:
    """A cross-encoder directory, loaded on first use (lazy import).

    ``label``: the output to read from a multi-label model (name or index); by default the
    label whose name contains "entail". A one-output model gives its score. Scores are
    clipped to [0, 1].
    """

    def __init__(
        self,
        path: Path | str,
        label: str | int | None = None,
        batch_size: int = 32,
        model: Predictor | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        self.path = user_path(path)
        if model is None and not self.path.is_dir():
            raise ConfigError(f"cross-encoder model directory not found: {self.path}")
        if batch_size < 1:
            raise ConfigError(f"cross-encoder batch_size must be at least 1, got {batch_size}")
        self.label = label
        self.batch_size = batch_size
        self.trust_remote_code = trust_remote_code
        self.spec = f"cross-encoder/{self.path}"
        self._model = model
        self._column: int | None = None

    def identity(self) -> dict[str, Any]:
        # the key appears only when set, so caches written before the option stay valid
        return {"label": self.label} | (
            {"trust_remote_code": True} if self.trust_remote_code else {})

    def _load(self) -> Predictor:
        if self._model is None:
            module = offline_sentence_transformers("cross-encoder similarity and nli/... scorers")
            try:
                self._model = module.CrossEncoder(str(self.path), device="cpu",
                                                  trust_remote_code=self.trust_remote_code)
            except ValueError as exc:
                if "trust_remote_code" not in str(exc):
                    raise
                raise ConfigError(
                    f"{self.spec} ships its own model code, which runs only when you allow it: "
                    "--scorer-option trust_remote_code=true (read the code first)") from None
        return self._model

    def _label_column(self, model: Predictor) -> int:
        """Column of the output to read; -1 for a one-output model."""
        labels: dict[int, str] = dict(getattr(getattr(model, "config", None), "id2label", {}) or {})
        if int(getattr(model, "num_labels", 1)) <= 1:
            return -1
        if isinstance(self.label, int):
            return self.label
        wanted = self.label.lower() if isinstance(self.label, str) else "entail"
        for index, name in sorted(labels.items()):
            if wanted in str(name).lower():
                return int(index)
        raise ConfigError(
            f"{self.spec}: cannot find the label '{wanted}' among {sorted(labels.values())}; "
            "name the output to use (e.g. --similarity-label entailment or an index)"
        )

    def score(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.float64]:
        model = self._load()
        if self._column is None:
            self._column = self._label_column(model)
        multi = self._column >= 0
        raw = np.asarray(
            model.predict(list(pairs), batch_size=self.batch_size, apply_softmax=multi,
                          show_progress_bar=False),
            dtype=np.float64,
        )
        scores = raw[:, self._column] if multi else raw.reshape(len(pairs))
        return np.clip(scores, 0.0, 1.0)

    def close(self) -> None:
        self._model = None


def load(name: str, **options: Any) -> CrossEncoderScorer:
    """Registry factory for ``cross-encoder/PATH`` (and ``nli/PATH``)."""
    if not name:
        raise ConfigError("a cross-encoder spec needs a model directory: cross-encoder/PATH")
    return CrossEncoderScorer(name, **options)
