"""The benchmark metrics on hand-computed numbers, and cross-fitting that never scores an item
with a model fitted on it."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("sklearn")

from veracity import metrics  # noqa: E402
from veracity.errors import InvalidValueError  # noqa: E402

# four answers: right, right, wrong, wrong; the middle two tied
U = [0.1, 0.4, 0.4, 0.8]
Y = [1, 1, 0, 0]


def test_auroc_counts_ties_as_half() -> None:
    # wrong {0.4, 0.8} against right {0.1, 0.4}: 1 + 1/2 + 1 + 1 over 4 pairs
    assert metrics.auroc(U, Y) == pytest.approx(3.5 / 4)
    assert math.isnan(metrics.auroc([0.1, 0.2], [1, 1]))


def test_risk_coverage_takes_the_expected_errors_of_a_tie_group() -> None:
    # kept 1..4: errors 0, 1/2 (one of the tied pair is wrong), 1, 2
    assert metrics.kept_errors(U, Y).tolist() == pytest.approx([0.0, 0.5, 1.0, 2.0])
    coverage, risk = metrics.risk_coverage(U, Y)
    assert coverage.tolist() == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert risk.tolist() == pytest.approx([0.0, 0.25, 1 / 3, 0.5])
    # the order of the input does not matter
    assert metrics.aurc(U[::-1], Y[::-1]) == pytest.approx(metrics.aurc(U, Y))


def test_aurc_and_e_aurc() -> None:
    assert metrics.aurc(U, Y) == pytest.approx(13 / 48)
    # oracle: 0, 0, 1/3, 1/2
    assert metrics.oracle_aurc(Y) == pytest.approx(5 / 24)
    assert metrics.e_aurc(U, Y) == pytest.approx(1 / 16)
    perfect = [0.0, 0.1, 0.9, 1.0]
    assert metrics.e_aurc(perfect, Y) == pytest.approx(0.0)


def test_prr() -> None:
    # A_u = 35/48, A_oracle = 38/48, A_random = 24/48
    assert metrics.prr(U, Y) == pytest.approx(11 / 14)
    assert metrics.prr([0.0, 0.1, 0.9, 1.0], Y) == pytest.approx(1.0)
    assert metrics.prr([1.0, 0.9, 0.1, 0.0], Y) == pytest.approx(-1.0)
    assert math.isnan(metrics.prr(U, [1, 1, 1, 1]))


def test_auprc_with_wrong_answers_positive() -> None:
    # by u descending: 0.8 wrong (P 1, R 1/2), then the tie (P 2/3, R 1)
    assert metrics.auprc(U, Y) == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)
    assert math.isnan(metrics.auprc(U, [1, 1, 1, 1]))


def test_auprc_agrees_with_scikit_learn_on_ties() -> None:
    from sklearn.metrics import average_precision_score

    rng = np.random.default_rng(3)
    for _ in range(20):
        u = rng.integers(0, 5, size=30).astype(float)
        y = rng.integers(0, 2, size=30)
        if y.min() == 1:
            continue
        assert metrics.auprc(u, y) == pytest.approx(average_precision_score(1 - y, u))


def test_ece_and_brier() -> None:
    p, y = [0.2, 0.25, 0.7, 0.9], [1, 0, 1, 1]
    # bin [0.2, 0.3): acc 1/2, conf 0.225; bin 7: 1 vs 0.7; bin 9: 1 vs 0.9
    assert metrics.ece(p, y) == pytest.approx(0.275 / 2 + 0.3 / 4 + 0.1 / 4)
    assert metrics.brier(p, y) == pytest.approx((0.64 + 0.0625 + 0.09 + 0.01) / 4)
    # 1.0 falls in the last (closed) bin
    assert metrics.ece([1.0, 1.0], [1, 0]) == pytest.approx(0.5)


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidValueError):
        metrics.auroc([0.1, math.nan], [1, 0])
    with pytest.raises(InvalidValueError):
        metrics.aurc([0.1, 0.2], [1, 2])
    with pytest.raises(InvalidValueError):
        metrics.brier([0.1], [1, 0])


def test_crossfit_never_scores_an_item_with_a_model_fitted_on_it() -> None:
    n = 23
    y = np.array([k % 3 == 0 for k in range(n)], dtype=float)
    index = np.arange(n, dtype=float)  # the feature is the item's own index
    fitted: list[set[int]] = []
    scored: list[int] = []

    def fit(x: np.ndarray, labels: np.ndarray) -> metrics.Predictor:
        seen = {int(v) for v in x[:, 0]}
        fitted.append(seen)

        def predict(test: np.ndarray) -> np.ndarray:
            items = [int(v) for v in test[:, 0]]
            assert not seen & set(items), "an item scored by a model fitted on it"
            scored.extend(items)
            return np.full(len(items), 0.5)

        return predict

    out = metrics.crossfit(index, y, fit, folds=5, seed=1)
    assert len(fitted) == 5
    assert sorted(scored) == list(range(n))  # every item scored exactly once
    assert all(len(seen) < n for seen in fitted)
    assert out.tolist() == [0.5] * n


def test_calibration_is_cross_fitted() -> None:
    # a training fold sees no item of the test fold: isotonic on a perfect separator still
    # gives probabilities in [0, 1] with the right order
    u = np.linspace(0, 1, 40)
    y = (u < 0.5).astype(float)
    for how in metrics.CALIBRATORS:
        p = metrics.calibrated(u, y, how, folds=4)
        assert np.all((p >= 0) & (p <= 1))
        assert p[:20].mean() > p[20:].mean()


def test_table_pairs_the_bootstrap_and_picks_the_best_baseline() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=60)
    good = (1 - y) + rng.normal(0, 0.3, size=60)
    noise = rng.normal(0, 1, size=60)
    table = metrics.metric_table({"good": good, "copy": good.copy(), "noise": noise}, y,
                                 baselines=("good", "noise"), resamples=200)
    assert table.reference == "good"
    assert table.n == 60 and table.n_wrong == int((y == 0).sum())
    copy = table.rows["copy"]["auroc"]
    assert copy.diff == 0.0 and copy.diff_low == 0.0 and copy.diff_high == 0.0
    row = table.rows["good"]["auroc"]
    assert row.low <= row.value <= row.high
    assert math.isnan(row.diff)  # the reference has no difference to itself
    assert table.rows["noise"]["auroc"].diff_high < 0
    assert set(table.rows["noise"]) == set(metrics.METRICS)
    for how in metrics.CALIBRATORS:
        assert len(table.calibrated["noise"][how]) == 60


def test_fused_scores_are_cross_fitted_risks() -> None:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, size=50)
    a = (1 - y) + rng.normal(0, 0.5, size=50)
    b = (1 - y) + rng.normal(0, 0.5, size=50)
    fused = metrics.fused_scores({"a": a, "b": b}, y)
    assert fused.shape == (50,)
    assert metrics.auroc(fused, y) > 0.7


def test_resampled_metrics_equal_the_definitions_on_each_expanded_resample() -> None:
    rng = np.random.default_rng(5)
    n = 25
    y = rng.integers(0, 2, size=n).astype(float)
    u = rng.integers(0, 6, size=n).astype(float)  # many ties
    p = {"isotonic": rng.uniform(size=n), "platt": rng.uniform(size=n)}
    w = metrics.bootstrap_weights(n, 30, seed=2)
    fast = metrics.resampled_metrics(u, y, p, w)
    for r in range(30):
        reps = w[r].astype(int)
        slow = metrics.metric_values(np.repeat(u, reps), np.repeat(y, reps),
                                     {k: np.repeat(v, reps) for k, v in p.items()})
        for key, value in slow.items():
            if math.isnan(value):
                assert math.isnan(fast[key][r])
            else:
                assert fast[key][r] == pytest.approx(value), key
