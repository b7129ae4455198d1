"""The gateway's ``--calibration``: a calibration fitted with the real ``gamma`` -> ``validate``
-> ``calibrate`` path against the mock upstream, then served by a real uvicorn in front of it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from gateway_server import RunningApp
from mock_upstream import MockUpstream
from veracity.cli import main
from veracity.errors import ConfigError
from veracity.methods.gamma.calibration.core import read_calibration
from veracity.methods.gamma.calibration.trust import verdict
from veracity.serve import GatewaySettings, create_app
from veracity.traffic import read_traffic

pytest.importorskip("sklearn")

STABLE_PROMPT = "Which city is the capital of France?"
UNSTABLE_PROMPT = "An unstable question: which city is the capital of France?"


@pytest.fixture
def mock() -> Iterator[MockUpstream]:
    with MockUpstream() as upstream:
        yield upstream


@pytest.fixture
def calibration(mock: MockUpstream, tmp_path: Path) -> Path:
    """Fitted on the mock: stable prompts are answered "Paris" (correct, gamma 0), unstable ones
    depend on the perturbation and name other cities (incorrect, gamma > 0)."""
    dataset = tmp_path / "qa.jsonl"
    rows = [{"question": f"{'An unstable' if k % 2 else 'A stable'} question number {k}: the "
                         "capital of France?", "references": ["Paris"]} for k in range(12)]
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run, cache, out = tmp_path / "run", str(tmp_path / "fit.sqlite"), tmp_path / "calibration.json"
    steps = [
        ["gamma", "--dataset", f"jsonl:{dataset}", "--model", "openai/mock-model", "--base-url",
         mock.url, "--embedder", "hash/default", "-n", "3", "--out", str(run), "--cache", cache,
         "--quiet"],
        ["validate", "gamma", str(run), "--baseline-samples", "0", "--resamples", "100", "--cache",
         cache, "--quiet"],
        ["calibrate", str(run), "--out", str(out), "--resamples", "30"],
    ]
    for args in steps:
        result = CliRunner().invoke(main, args, env={"OPENAI_API_KEY": "unused"})
        assert result.exit_code == 0, result.output
    return out


def settings(mock: MockUpstream, tmp_path: Path, **overrides: Any) -> GatewaySettings:
    options: dict[str, Any] = {
        "upstream": mock.url, "upstream_api_key_env": "", "embedder": "hash/default", "n": 3,
        "no_auth": True, "log": tmp_path / "traffic.sqlite", "cache": tmp_path / "gw.sqlite",
        "timeout": 5.0, "shutdown_grace": 5.0,
    } | overrides
    return GatewaySettings(**options)


def ask(url: str, prompt: str, model: str = "mock-model") -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=20)


def test_scores_carry_p_correct_and_the_calibrated_thresholds(
        mock: MockUpstream, calibration: Path, tmp_path: Path) -> None:
    [curve] = read_calibration(calibration).curves
    assert curve.key == {"model": "openai/mock-model", "embedder": "hash/256", "form": "sin",
                         "ball": "ascii-control", "n": 3}
    with RunningApp(create_app(settings(mock, tmp_path, calibration=calibration))) as running:
        stable, unstable = ask(running.url, STABLE_PROMPT), ask(running.url, UNSTABLE_PROMPT)
        refused = ask(running.url, STABLE_PROMPT, model="other-model")
    low, high = curve.verdict_thresholds()
    for response in (stable, unstable):
        assert response.status_code == 200
        score = response.json()["veracity"]
        assert score["error"] is None
        assert score["p_correct"] == pytest.approx(curve.p_correct(score["gamma"]))
        assert response.headers["x-veracity-p-correct"] == f"{score['p_correct']:.6f}"
        assert score["thresholds"] == {"low": low, "high": high,
                                       "source": f"calibration {calibration}"}
        assert score["calibration"]["forced"] is False and score["calibration"]["key"] == curve.key
        assert score["p_correct_band"] == pytest.approx(list(curve.band(score["gamma"]) or ()))
    # stable answers were all correct, unstable ones all wrong: the curve says so
    assert stable.json()["veracity"]["gamma"] == 0.0 and stable.json()["veracity"]["p_correct"] == 1.0
    shaky = unstable.json()["veracity"]
    assert shaky["gamma"] > 0 and shaky["p_correct"] < 1.0
    assert shaky["verdict"] == verdict(shaky["gamma"], (low, high)) != "trustworthy"
    # a model the calibration was not made for: refused before the upstream is asked
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "calibration_mismatch"
    assert "openai/mock-model vs openai/other-model" in refused.json()["error"]["message"]
    assert not any(r.body and r.body.get("model") == "other-model" for r in mock.received)
    entries = {e.prompt: e for e in read_traffic(tmp_path / "traffic.sqlite")}
    assert entries[STABLE_PROMPT].p_correct == 1.0
    assert entries[UNSTABLE_PROMPT].p_correct == pytest.approx(shaky["p_correct"])
    out = tmp_path / "traffic.html"
    result = CliRunner().invoke(main, ["report", "--traffic", str(tmp_path / "traffic.sqlite"),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "mean P(correct)" in html and f"{calibration}" in html and "forced" not in html


def test_a_calibration_for_another_setup_is_refused_at_startup_or_forced(
        mock: MockUpstream, calibration: Path, tmp_path: Path) -> None:
    # n = 2 and another embedder: no curve fits any request this gateway could score
    for wrong in ({"n": 2}, {"embedder": "hash/32"}):
        gateway = create_app(settings(mock, tmp_path, calibration=calibration, **wrong)).state.gateway
        with pytest.raises(ConfigError, match="made for .*--force"):
            asyncio.run(gateway.start())
    cli = CliRunner().invoke(main, ["serve", "--upstream", mock.url, "--embedder", "hash/default",
                                    "--n", "2", "--no-auth", "--no-log", "--port", "0",
                                    "--calibration", str(calibration)])
    assert cli.exit_code == 1 and "n=2" in cli.output and "--force" in cli.output
    with pytest.raises(ConfigError, match="not both"):
        settings(mock, tmp_path, calibration=calibration, thresholds=(0.1, 0.2))
    with pytest.raises(ConfigError, match="--force only applies"):
        settings(mock, tmp_path, force=True)
    forced = settings(mock, tmp_path, calibration=calibration, force=True, n=2)
    with RunningApp(create_app(forced)) as running:
        response = ask(running.url, UNSTABLE_PROMPT, model="other-model")
    score = response.json()["veracity"]
    assert response.status_code == 200 and score["calibration"]["forced"] is True
    assert score["calibration"]["differs"] == {
        "model": {"calibration": "openai/mock-model", "here": "openai/other-model"},
        "n": {"calibration": 3, "here": 2}}
    assert score["thresholds"]["source"].endswith("(forced: made for another setup)")
    assert score["p_correct"] is not None
