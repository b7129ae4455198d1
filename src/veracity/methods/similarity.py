"""SIM(a, b) in [0, 1] over a table of distinct texts, scored in vectorised batches.

Two kinds of spec:
- any embedder spec (``st/default``, ``st/PATH``, ``openai/MODEL``, ``hash/default``):
  cosine of the embeddings mapped to [0, 1]; each distinct text is embedded once, through a
  CachedEmbedder, so vectors are cached across runs.
- ``cross-encoder/PATH``: a local sentence-transformers CrossEncoder directory (an NLI or
  STS model); a multi-label model gives the entailment probability, a one-label model its
  score. Pair scores are cached.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from veracity.cache import Cache, cache_key
from veracity.client import CachedEmbedder
from veracity.data.labelled import leading_letter
from veracity.errors import ConfigError
from veracity.paths import user_path

Floats = npt.NDArray[np.float64]
Mapping = Literal["affine", "clip"]
MAPPINGS: tuple[Mapping, ...] = ("affine", "clip")
CROSS_PREFIXES = ("cross-encoder/", "nli/")
_CHUNK = 16384  # pairs per vectorised step: bounds memory at chunk x dim floats


def cosine_to_unit(cos: npt.ArrayLike, mapping: Mapping = "affine") -> Floats:
    """Map a cosine to [0, 1]: ``affine`` (1 + cos) / 2 (default), ``clip`` max(cos, 0).

    [reconstructed] the paper only says SIM is in [0, 1].
    """
    c = np.clip(np.asarray(cos, dtype=np.float64), -1.0, 1.0)
    if mapping == "affine":
        return (1.0 + c) / 2.0
    if mapping == "clip":
        return np.maximum(c, 0.0)
    raise ConfigError(f"unknown similarity mapping '{mapping}'; known: {', '.join(MAPPINGS)}")


class Table(Protocol):
    """Similarities between texts of one table, by index."""

    def __call__(self, left: npt.ArrayLike, right: npt.ArrayLike) -> Floats:
        """SIM(texts[left], texts[right]) elementwise; both index arrays have one shape."""
        ...


class Similarity(Protocol):
    """A similarity measure; ``table(texts)`` prepares a list of distinct texts."""

    spec: str

    def describe(self) -> dict[str, Any]: ...

    def table(self, texts: Sequence[str]) -> Table: ...


class EmbeddingTable:
    """Unit vectors of the table's texts; scores are chunked row-wise dot products."""

    def __init__(self, vectors: npt.ArrayLike, mapping: Mapping) -> None:
        v = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        self.unit = np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)
        self.mapping = mapping

    def __call__(self, left: npt.ArrayLike, right: npt.ArrayLike) -> Floats:
        a = np.asarray(left, dtype=np.int64)
        b = np.asarray(right, dtype=np.int64)
        if a.shape != b.shape:
            raise ValueError(f"index shapes differ: {a.shape} vs {b.shape}")
        flat_a, flat_b = a.ravel(), b.ravel()
        cos = np.empty(flat_a.size, dtype=np.float64)
        for start in range(0, flat_a.size, _CHUNK):
            stop = start + _CHUNK
            cos[start:stop] = np.einsum(
                "nd,nd->n", self.unit[flat_a[start:stop]], self.unit[flat_b[start:stop]]
            )
        return cosine_to_unit(cos, self.mapping).reshape(a.shape)


class EmbeddingSimilarity:
    """Cosine similarity of embeddings (default: the bundled MiniLM), mapped to [0, 1]."""

    def __init__(self, embedder: CachedEmbedder, mapping: Mapping = "affine") -> None:
        cosine_to_unit(0.0, mapping)
        self.embedder = embedder
        self.mapping = mapping
        self.spec = embedder.spec

    def describe(self) -> dict[str, Any]:
        return {"kind": "embedding-cosine", "spec": self.spec, "mapping": self.mapping}

    def table(self, texts: Sequence[str]) -> EmbeddingTable:
        return EmbeddingTable(self.embedder.embed(list(texts)), self.mapping)


class Predictor(Protocol):
    """What CrossEncoderSimilarity needs of a sentence_transformers.CrossEncoder."""

    def predict(self, inputs: list[tuple[str, str]], **kwargs: Any) -> Any: ...


class CrossEncoderSimilarity:
    """A local cross-encoder / NLI model directory, loaded on first use (lazy import).

    ``label``: the output to read from a multi-label model (name or index); by default the
    label whose name contains "entail". ``symmetric`` averages SIM(a, b) and SIM(b, a)
    because NLI is directional [reconstructed]. Identical texts score 1.
    """

    def __init__(
        self,
        path: Path | str,
        cache: Cache | None = None,
        label: str | int | None = None,
        symmetric: bool = True,
        batch_size: int = 32,
        model: Predictor | None = None,
    ) -> None:
        self.path = user_path(path)
        if model is None and not self.path.is_dir():
            raise ConfigError(f"cross-encoder model directory not found: {self.path}")
        self.cache = cache
        self.label = label
        self.symmetric = symmetric
        self.batch_size = batch_size
        self.spec = f"cross-encoder/{self.path}"
        self._model = model
        self._column: int | None = None
        self.pairs_scored = 0

    def describe(self) -> dict[str, Any]:
        return {"kind": "cross-encoder", "spec": self.spec, "label": self.label,
                "symmetric": self.symmetric}

    def _load(self) -> Predictor:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                from sentence_transformers import CrossEncoder
            except ImportError:
                raise ConfigError(
                    "cross-encoder similarity needs sentence-transformers: "
                    "pip install 'veracity[embed]'"
                ) from None
            self._model = CrossEncoder(str(self.path), device="cpu")
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

    def _predict(self, pairs: list[tuple[str, str]]) -> Floats:
        model = self._load()
        if self._column is None:
            self._column = self._label_column(model)
        multi = self._column >= 0
        raw = np.asarray(
            model.predict(pairs, batch_size=self.batch_size, apply_softmax=multi,
                          show_progress_bar=False),
            dtype=np.float64,
        )
        scores = raw[:, self._column] if multi else raw.reshape(len(pairs))
        self.pairs_scored += len(pairs)
        return np.clip(scores, 0.0, 1.0)

    def _key(self, a: str, b: str) -> str:
        return cache_key({"kind": "similarity", "model": self.spec, "label": self.label,
                          "a": a, "b": b})

    def scores(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """SIM of each distinct ordered pair, from the cache or the model."""
        distinct = list(dict.fromkeys(pairs))
        found: dict[tuple[str, str], float] = {}
        keys = {p: self._key(*p) for p in distinct}
        if self.cache is not None and distinct:
            stored = self.cache.get_json(list(keys.values()))
            found = {p: float(stored[k]) for p, k in keys.items() if k in stored}
        todo = [p for p in distinct if p not in found]
        if todo:
            fresh = dict(zip(todo, (float(s) for s in self._predict(todo)), strict=True))
            if self.cache is not None:
                self.cache.put_json("similarity", self.spec, {keys[p]: v for p, v in fresh.items()})
            found.update(fresh)
        return found

    def table(self, texts: Sequence[str]) -> Table:
        return _CrossTable(self, list(texts))


class _CrossTable:
    def __init__(self, owner: CrossEncoderSimilarity, texts: list[str]) -> None:
        self.owner = owner
        self.texts = texts

    def __call__(self, left: npt.ArrayLike, right: npt.ArrayLike) -> Floats:
        a = np.asarray(left, dtype=np.int64)
        b = np.asarray(right, dtype=np.int64)
        if a.shape != b.shape:
            raise ValueError(f"index shapes differ: {a.shape} vs {b.shape}")
        flat = np.stack([a.ravel(), b.ravel()], axis=1)
        if self.owner.symmetric:
            flat = np.sort(flat, axis=1)
        unique, inverse = np.unique(flat, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        same = unique[:, 0] == unique[:, 1]
        pairs = [(self.texts[i], self.texts[j]) for i, j in unique[~same]]
        wanted = pairs + ([(y, x) for x, y in pairs] if self.owner.symmetric else [])
        found = self.owner.scores(wanted)
        values = np.ones(unique.shape[0], dtype=np.float64)
        forward = np.array([found[p] for p in pairs], dtype=np.float64)
        if self.owner.symmetric and pairs:
            forward = (forward + np.array([found[(y, x)] for x, y in pairs])) / 2.0
        values[~same] = forward
        return values[inverse].reshape(a.shape)


def is_cross_encoder(spec: str) -> bool:
    return spec.startswith(CROSS_PREFIXES)


def load_similarity(
    spec: str,
    embedder_for: Callable[[str], CachedEmbedder],
    cache: Cache | None = None,
    mapping: Mapping = "affine",
    label: str | int | None = None,
) -> Similarity:
    """``cross-encoder/PATH`` (or ``nli/PATH``) -> CrossEncoderSimilarity; any embedder spec
    -> EmbeddingSimilarity over ``embedder_for(spec)`` (a CachedEmbedder)."""
    if is_cross_encoder(spec):
        path = spec.split("/", 1)[1]
        if not path:
            raise ConfigError(f"similarity spec '{spec}' needs a model directory")
        return CrossEncoderSimilarity(path, cache=cache, label=label)
    return EmbeddingSimilarity(embedder_for(spec), mapping)


def most_similar(
    similarity: Similarity, queries: Sequence[str], candidates: Sequence[Sequence[str]]
) -> list[int | None]:
    """Per query, the index of its most similar candidate (None for an empty query or no
    candidates); one table and one vectorised pass for all queries."""
    texts: dict[str, int] = {}
    left: list[int] = []
    right: list[int] = []
    owner: list[int] = []
    for row, (query, options) in enumerate(zip(queries, candidates, strict=True)):
        if not query.strip():
            continue
        for option in options:
            left.append(texts.setdefault(query, len(texts)))
            right.append(texts.setdefault(option, len(texts)))
            owner.append(row)
    out: list[int | None] = [None] * len(queries)
    if not left:
        return out
    sims = similarity.table(list(texts))(np.array(left), np.array(right))
    best: dict[int, tuple[float, int]] = {}
    position: dict[int, int] = {}
    for row, value in zip(owner, sims, strict=True):
        k = position.get(row, 0)
        position[row] = k + 1
        if row not in best or value > best[row][0]:
            best[row] = (float(value), k)
    for row, (_, k) in best.items():
        out[row] = k
    return out


def choose_options(
    similarity: Similarity, answers: Sequence[str | None], options: Sequence[Sequence[Any]]
) -> list[str | None]:
    """The option letter each free-form answer picks: the letter it starts with ("B) ..."),
    else the option whose text is most similar to the answer (all options compete, "None of
    the above" and "I don't know" included); None for an empty answer.

    ``options`` holds (letter, text) pairs per question.
    """
    opts = [[(str(letter), str(text)) for letter, text in row] for row in options]
    texts = [a or "" for a in answers]
    letters = [leading_letter(t, [o[0] for o in row]) for t, row in zip(texts, opts, strict=True)]
    nearest = most_similar(similarity, [("" if letter else t) for t, letter in
                                        zip(texts, letters, strict=True)],
                           [[o[1] for o in row if o[1]] for row in opts])
    out: list[str | None] = []
    for letter, k, row in zip(letters, nearest, opts, strict=True):
        present = [o for o in row if o[1]]
        out.append(letter or (None if k is None else present[k][0]))
    return out
