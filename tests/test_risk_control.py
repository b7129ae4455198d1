"""Risk-controlled thresholds (Learn-then-Test): hand-computed thresholds, the refusal for too few
labels, labelled runs of any method read through the registry, and `veracity calibrate --risk`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from veracity.cli import main
from veracity.decisions.labelled import read_labelled
from veracity.decisions.risk import TooFewLabels, binomial_p_value, labels_needed, risk_threshold
from veracity.errors import DataError
from veracity.store import VALIDATION_FILE, RunDir

pytest.importorskip("scipy")


def _cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) ≤ k) summed term by term (independent of scipy)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def test_labels_needed_by_hand() -> None:
    # (1 − α)^n ≤ δ: 0.8^13 = 0.0550, 0.8^14 = 0.0440; 0.9^28 = 0.0523, 0.9^29 = 0.0471;
    # 0.95^58 = 0.0510, 0.95^59 = 0.0485
    assert labels_needed(0.2, 0.05) == 14
    assert labels_needed(0.1, 0.05) == 29
    assert labels_needed(0.05, 0.05) == 59


def test_binomial_p_value_is_the_exact_tail() -> None:
    # P(Bin(15, 0.2) ≤ 1) = 0.8^15 + 15·0.2·0.8^14 = 0.035184 + 0.131941
    assert binomial_p_value(1, 15, 0.2) == pytest.approx(0.167126, abs=1e-6)
    assert binomial_p_value(0, 14, 0.2) == pytest.approx(0.8**14)


def test_threshold_by_hand_stops_at_the_first_failed_test() -> None:
    # u = 1..20, answers 15..20 wrong; α = 0.2, δ = 0.05: candidates start at 14 passed (fewer
    # cannot reach δ). λ=14: 14 passed, 0 wrong, p = 0.8^14 = 0.044 ≤ δ → passes;
    # λ=15: 15 passed, 1 wrong, p = 0.167 > δ → stop. Threshold 14, coverage 0.7.
    u = np.arange(1, 21, dtype=float)
    wrong = u >= 15
    found = risk_threshold(u, wrong, 0.2, 0.05)
    assert found.threshold == 14.0
    assert (found.passed, found.errors, found.tested) == (14, 0, 2)
    assert found.coverage == pytest.approx(0.7)
    assert found.p_value == pytest.approx(0.8**14)


def test_threshold_by_hand_passes_errors_when_the_set_is_large() -> None:
    # 60 answers, one wrong at u = 5, the last 10 (u = 51..60) wrong; α = 0.1, δ = 0.05, need 29.
    # The first candidate passes 29 with 1 wrong: p = 0.9^29 + 29·0.1·0.9^28 = 0.199 > δ, and the
    # sequence stops there: no threshold.
    u = np.arange(1, 61, dtype=float)
    wrong = (u == 5) | (u > 50)
    assert risk_threshold(u, wrong, 0.1, 0.05).threshold is None
    # with the same answers but the early mistake moved to the end, λ = 50 passes (0.9^50 = 0.005)
    # and λ = 51 (1 wrong of 51: 0.9^51 + 51·0.1·0.9^50 = 0.0309) too; λ = 52 (2 of 52):
    # 0.0966 > δ: threshold 51
    wrong = u > 50
    found = risk_threshold(u, wrong, 0.1, 0.05)
    assert found.threshold == 51.0
    assert (found.passed, found.errors) == (51, 1)
    assert found.p_value == pytest.approx(0.9**51 + 51 * 0.1 * 0.9**50)
    assert _cdf(2, 52, 0.1) > 0.05


def test_ties_pass_or_fail_together() -> None:
    u = [0.0] * 20 + [1.0] * 20
    wrong = [False] * 20 + [True] * 20
    found = risk_threshold(u, wrong, 0.2, 0.05)
    assert (found.threshold, found.passed) == (0.0, 20)


def test_too_few_labels_is_refused_with_the_number_needed() -> None:
    with pytest.raises(TooFewLabels, match="13 labelled answers .* at least 14 are needed") as exc:
        risk_threshold(np.arange(13.0), [False] * 13, 0.2, 0.05)
    assert (exc.value.have, exc.value.need) == (13, 14)
    with pytest.raises(DataError, match="strictly between 0 and 1"):
        risk_threshold([0.0], [False], 1.0, 0.05)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=14, max_size=40),
       st.sampled_from([0.2, 0.3]), st.sampled_from([0.05, 0.1]))
def test_matches_a_direct_reading_of_the_procedure(items: list[tuple[int, bool]], alpha: float,
                                                   delta: float) -> None:
    u = [float(a) for a, _ in items]
    wrong = [b for _, b in items]
    need = labels_needed(alpha, delta)
    expected = None
    for lam in sorted(set(u)):
        n = sum(1 for x in u if x <= lam)
        if n < need:
            continue
        k = sum(1 for x, w in zip(u, wrong, strict=True) if x <= lam and w)
        if _cdf(k, n, alpha) > delta:
            break
        expected = lam
    if len(u) < need:
        return
    assert risk_threshold(u, wrong, alpha, delta).threshold == expected


def _run(tmp_path: Path, method: str, metric: str, values: list[float], correct: list[bool],
         with_validation: bool = True) -> Path:
    path = tmp_path / f"{method}-run"
    run = RunDir.create(path, method, {"dataset": "test"})
    rows = [{"id": f"q{k}", metric: v} for k, v in enumerate(values)]
    if not with_validation:
        rows = [{**r, "correct": c} for r, c in zip(rows, correct, strict=True)]
    run.write_samples(rows)
    if with_validation:
        run.write_json(VALIDATION_FILE, {"items": [{"id": f"q{k}", "correct": c}
                                                   for k, c in enumerate(correct)]})
    return path


def test_a_gamma_run_lower_is_better(tmp_path: Path) -> None:
    gammas = [k / 100 for k in range(1, 21)]
    run = _run(tmp_path, "gamma", "gamma", gammas, [k < 14 for k in range(20)])
    scores = read_labelled([run])
    assert (scores.method, scores.metric, scores.higher_is_better) == ("gamma", "gamma", False)
    out = tmp_path / "risk.json"
    result = CliRunner().invoke(main, ["calibrate", "--risk", "0.2", "--delta", "0.05", str(run),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "threshold: pass when gamma ≤ 0.14" in result.output
    assert "coverage 0.700 (14 of 20 passed)" in result.output
    assert "α = 0.2, δ = 0.05, n = 20" in result.output and "Learn-then-Test" in result.output
    saved = json.loads(out.read_text())
    assert saved["threshold"] == pytest.approx(0.14) and saved["coverage"] == pytest.approx(0.7)


def test_a_consistency_run_higher_is_better(tmp_path: Path) -> None:
    # scores 1.00, 0.99, ...: the 14 highest right, the rest wrong → pass when score ≥ 0.87
    values = [1 - k / 100 for k in range(20)]
    run = _run(tmp_path, "consistency", "score", values, [k < 14 for k in range(20)],
               with_validation=False)
    result = CliRunner().invoke(main, ["calibrate", "--risk", "0.2", str(run), "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found["threshold"] == pytest.approx(0.87) and found["rule"] == "score ≥ 0.87"
    assert found["passed"] == 14 and found["higher_is_better"] is True


def test_the_cli_refuses_a_small_set_with_the_number_needed(tmp_path: Path) -> None:
    run = _run(tmp_path, "gamma", "gamma", [0.1] * 20, [True] * 20)
    result = CliRunner().invoke(main, ["calibrate", "--risk", "0.1", str(run)])
    assert result.exit_code == 1
    assert "20 labelled answers" in result.output and "at least 29 are needed" in result.output


def test_unlabelled_runs_and_mixed_methods_are_refused(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    RunDir.create(bare, "gamma", {}).write_samples([{"id": "a", "gamma": 0.1}])
    result = CliRunner().invoke(main, ["calibrate", "--risk", "0.1", str(bare)])
    assert result.exit_code == 1 and "veracity validate gamma" in result.output
    gamma = _run(tmp_path, "gamma", "gamma", [0.1] * 3, [True] * 3)
    other = _run(tmp_path, "consistency", "score", [0.1] * 3, [True] * 3)
    with pytest.raises(DataError, match="different methods"):
        read_labelled([gamma, other])
    result = CliRunner().invoke(main, ["calibrate", str(gamma)])
    assert result.exit_code == 2 and "--risk" in result.output
