"""SIM(a, b) in [0, 1] over a table of distinct texts, scored in vectorised batches.

Two kinds of spec:
- any embedder spec (``st/default``, ``st/PATH``, ``openai/MODEL``, ``hash/default``):
  cosine of the embeddings mapped to [0, 1]; each distinct text is embedded once, through a
  CachedEmbedder, so vectors are cached across runs.
- a pair-scorer spec from the registry, e.g. ``cross-encoder/PATH``: a local
  sentence-transformers CrossEncoder directory (an NLI or STS model, see
  :mod:`veracity.embed.cross`); pair scores go through a cached ScorerClient.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from veracity.client import CachedEmbedder, ScorerClient
from veracity.data.labelled import leading_letter
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.registry import is_scorer

Floats = npt.NDArray[np.float64]
Mapping = Literal["affine", "clip"]
MAPPINGS: tuple[Mapping, ...] = ("affine", "clip")
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

    def describe(self) -> JsonObject: ...

    def table(self, texts: Sequence[str]) -> Table: ...


def _scale_rows(vectors: npt.NDArray[np.float32], out: npt.NDArray[np.float32]
                ) -> npt.NDArray[np.float32]:
    """Each row scaled to unit length into ``out``; rows of no length (or NaN) are zero."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    out[~(norms > 0)[:, 0]] = 0.0
    np.divide(vectors, norms, out=out, where=norms > 0)
    return out


def unit_vectors(vectors: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Float32 rows scaled to unit length as an :class:`EmbeddingTable` scales its own, each
    row on its own (so a row's digits do not depend on the rows beside it): vectors kept
    scaled for a table's ``scaled`` rows."""
    v = np.asarray(vectors, dtype=np.float32)
    return _scale_rows(v, np.empty_like(v))


class EmbeddingTable:
    """Unit vectors of the table's texts; scores are chunked row-wise dot products."""

    def __init__(self, vectors: npt.ArrayLike, mapping: Mapping, scaled: bool = False) -> None:
        """``scaled``: :func:`unit_vectors` already scaled the rows (taken as they are)."""
        self.unit = np.asarray(vectors, dtype=np.float32) if scaled else unit_vectors(vectors)
        self.mapping = mapping

    def __call__(self, left: npt.ArrayLike, right: npt.ArrayLike) -> Floats:
        a = np.asarray(left, dtype=np.int64)
        b = np.asarray(right, dtype=np.int64)
        if a.shape != b.shape:
            raise ConfigError(f"index shapes differ: {a.shape} vs {b.shape}")
        flat_a, flat_b = a.ravel(), b.ravel()
        cos = np.empty(flat_a.size, dtype=np.float64)
        for start in range(0, flat_a.size, _CHUNK):
            stop = start + _CHUNK
            cos[start:stop] = np.einsum(
                "nd,nd->n", self.unit[flat_a[start:stop]], self.unit[flat_b[start:stop]]
            )
        return cosine_to_unit(cos, self.mapping).reshape(a.shape)

    def extended(self, vectors: npt.ArrayLike, scaled: bool = False) -> EmbeddingTable:
        """This table with more rows after its own: vectors made elsewhere, scaled to unit
        length as these were (each row on its own, so the digits are the same); ``scaled``:
        :func:`unit_vectors` already scaled them, so they are copied as they are (a vector
        scaled twice could move in its last digit)."""
        v = np.asarray(vectors, dtype=np.float32)
        if not self.unit.shape[0]:
            return EmbeddingTable(v, self.mapping, scaled)
        # one array for both, the new rows scaled straight into it (no copy of them made twice)
        more = copy.copy(self)
        more.unit = np.empty((self.unit.shape[0] + v.shape[0], v.shape[1]), dtype=np.float32)
        more.unit[:self.unit.shape[0]] = self.unit
        if scaled:
            more.unit[self.unit.shape[0]:] = v
        else:
            _scale_rows(v, more.unit[self.unit.shape[0]:])
        return more


class EmbeddingSimilarity:
    """Cosine similarity of embeddings (default: the bundled MiniLM), mapped to [0, 1]."""

    def __init__(self, embedder: CachedEmbedder, mapping: Mapping = "affine") -> None:
        cosine_to_unit(0.0, mapping)
        self.embedder = embedder
        self.mapping = mapping
        self.spec = embedder.spec

    def describe(self) -> JsonObject:
        return {"kind": "embedding-cosine", "spec": self.spec, "mapping": self.mapping}

    def table(self, texts: Sequence[str]) -> EmbeddingTable:
        return EmbeddingTable(self.embedder.embed(list(texts)), self.mapping)


class CrossEncoderSimilarity:
    """SIM from a pair scorer (a cross-encoder / NLI model) through its cached client.

    ``symmetric`` averages SIM(a, b) and SIM(b, a) because NLI is directional
    [reconstructed]. Identical texts score 1.
    """

    def __init__(self, client: ScorerClient, symmetric: bool = True) -> None:
        self.client = client
        self.symmetric = symmetric
        self.spec = client.spec

    @property
    def pairs_scored(self) -> int:
        """Pairs the model scored (not found in the cache) through this similarity's client."""
        return self.client.stats.model_calls

    def describe(self) -> JsonObject:
        return {"kind": "cross-encoder", "spec": self.spec, **self.client.scorer.identity(),
                "symmetric": self.symmetric}

    def scores(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """SIM of each distinct ordered pair, from the cache or the model."""
        return self.client.scores(pairs)

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
            raise ConfigError(f"index shapes differ: {a.shape} vs {b.shape}")
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
    """Whether the spec names a registered pair scorer (``cross-encoder/PATH``, ``nli/PATH``)."""
    return is_scorer(spec)


def load_similarity(
    spec: str,
    embedder_for: Callable[[str], CachedEmbedder],
    scorer_for: Callable[..., ScorerClient],
    mapping: Mapping = "affine",
    label: str | int | None = None,
) -> Similarity:
    """A pair-scorer spec (``cross-encoder/PATH``, ``nli/PATH``) -> CrossEncoderSimilarity
    over ``scorer_for(spec, label=...)``; any embedder spec -> EmbeddingSimilarity over
    ``embedder_for(spec)``. Both are a run Context's (``ctx.scorer``, ``ctx.embedder``), which
    owns, counts and closes them."""
    if is_scorer(spec):
        return CrossEncoderSimilarity(scorer_for(spec, label=label))
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
