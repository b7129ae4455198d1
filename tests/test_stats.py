"""Statistics helpers against hand-computed and textbook values."""

from __future__ import annotations

import math

import pytest

from veracity import stats


def test_mean_stderr() -> None:
    mean, se = stats.mean_stderr([1.0, 2.0, 3.0, None, float("nan")])
    assert mean == 2.0
    assert se == pytest.approx(1.0 / math.sqrt(3))  # sample std 1
    assert math.isnan(stats.mean_stderr([])[0])
    assert math.isnan(stats.mean_stderr([5.0])[1])


def test_t_two_tailed_p_textbook() -> None:
    # t = 2.0 with 10 degrees of freedom: p = 0.0734 (two-tailed)
    assert stats.t_two_tailed_p(2.0, 10) == pytest.approx(0.073388, abs=1e-5)
    assert stats.t_two_tailed_p(0.0, 5) == pytest.approx(1.0)


def test_pearson_hand_computed() -> None:
    # x = 1..5, y = 2,4,5,4,5: sxy = 6, sxx = 10, syy = 6 -> r = 6 / sqrt(60) = 0.7746
    r, p = stats.pearson([1, 2, 3, 4, 5], [2, 4, 5, 4, 5])
    assert r == pytest.approx(6 / math.sqrt(60))
    # t = r sqrt(3) / sqrt(1 - r^2) = 2.1213 with 3 df
    assert p == pytest.approx(0.124027, abs=1e-5)


def test_spearman_p_is_exact_for_few_pairs() -> None:
    # n = 3, perfectly reversed: of the 3! orders, rho = -1 and +1 reach |rho| >= 1
    assert stats.spearman([1, 2, 3], [0.9, 0.5, 0.1]) == pytest.approx((-1.0, 1 / 3))
    # n = 4, same order: 2 of 24 orders reach |rho| = 1
    assert stats.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx((1.0, 1 / 12))
    # n = 4, rho = 0.8: orders with |rho| >= 0.8 are those with sum d^2 <= 2 or >= 18
    rho, p = stats.spearman([1, 2, 3, 4], [1, 3, 2, 4])
    assert rho == pytest.approx(0.8) and p == pytest.approx(8 / 24)


def test_spearman_with_ties() -> None:
    rho, p = stats.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7])
    assert rho == pytest.approx(0.8207827, abs=1e-6)
    assert p == pytest.approx(16 / 120)  # exact: 16 of the 5! orders of y's ranks reach |rho|
    # beyond EXACT_SPEARMAN_UP_TO pairs: the t-approximation (t = r sqrt(n-2) / sqrt(1-r^2))
    x = list(range(10))
    y = [0, 2, 1, 3, 5, 4, 6, 9, 7, 8]
    rho, p = stats.spearman(x, y)
    assert rho == pytest.approx(1 - 6 * 10 / (10 * 99))
    assert p == pytest.approx(stats.pearson(x, y)[1])


def test_rankdata_ties_average() -> None:
    assert list(stats.rankdata([10, 20, 20, 5])) == [2.0, 3.5, 3.5, 1.0]


def test_auroc_hand_computed() -> None:
    # positives 0.35 and 0.8 against negatives 0.1 and 0.4: 3 of 4 pairs ordered
    assert stats.auroc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75
    assert stats.auroc([0.5, 0.5], [False, True]) == 0.5
    assert math.isnan(stats.auroc([0.1], [True]))


def test_linear_fit() -> None:
    m, b = stats.linear_fit([0, 1, 2], [1, 3, 5])
    assert m == pytest.approx(2.0) and b == pytest.approx(1.0)


def test_bootstrap_ci_contains_mean() -> None:
    low, high = stats.bootstrap_ci([0.0, 1.0] * 50, resamples=500)
    assert low < 0.5 < high and high - low < 0.3


def test_histogram() -> None:
    h = stats.histogram([0.0, 0.04, 0.5, 2.0, None], bins=4, upper=1.0)
    assert h.counts == (2, 0, 1, 1)
    assert h.edges == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert h.to_json() == {"edges": [0.0, 0.25, 0.5, 0.75, 1.0], "counts": [2, 0, 1, 1]}
