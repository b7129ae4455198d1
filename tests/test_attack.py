"""Adversarial gamma search: pure pieces, the walk on the fake slope, budgets, seeds, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from veracity.backends.fake import FakeBackend
from veracity.cli import main
from veracity.client import CachedEmbedder, LLMClient
from veracity.embed.hashing import HashEmbedder
from veracity.errors import ConfigError
from veracity.methods.gamma.attack.core import (
    AttackSettings,
    candidates,
    choose,
    step_cost,
    visible,
    walk_attack,
)
from veracity.methods.gamma.attack.run import run_attack
from veracity.perturb import perturb
from veracity.runs.common import Context
from veracity.store import RunDir
from veracity.types import GenRequest

START = "What is the capital of France?"


def walk(settings: AttackSettings, mode: str = "slope") -> tuple[Any, FakeBackend, list[int]]:
    backend = FakeBackend(mode)
    client = LLMClient(backend)
    batches: list[int] = []
    original = client.generate_each

    def counting(requests: list[GenRequest], stage: str = "generate") -> Any:
        batches.append(len(requests))
        return original(requests, stage)

    client.generate_each = counting  # type: ignore[method-assign]
    result = walk_attack(START, client, CachedEmbedder(HashEmbedder()), settings)
    return result, backend, batches


def test_choose_hand_cases() -> None:
    assert choose([0.1, 0.5, 0.5, None]) == 1  # ties go to the first
    assert choose([0.1, 0.5, 0.5, None], descend=True) == 0
    assert choose([None, 0.3, math.nan, 0.2], descend=True) == 3  # unscored rank last
    assert choose([None, None]) == 0
    with pytest.raises(ConfigError):
        choose([])


def test_candidates_are_seeded_and_shaped() -> None:
    first = candidates(START, 50, "utf8", seed=0, step=1)
    assert first == candidates(START, 50, "utf8", seed=0, step=1)
    assert first != candidates(START, 50, "utf8", seed=0, step=2)
    assert first != candidates(START, 50, "utf8", seed=1, step=1)
    for c in first:
        suffix = c[len(START):]
        assert c.startswith(START) and suffix[0] == " " and 1 <= len(suffix) - 1 <= 3
        assert all(ord(ch) <= 500 for ch in suffix[1:])
    assert max(ord(ch) for c in first for ch in c[len(START) + 1:]) > 127
    # never the points of the gamma ball of the same prompt
    assert not set(first[:10]) & set(perturb(START, 10, "utf8", seed=0))
    ranged = candidates(START, 30, "utf8:1000-1010", seed=0, step=1)
    assert all(1000 <= ord(ch) <= 1010 for c in ranged for ch in c[len(START) + 1:])


def test_visible_spells_out_invisible_characters() -> None:
    assert visible("a \x05b\x85\u200bé\n") == "a \\x05b\\x85\\u200bé\\x0a"
    assert visible("x\ny", keep="\n") == "x\ny"


def test_settings_validate_and_cost() -> None:
    assert step_cost(AttackSettings(n=10)) == 110
    assert step_cost(AttackSettings(n=10, ball="paraphrase")) == 210
    for bad in ({"n": 0}, {"steps": -1}, {"charset": "nope"}, {"ball": "nope"},
                {"charset": "paraphrase"}, {"max_calls": 0}):
        with pytest.raises(ConfigError):
            AttackSettings(**bad)  # type: ignore[arg-type]


def test_walk_climbs_the_fake_slope_one_batch_per_step() -> None:
    result, _, batches = walk(AttackSettings(steps=5, n=6))
    steps = result.steps
    assert [s.step for s in steps] == list(range(6)) and result.stop_reason == "steps"
    assert steps[-1].gamma > steps[0].gamma + 0.3
    assert max(s.gamma for s in steps) > 0.8
    for s in steps[1:]:
        assert len(s.candidates) == 6
        assert s.gamma == max(c.gamma for c in s.candidates)
        assert s.chosen is not None and s.candidates[s.chosen].prompt == s.prompt
        assert s.prompt.startswith(steps[s.step - 1].prompt)  # walks from the last point
        assert len(s.perturbed_answers) == 6
    # one batch for the start (N+1), then one of N x (N+1) per step
    assert batches == [7] + [42] * 5
    assert steps[0].similarity_to_start == pytest.approx(1.0)
    assert steps[-1].similarity_to_start < 0.9


def test_flat_landscape_does_not_climb() -> None:
    # fake/stable ignores ASCII control-character noise only: both balls are that one here
    result, _, _ = walk(AttackSettings(steps=3, n=4, charset="ascii-control",
                                       ball="ascii-control"), mode="stable")
    assert all(s.gamma == 0.0 for s in result.steps)


def test_descend_takes_the_smallest_and_stays_lower() -> None:
    down, _, _ = walk(AttackSettings(steps=4, n=6, descend=True))
    up, _, _ = walk(AttackSettings(steps=4, n=6))
    for s in down.steps[1:]:
        assert s.gamma == min(c.gamma for c in s.candidates)
    assert down.steps[-1].gamma < up.steps[-1].gamma


def test_budget_is_respected_before_sending_a_step() -> None:
    result, backend, _ = walk(AttackSettings(steps=20, n=6, max_calls=100))
    # start 7, then 42 per step: 7 + 2 * 42 = 91 <= 100 < 133
    assert len(result.steps) == 3 and result.stop_reason == "budget"
    assert result.requested_calls == 91 and len(backend.history) <= 100
    with pytest.raises(ConfigError, match="max-calls 5"):
        walk(AttackSettings(n=6, max_calls=5))


def test_same_seed_same_walk_other_seed_other_walk() -> None:
    a, _, _ = walk(AttackSettings(steps=3, n=5, seed=3))
    b, _, _ = walk(AttackSettings(steps=3, n=5, seed=3))
    c, _, _ = walk(AttackSettings(steps=3, n=5, seed=4))
    assert a.steps == b.steps
    assert [s.prompt for s in a.steps] != [s.prompt for s in c.steps]


def test_run_dir_report_and_cached_rerun(tmp_path: Path, ctx: Context) -> None:
    settings = AttackSettings(steps=3, n=4)
    first = run_attack(START, "fake/slope", "hash/default", settings, ctx, tmp_path / "run")
    assert first.run is not None and first.run.method == "attack"
    calls = ctx.model_calls()
    assert calls > 0
    results = first.results
    walked = first.summary.trajectory
    assert walked.steps_taken == 3 and walked.best.gamma >= walked.start.gamma
    assert results["best"]["gamma"] == walked.best.gamma
    assert results["settings"]["charset"] == "utf8" and results["settings"]["ball"] == "utf8"
    assert len(list(RunDir.open(tmp_path / "run").samples())) == 4
    again = run_attack(START, "fake/slope", "hash/default", settings, ctx)
    assert ctx.model_calls() == calls  # everything came from the cache
    assert again.records == first.records


def test_report_escapes_answers_and_suffixes(tmp_path: Path, ctx: Context) -> None:
    def nasty(request: GenRequest) -> str:
        return f"<script>alert(1)</script>\x01{len(request.messages[0].content)}"

    ctx.clients["fake/nasty"] = LLMClient(FakeBackend(responder=nasty, name="nasty"), ctx.cache)
    run_attack("Q?", "fake/nasty", "hash/default", AttackSettings(steps=2, n=3), ctx, tmp_path / "r")
    from veracity.report import build_report

    html = build_report([tmp_path / "r"], tmp_path / "r" / "report.html").read_text()
    assert html.count("<script>") == 1 and "&lt;script&gt;" in html and "\\x01" in html
    assert "\x01" not in html
    assert "<mark>" in html and "Adversarial γ search" in html


def run_cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_cli_attack_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "atk"
    args = ["attack", "--prompt", START, "--model", "fake/slope", "--embedder", "hash/default",
            "--steps", "3", "-n", "4", "--out", str(out)]
    text = run_cli(*args)
    assert "(start)" in text and "3 steps (done)" in text and "best γ" in text
    for name in ("run.json", "samples.jsonl", "results.json", "report.html"):
        assert (out / name).is_file()
    assert "0 model calls" in run_cli(*args)
    steps = json.loads(run_cli(*args[:-2], "--json", "--charset", "utf8:1000-1010"))
    assert len(steps) == 4 and all(1000 <= ord(c) <= 1010 for c in steps[-1]["suffix"].replace(" ", ""))
    budget = run_cli(*args[:-2], "--max-calls", "30", "--steps", "10")
    assert "budget reached" in budget
    bad = CliRunner().invoke(main, ["attack", "--prompt", "x", "--charset", "nope"])
    assert bad.exit_code != 0 and "unknown ball 'nope'" in bad.output
    empty = CliRunner().invoke(main, ["attack", "--prompt", "  ", "--model", "fake/slope",
                                      "--embedder", "hash/default", "--out", str(tmp_path / "e")])
    assert empty.exit_code != 0 and "empty prompt" in empty.output
