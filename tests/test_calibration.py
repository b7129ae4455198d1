"""Calibration: isotonic maths on hand-computed cases, thresholds, ECE, files, refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import veracity
from veracity.cli import main
from veracity.errors import ConfigError, DataError
from veracity.methods.gamma.calibration.core import (
    choose_thresholds,
    fit_curve,
    fit_isotonic,
    interpolate,
    read_calibration,
    reliability,
)
from veracity.store import dumps

pytest.importorskip("sklearn")


def test_isotonic_fit_pools_adjacent_violators_by_hand() -> None:
    # correct 1, 0, 1, 0 must not rise with gamma: the middle pair pools to 0.5
    x, y = fit_isotonic([0.1, 0.2, 0.3, 0.4], [True, False, True, False])
    assert x == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert y == pytest.approx([1.0, 0.5, 0.5, 0.0])
    assert list(interpolate(x, y, [0.0, 0.15, 0.25, 0.35, 0.9])) == pytest.approx(
        [1.0, 0.75, 0.5, 0.25, 0.0])


def test_isotonic_fit_averages_ties_and_whole_blocks() -> None:
    # tied gammas average: y = [0.5 (weight 2), 1, 1, 0]; 0.5 < 1 pools to 2/3, which is
    # still < 1 and pools again: (0.5 * 2 + 1 + 1) / 4 = 0.75; then 0
    x, y = fit_isotonic([0.0, 0.0, 0.2, 0.3, 0.6], [True, False, True, True, False])
    assert list(interpolate(x, y, [0.0, 0.2, 0.3, 0.6])) == pytest.approx([0.75, 0.75, 0.75, 0.0])


def test_thresholds_reach_the_targets_by_hand() -> None:
    gammas = [0.0, 0.0, 0.1, 0.2, 0.3, 0.5]
    correct = [True, True, True, False, True, False]
    t = choose_thresholds(gammas, correct, target_precision=0.9, target_recall=0.9)
    # gamma < 0.2: three answers, all correct; gamma < 0.3 adds the wrong one (3 of 4 = 0.75)
    assert t["low"] == 0.2 and t["precision"] == 1.0 and t["share_trustworthy"] == 0.5
    # both wrong answers have gamma >= 0.2; from 0.3 on only one of them (recall 0.5)
    assert t["high"] == 0.2 and t["recall"] == 1.0 and t["precision_reached"]


def test_unreachable_precision_calls_nothing_trustworthy() -> None:
    t = choose_thresholds([0.1, 0.2, 0.3], [False, True, False], 0.9, 0.5)
    assert t["low"] == 0.0 and not t["precision_reached"] and t["share_trustworthy"] == 0.0
    everything_right = choose_thresholds([0.1, 0.2], [True, True], 0.9, 0.9)
    assert everything_right["share_untrustworthy"] == 0.0


def test_expected_calibration_error_by_hand() -> None:
    found = reliability([0.1, 0.15, 0.9, 0.95], [False, True, True, True], bins=10)
    # bin [0.1, 0.2): mean 0.125, accuracy 0.5 -> 0.375 * 2/4; bin [0.9, 1]: 0.925 vs 1 -> 0.075 * 2/4
    assert found["ece"] == pytest.approx(0.1875 + 0.0375)
    assert [b["n"] for b in found["bins"]] == [0, 2, 0, 0, 0, 0, 0, 0, 0, 2]


def _calibration_file(tmp_path: Path, model: str = "fake/unstable") -> Path:
    key = {"model": model, "embedder": "hash/256", "form": "sin", "ball": "ascii-control", "n": 2}
    gammas = [0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95]
    correct = [True, True, True, False, True, False, False, False]
    curve = fit_curve(key, gammas, correct, ["run"], resamples=20)
    from veracity.methods.gamma.calibration.core import Calibration

    path = tmp_path / "cal.json"
    path.write_text(dumps(Calibration([curve]).to_dict()))
    return path


def test_truster_refuses_a_calibration_made_for_another_model(tmp_path: Path) -> None:
    path = _calibration_file(tmp_path, model="fake/stable")
    with pytest.raises(ConfigError, match=r"model \(fake/stable vs fake/unstable\).*--force"):
        veracity.Truster(model="fake/unstable", embedder="hash/default", n=2, calibration=path,
                         cache=False)
    with pytest.raises(ConfigError, match="embedder"):
        veracity.trust("Q?", model="fake/stable", embedder="hash/32", n=2, calibration=path,
                       cache=False)
    forced = veracity.trust("What is 2+2?", answer="4", model="fake/unstable",
                            embedder="hash/default", n=2, calibration=path, force=True, cache=False)
    assert forced.calibration is not None and forced.calibration["forced"]
    assert forced.calibration["differs"] == {"model": {"calibration": "fake/stable",
                                                       "here": "fake/unstable"}}
    assert forced.p_correct is not None


def test_truster_gives_p_correct_and_the_calibrated_verdict(tmp_path: Path) -> None:
    path = _calibration_file(tmp_path)
    curve = read_calibration(path).curves[0]
    with veracity.Truster(model="fake/unstable", embedder="hash/default", n=2, calibration=path,
                          cache=False) as truster:
        score = truster("Who wrote Hamlet?")
    assert score.p_correct == pytest.approx(curve.p_correct(score.gamma))
    assert score.thresholds == curve.verdict_thresholds()
    assert score.p_correct_band is not None and score.p_correct_band[0] <= score.p_correct_band[1]
    assert score.calibration is not None and not score.calibration["forced"]
    with pytest.raises(ConfigError, match="not both"):
        veracity.Truster(model="fake/unstable", embedder="hash/default", n=2, calibration=path,
                         thresholds=(0.1, 0.2), cache=False)


@pytest.mark.parametrize("content, message", [
    ("not json", "not a JSON calibration"),
    ('{"format": "other"}', "not a veracity calibration"),
    ('{"format": "veracity-calibration", "version": 1, "curves": []}', "no curves"),
    ('{"format": "veracity-calibration", "version": 1, "curves": [{"key": {}}]}', "missing"),
])
def test_broken_calibration_files_are_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        read_calibration(path)


def _labelled_run(tmp_path: Path, model: str = "fake/unstable") -> Path:
    dataset = tmp_path / "qa.jsonl"
    words = ["paris", "four", "blue", "river", "king", "the", "red", "no", "yes", "water", "fire",
             "queen"]
    dataset.write_text("".join(json.dumps({"question": f"Question number {k}?", "references": [w]})
                               + "\n" for k, w in enumerate(words)))
    run = tmp_path / "run"
    cache = str(tmp_path / "c.sqlite")
    common = ["--embedder", "hash/default", "-n", "2", "--cache", cache, "--quiet"]
    result = CliRunner().invoke(main, ["gamma", "--dataset", f"jsonl:{dataset}", "--model", model,
                                       "--out", str(run), *common])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["validate", "gamma", str(run), "--baseline-samples", "0",
                                       "--resamples", "100", "--cache", cache, "--quiet"])
    assert result.exit_code == 0, result.output
    return run


def test_calibrate_then_gamma_with_the_calibration_end_to_end(tmp_path: Path) -> None:
    run = _labelled_run(tmp_path)
    out = tmp_path / "cal" / "calibration.json"
    result = CliRunner().invoke(main, ["calibrate", str(run), "--out", str(out), "--resamples", "30",
                                       "--target-precision", "0.8"])
    assert result.exit_code == 0, result.output
    assert "held-out ECE" in result.output
    calibration = read_calibration(out)
    [curve] = calibration.curves
    assert curve.key == {"model": "fake/unstable", "embedder": "hash/256", "form": "sin",
                         "ball": "ascii-control", "n": 2}
    validation = json.loads((run / "validation.json").read_text())
    assert curve.n == sum(i["correct"] is not None and i["gamma"] is not None
                          for i in validation["items"])
    assert all(a >= b for a, b in zip(curve.y, curve.y[1:], strict=False))  # non-increasing
    assert curve.holdout["n_fit"] + curve.holdout["n_eval"] == curve.n
    html = out.with_suffix(".html").read_text()
    assert html.count("<img") == 2 and "Reliability diagram" in html
    # the calibration on a new gamma run of the same setup
    again = tmp_path / "again"
    result = CliRunner().invoke(main, [
        "gamma", "What is 2+2?", "Who wrote Hamlet?", "--model", "fake/unstable", "--embedder",
        "hash/default", "-n", "2", "--calibration", str(out), "--out", str(again), "--json",
        "--cache", str(tmp_path / "c.sqlite"), "--quiet"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    for record in shown["records"]:
        assert record["p_correct"] == pytest.approx(curve.p_correct(record["gamma"]))
        assert record["verdict"] in ("trustworthy", "uncertain", "untrustworthy")
    assert shown["calibration"]["forced"] is False
    assert "Calibration used" in (again / "report.html").read_text()
    # another model is refused before anything runs, or used with --force and recorded
    other = ["gamma", "What is 2+2?", "--model", "fake/stable", "--embedder", "hash/default", "-n",
             "2", "--calibration", str(out), "--no-cache", "--quiet"]
    refused = CliRunner().invoke(main, other)
    assert refused.exit_code == 1 and "model (fake/unstable vs fake/stable)" in refused.output
    forced = CliRunner().invoke(main, [*other, "--force", "--json"])
    assert forced.exit_code == 0, forced.output
    assert json.loads(forced.output)["calibration"]["forced"] is True


def test_calibrate_needs_labels(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["gamma", "Q?", "--model", "fake/stable", "--embedder",
                                       "hash/default", "-n", "2", "--out", str(run), "--no-cache",
                                       "--quiet"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["calibrate", str(run), "--out", str(tmp_path / "c.json")])
    assert result.exit_code == 1 and "validate gamma" in result.output
