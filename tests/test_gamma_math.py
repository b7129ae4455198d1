"""Gamma on hand-computed vectors and on the paper's Tables 1 and 2."""

from __future__ import annotations

import math

import numpy as np
import pytest

from veracity.client import CachedEmbedder
from veracity.embed.hashing import HashEmbedder
from veracity.errors import ConfigError
from veracity.methods.gamma.core import aggregate, gamma_batch, gamma_from_embeddings, score_answers
from veracity.methods.gamma.records import GammaAggregate, GammaRecord

MARY = "Mary Queen of Scots was a Roman Catholic."
MARY_NO_A = "Mary Queen of Scots was Roman Catholic."
# Table 2 of the paper, P1-P10 in the order listed: only P5 keeps the "a" of the original answer
TABLE2 = [MARY_NO_A] * 4 + [MARY] + [MARY_NO_A] * 5


def test_orthogonal_plus_parallel_both_forms() -> None:
    # b = (0,1) + (1,0) = (1,1): cos = 1/sqrt(2)
    v0, perturbed = [1.0, 0.0], [[0.0, 1.0], [1.0, 0.0]]
    assert gamma_from_embeddings(v0, perturbed, "sin") == pytest.approx(math.sqrt(0.5))
    assert gamma_from_embeddings(v0, perturbed, "paper-code") == pytest.approx(
        math.sqrt(1 - 1 / math.sqrt(2))
    )


def test_three_four_five_triangle() -> None:
    # cos((3,4),(4,3)) = 24/25, so sin = 7/25 and sqrt(1 - cos) = 1/5
    assert gamma_from_embeddings([3, 4], [[4, 3]], "sin") == pytest.approx(0.28)
    assert gamma_from_embeddings([3, 4], [[4, 3]], "paper-code") == pytest.approx(0.2)


def test_perturbations_cancelling_to_the_centre_direction() -> None:
    # (1,1) + (1,-1) = (2,0) is parallel to (1,0): exactly zero
    assert gamma_from_embeddings([1, 0], [[1, 1], [1, -1]]) == 0.0


def test_antiparallel_sum_is_zero_for_sin_but_not_for_paper_code() -> None:
    assert gamma_from_embeddings([1, 0], [[-1, 0]], "sin") == 0.0
    assert gamma_from_embeddings([1, 0], [[-1, 0]], "paper-code") == pytest.approx(math.sqrt(2))


def test_zero_vector_is_undefined() -> None:
    assert math.isnan(gamma_from_embeddings([0, 0], [[1, 0]]))
    assert math.isnan(gamma_from_embeddings([1, 0], [[1, 0], [-1, 0]]))


def test_batch_matches_single() -> None:
    rng = np.random.default_rng(0)
    centres, perturbed = rng.normal(size=(5, 16)), rng.normal(size=(5, 10, 16))
    batch = gamma_batch(centres, perturbed)
    for i in range(5):
        assert batch[i] == pytest.approx(gamma_from_embeddings(centres[i], perturbed[i]))


def test_unknown_form() -> None:
    with pytest.raises(ConfigError, match="unknown gamma form"):
        gamma_batch([[1.0]], [[[1.0]]], "cos")  # type: ignore[arg-type]


@pytest.mark.parametrize("form", ["sin", "paper-code"])
def test_table1_eleven_identical_answers_give_exactly_zero(form: str) -> None:
    embedder = CachedEmbedder(HashEmbedder())
    values = score_answers(["4"], [["4"] * 10], embedder, form)  # type: ignore[arg-type]
    assert values == [0.0]


def test_table1_with_float32_noise_still_exactly_zero() -> None:
    v = np.random.default_rng(1).normal(size=384).astype(np.float32)
    assert gamma_from_embeddings(v, np.stack([v] * 10)) == 0.0


def test_table2_matches_closed_form_and_is_not_zero() -> None:
    # unit vectors v0 (with "a") and u (without): b = 9u + v0, so with c = cos(v0, u)
    # |b|^2 = 81 + 1 + 18c, cos(v0, b) = (9c + 1) / sqrt(82 + 18c) and gamma = sqrt(1 - cos^2)
    assert TABLE2.count(MARY_NO_A) == 9 and TABLE2.index(MARY) == 4
    embedder = CachedEmbedder(HashEmbedder(dim=1024))
    v0, u = embedder.embed([MARY, MARY_NO_A])
    c = float(np.dot(v0, u))
    expected = math.sqrt(1 - ((9 * c + 1) / math.sqrt(82 + 18 * c)) ** 2)
    [value] = score_answers([MARY], [TABLE2], embedder)
    assert value == pytest.approx(expected, rel=1e-5)
    assert 0.0 < value < 1.0


def test_empty_answer_is_unscored() -> None:
    embedder = CachedEmbedder(HashEmbedder())
    assert score_answers(["", "x"], [["a", "b"], ["x", "x"]], embedder) == [None, 0.0]


def test_aggregate_numbers() -> None:
    records = [GammaRecord("q", "?", "!", g) for g in (0.0, 0.02, 0.1, None)]
    agg = aggregate(records, threshold=0.05)
    assert agg.n_items == 4 and agg.n_scored == 3 and agg.n_unscored == 1
    assert agg.mean == pytest.approx(0.04)
    # sample std of (0, .02, .1) = sqrt(((.04)^2 + (.02)^2 + (.06)^2) / 2) = sqrt(0.0028)
    assert agg.stderr == pytest.approx(math.sqrt(0.0028) / math.sqrt(3))
    assert agg.median == pytest.approx(0.02)
    assert agg.share_below_threshold == pytest.approx(2 / 3)
    assert sum(agg.histogram.counts) == 3
    assert GammaAggregate.from_json(agg.to_json()) == agg
