"""Cross-encoder / NLI pair scorer: a local sentence-transformers CrossEncoder directory, or
an HHEM-style model (Vectara's hallucination-evaluation model, the FEWL paper's C.3): a
directory whose config.json names a ``foundation`` model. Such a model ships its own code,
scores a pair with its own ``predict`` and builds its tokenizer from the foundation model, which
the hub would be asked for; the ``foundation`` option names a local copy instead."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from veracity.embed.st import offline_sentence_transformers
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
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
        foundation: str | None = None,
    ) -> None:
        self.path = user_path(path)
        self.foundation = None if foundation is None else str(user_path(foundation))
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

    def identity(self) -> JsonObject:
        # the key appears only when set, so caches written before the option stay valid
        found: JsonObject = {"label": self.label}
        return found | (
            {"trust_remote_code": True} if self.trust_remote_code else {}) | (
            {"foundation": self.foundation} if self.foundation else {})

    def _load(self) -> Predictor:
        if self._model is None and _foundation_of(self.path) is not None:
            self._model = self._load_hhem(str(_foundation_of(self.path)))
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

    def _load_hhem(self, named: str) -> Predictor:
        """An HHEM-style model through transformers, its tokenizer from a local foundation."""
        offline_sentence_transformers("HHEM-style scorers")  # also keeps transformers offline
        if not self.trust_remote_code:
            raise ConfigError(
                f"{self.spec} ships its own model code, which runs only when you allow it: "
                "--scorer-option trust_remote_code=true (read the code first)")
        foundation = self.foundation or named
        if not Path(foundation).is_dir():
            raise ConfigError(
                f"{self.spec} builds its tokenizer from '{named}', which veracity does not "
                "fetch: save that model to a directory once and pass --scorer-option "
                "foundation=DIR")
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(
            str(self.path), trust_remote_code=True, foundation=foundation)
        model.eval()
        return HhemPredictor(model)

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


def _foundation_of(path: Path) -> str | None:
    """The ``foundation`` an HHEM-style model's config.json names (None: a plain
    cross-encoder)."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    found = config.get("foundation") if isinstance(config, dict) else None
    return str(found) if isinstance(found, str) and found else None


class HhemPredictor:
    """A model with its own ``predict(pairs)`` (one score per pair, a tensor), seen as a
    one-output cross-encoder."""

    num_labels = 1

    def __init__(self, model: Any) -> None:
        self.model = model

    def predict(self, inputs: list[tuple[str, str]], **kwargs: Any) -> Any:
        size = int(kwargs.get("batch_size") or 32)
        out: list[float] = []
        for start in range(0, len(inputs), size):
            scores = self.model.predict(inputs[start:start + size])
            out += [float(s) for s in np.asarray(
                scores.detach().cpu() if hasattr(scores, "detach") else scores,
                dtype=np.float64).reshape(-1)]
        return np.asarray(out, dtype=np.float64)


def load(name: str, **options: Any) -> CrossEncoderScorer:
    """Registry factory for ``cross-encoder/PATH`` (and ``nli/PATH``)."""
    if not name:
        raise ConfigError("a cross-encoder spec needs a model directory: cross-encoder/PATH")
    return CrossEncoderScorer(name, **options)
