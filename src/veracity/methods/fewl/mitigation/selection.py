"""Which answer becomes an example or a fine-tuning target: selection rules, the seeded
train / test split and the nearest training questions of a test question."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from veracity.errors import ConfigError, DataError

RULES = ("fewl", "baseline", "gold")
"""fewl: the candidate with the highest FEWL score; baseline: the highest single-reference
score without the laziness penalty; gold: the dataset's own (best) answer."""


def best_candidates(candidates: Sequence[Sequence[str]],
                    scores: npt.ArrayLike) -> list[str | None]:
    """Per question the candidate with the highest score (NaN = unscored); None if none scored.
    Ties go to the earlier candidate."""
    matrix = np.asarray(scores, dtype=np.float64)
    if matrix.shape[0] != len(candidates):
        raise ValueError("one row of scores per question")
    out: list[str | None] = []
    for row, texts in zip(matrix, candidates, strict=True):
        usable = [k for k in range(min(len(texts), row.size))
                  if not np.isnan(row[k]) and texts[k].strip()]
        out.append(texts[max(usable, key=lambda k: (row[k], -k))] if usable else None)
    return out


def gold_answers(references: Sequence[Sequence[str]]) -> list[str | None]:
    """The first reference answer of each question (TruthfulQA: its best answer)."""
    return [next((r for r in refs if r.strip()), None) for refs in references]


def split_indices(n: int, train_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """A seeded shuffle cut into train / test index lists (both non-empty, disjoint)."""
    if not 0 < train_fraction < 1:
        raise ConfigError(f"the train fraction must be in (0, 1), got {train_fraction}")
    if n < 2:
        raise DataError(f"a train / test split needs at least 2 questions, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    cut = min(max(round(train_fraction * n), 1), n - 1)
    return sorted(int(i) for i in order[:cut]), sorted(int(i) for i in order[cut:])


def nearest(train: npt.ArrayLike, test: npt.ArrayLike, k: int,
            usable: Sequence[bool] | None = None) -> list[list[int]]:
    """For each test vector the indices of its ``k`` most cosine-similar usable train
    vectors, most similar first."""
    a = np.asarray(train, dtype=np.float64)
    b = np.asarray(test, dtype=np.float64)
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    cos = b @ a.T
    if usable is not None:
        cos[:, ~np.asarray(usable, dtype=bool)] = -np.inf
    out = []
    for row in cos:
        order = np.argsort(-row, kind="stable")
        out.append([int(i) for i in order[:k] if np.isfinite(row[i])])
    return out
