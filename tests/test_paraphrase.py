"""The paraphrase ball: lenient parsing, seeded batched generation with retries, gamma runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity.backends.fake import FakeBackend
from veracity.cli import main
from veracity.client import CachedEmbedder, LLMClient
from veracity.embed.hashing import HashEmbedder
from veracity.errors import ConfigError, DataError
from veracity.methods.gamma.core import GammaSettings, measure_gamma
from veracity.methods.gamma.paraphrase import paraphrase_ball, parse_paraphrase
from veracity.perturb import perturb, resolve_ball
from veracity.types import Item

Q = "Who wrote Hamlet?"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Who was the author of Hamlet?", "Who was the author of Hamlet?"),
        ('Sure! Here is the rewritten question:\n"Who is the author of Hamlet?"',
         "Who is the author of Hamlet?"),
        ("**Rephrased:** Which writer created Hamlet?", "Which writer created Hamlet?"),
        ("1. Who penned Hamlet?\n2. Who authored Hamlet?", "Who penned Hamlet?"),
        ("Rewritten question: 'Hamlet was written by whom?'", "Hamlet was written by whom?"),
        ("  \n\n Question: Whose play is Hamlet? ", "Whose play is Hamlet?"),
    ],
)
def test_parse_finds_the_rewritten_question(reply: str, expected: str) -> None:
    assert parse_paraphrase(reply, Q) == expected


@pytest.mark.parametrize("reply", ["", "   ", "Who wrote Hamlet?", '"who wrote hamlet"',
                                   "Here you go:", "**Paraphrase:**",
                                   "William Shakespeare wrote Hamlet."])
def test_parse_rejects_empty_and_echoes(reply: str) -> None:
    assert parse_paraphrase(reply, Q) is None


def test_ball_is_batched_seeded_and_retries_unusable_points() -> None:
    backend = FakeBackend("paraphraser")
    client = LLMClient(backend)
    questions = [Q, "What is 2+2?"]
    balls = paraphrase_ball(questions, client, n=4, seed=0)
    assert [len(b) for b in balls] == [4, 4]
    for question, ball in zip(questions, balls, strict=True):
        assert all(p.strip() and p != question and question.lower() in p.lower() for p in ball)
    # the fake answers sample_index 1 with nothing: one batch of 8, then a retry of 2 at index 5
    assert [r.sample_index for r in backend.history[:8]] == [0, 1, 2, 3] * 2
    assert [r.sample_index for r in backend.history[8:]] == [5, 5]
    assert all(r.sampling.temperature > 0 for r in backend.history)
    assert paraphrase_ball(questions, LLMClient(FakeBackend("paraphraser")), 4, seed=0) == balls
    assert paraphrase_ball(questions, LLMClient(FakeBackend("paraphraser")), 4, seed=1) != balls


def test_ball_is_cached(ctx: object) -> None:
    from veracity.runs.common import Context

    assert isinstance(ctx, Context)
    client = ctx.client("fake/paraphraser")
    first = paraphrase_ball([Q], client, 3)
    calls = client.stats.model_calls
    assert paraphrase_ball([Q], client, 3) == first and client.stats.model_calls == calls


def test_hopeless_paraphraser_fails_clearly() -> None:
    with pytest.raises(DataError, match=r"fake/empty.*question 1 \('Who wrote Hamlet\?'\).*3 attempts"):
        paraphrase_ball([Q], LLMClient(FakeBackend("empty")), n=2)
    with pytest.raises(ConfigError):
        paraphrase_ball([Q], LLMClient(FakeBackend("empty")), n=0)


def test_paraphrase_is_not_a_pure_ball_and_utf8_ranges_are() -> None:
    with pytest.raises(ConfigError, match="unknown ball 'paraphrase'"):
        perturb(Q, 3, "paraphrase")
    points = perturb("Q", 200, "utf8:55290-57400", seed=0)
    codes = [ord(c) for p in points for c in p[2:]]
    assert codes and all(55290 <= c <= 57400 and not 0xD800 <= c < 0xE000 for c in codes)
    for bad in ("utf8:10-5", "utf8:55296-57343", "utf8:0-9999999", "utf8:a-b"):
        with pytest.raises(ConfigError):
            resolve_ball(bad)


def test_gamma_with_the_paraphrase_ball() -> None:
    model = LLMClient(FakeBackend("stable"))
    writer = LLMClient(FakeBackend("paraphraser"))
    settings = GammaSettings(n=3, ball="paraphrase", paraphraser="fake/paraphraser")
    [record] = measure_gamma([Item("a", Q)], model, CachedEmbedder(HashEmbedder()), settings, writer)
    assert record.ball == "paraphrase" and len(record.perturbed_prompts) == 3
    assert record.gamma is not None and record.gamma > 0  # new wording, new babble
    assert settings.describe()["paraphraser"] == "fake/paraphraser"
    assert "paraphraser" not in GammaSettings().describe()
    # without a paraphraser the model under test writes its own ball
    own = LLMClient(FakeBackend("paraphraser"))
    [mine] = measure_gamma([Item("a", Q)], own, CachedEmbedder(HashEmbedder()),
                       GammaSettings(n=3, ball="paraphrase"))
    assert mine.perturbed_prompts == record.perturbed_prompts


def test_cli_gamma_paraphrase(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(main, [
        "gamma", "--dataset", "builtin", "--limit", "2", "--model", "fake/stable",
        "--embedder", "hash/default", "--ball", "paraphrase", "--paraphraser", "fake/paraphraser",
        "-n", "3", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    info = json.loads((out / "run.json").read_text())
    assert info["config"]["settings"]["paraphraser"] == "fake/paraphraser"
    assert "model:fake/paraphraser" in info["stats"]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert all(s["ball"] == "paraphrase" and len(s["perturbed_prompts"]) == 3 for s in samples)
