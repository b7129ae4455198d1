"""Decision policies: the TOML format and its errors, deterministic sampling, and decisions in
trust() / Truster (escalation to a stronger fake model)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import veracity
from veracity.decisions.policy import Policy, Rule, parse_policy, read_policy, sampled
from veracity.errors import ConfigError


def _write(tmp_path: Path, text: str, name: str = "policy.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_full_policy_reads_back(tmp_path: Path) -> None:
    path = _write(tmp_path, """
[decide]
score = "both"
gamma_max = 0.14
logprob_min = -0.7
combine = "any"
otherwise = "escalate"
unscored = "abstain"
[abstain]
action = "withhold"
message = "Not sure."
[escalate]
upstream = "http://127.0.0.1:9/v1"
model = "big"
api_key_env = "BIG_KEY"
otherwise = "answer"
[sampling]
rate = 0.25
[sampling.models]
"cheap" = 0.05
[sampling.routes]
"search" = 0.01
""")
    policy = read_policy(path)
    assert policy.rule == Rule("both", 0.14, -0.7, "any", "")
    assert (policy.otherwise, policy.unscored) == ("escalate", "abstain")
    assert (policy.abstain.action, policy.abstain.message) == ("withhold", "Not sure.")
    assert policy.escalate is not None and policy.escalate.model == "big"
    assert policy.escalate.otherwise == "answer" and policy.escalate.api_key_env == "BIG_KEY"
    assert policy.sampling.rate_for("cheap") == 0.05 and policy.sampling.rate_for("x") == 0.25
    assert policy.sampling.rate_for("cheap", route="search") == 0.01  # a route wins over its model
    assert policy.sampling.rate_for("cheap", route="other") == 0.05


@pytest.mark.parametrize(("text", "message"), [
    ("[decide]\ngamma_max = 0.1\n[decid]\n", r"unknown table \[decid\]"),
    ("[decide]\ngama_max = 0.1\n", "unknown keys gama_max"),
    ("[decide]\nscore = \"gamma\"\n", "give one of gamma_max .* or calibration"),
    ("[decide]\ngamma_max = \"low\"\n", "'gamma_max' must be a number"),
    ("[decide]\ngamma_max = 0.1\notherwise = \"escalate\"\n", r"no \[escalate\] table"),
    ("[decide]\nscore = \"logprob\"\n", "needs logprob_min"),
    ("[decide]\nscore = \"logprob\"\nlogprob_min = 0.5\n", "log-probability"),
    ("[decide]\ngamma_max = 0.1\notherwise = \"maybe\"\n", "must be one of abstain, escalate"),
    ("[sampling]\nrate = 1.5\n", "from 0 to 1"),
    ("[decide\n", "not valid TOML"),
    ("[escalate]\nupstream = \"ftp://x\"\n", "http:// or https://"),
])
def test_bad_policies_are_refused_clearly(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_policy(_write(tmp_path, text))


def test_a_risk_calibration_sets_the_threshold(tmp_path: Path) -> None:
    risk = {"kind": "veracity-risk-threshold", "method": "gamma", "score": "gamma",
            "higher_is_better": False, "alpha": 0.1, "delta": 0.05, "n": 60, "coverage": 0.5,
            "threshold": 0.12}
    (tmp_path / "risk.json").write_text(json.dumps(risk))
    policy = read_policy(_write(tmp_path, '[decide]\ncalibration = "risk.json"\n'))
    assert policy.rule is not None and policy.rule.gamma_max == 0.12
    assert "α=0.1, δ=0.05, n=60" in policy.rule.source
    (tmp_path / "risk.json").write_text(json.dumps({**risk, "threshold": None}))
    nothing = read_policy(tmp_path / "policy.toml")
    assert nothing.rule is not None and nothing.rule.gamma_max == -math.inf
    assert nothing.decide(0.0).decision == "abstain"
    (tmp_path / "risk.json").write_text(json.dumps({**risk, "method": "consistency"}))
    with pytest.raises(ConfigError, match="not on γ"):
        read_policy(tmp_path / "policy.toml")


def test_decisions_by_hand() -> None:
    policy = parse_policy({"decide": {"gamma_max": 0.1, "otherwise": "escalate"},
                           "escalate": {"model": "fake/stable"}})
    assert policy.decide(0.05).decision == "answer"
    assert policy.decide(0.1).decision == "answer"  # ≤ passes
    failed = policy.decide(0.2)
    assert failed.decision == "escalate" and failed.reason == "gamma 0.2 > 0.1"
    assert policy.decide(None).decision == "answer"  # unscored = answer by default
    assert policy.decide_escalated(0.3).decision == "abstain"
    both = parse_policy({"decide": {"score": "both", "gamma_max": 0.1, "logprob_min": -1.0}})
    assert both.decide(0.05, -0.5).decision == "answer"
    assert both.decide(0.05, -2.0).decision == "abstain"
    assert both.decide(0.05, None).decision == "answer"  # a missing score: unscored
    anyone = Policy(Rule("both", 0.1, -1.0, "any"))
    assert anyone.decide(0.5, -0.5).decision == "answer"
    assert Policy().decide(9.0).decision == "answer"


def test_sampling_is_deterministic_and_near_its_rate() -> None:
    ids = [f"req-{k}" for k in range(4000)]
    picked = [sampled(i, 0.25) for i in ids]
    assert picked == [sampled(i, 0.25) for i in ids]
    assert 0.22 < sum(picked) / len(ids) < 0.28
    assert not any(sampled(i, 0.0) for i in ids[:50]) and all(sampled(i, 1.0) for i in ids[:50])
    # a request sampled at a rate is sampled at every higher rate
    assert all(sampled(i, 0.5) for i, p in zip(ids, picked, strict=True) if p)


def test_trust_without_a_policy_answers() -> None:
    score = veracity.trust("What is 2+2?", answer="4", model="fake/unstable",
                           embedder="hash/default", cache=False)
    assert score.decision == "answer" and score.to_dict()["decision"] == "answer"


def test_truster_escalates_to_the_stronger_model(tmp_path: Path) -> None:
    policy = parse_policy({"decide": {"gamma_max": 0.01, "otherwise": "escalate"},
                           "escalate": {"model": "fake/stable"}}, "test policy")
    with veracity.Truster(model="fake/unstable", embedder="hash/default", n=3, cache=False,
                          policy=policy) as truster:
        score = truster("What is the capital of France?")
        assert score.gamma is not None and score.gamma > 0.01
        assert score.decision == "escalate" and score.decision_reason.startswith("gamma")
        assert score.escalated is not None and score.escalated.model == "fake/stable"
        assert score.escalated.gamma == 0.0 and score.escalated.decision == "answer"
    abstain = _write(tmp_path, "[decide]\ngamma_max = 0.01\n")
    score = veracity.trust("What is the capital of France?", model="fake/unstable",
                           embedder="hash/default", n=3, cache=False, policy=abstain)
    assert score.decision == "abstain" and score.escalated is None
    with pytest.raises(ConfigError, match="names none"):
        veracity.Truster(model="fake/stable", embedder="hash/default", cache=False,
                         policy=parse_policy({"decide": {"gamma_max": 0.1, "otherwise": "escalate"},
                                              "escalate": {"upstream": "http://127.0.0.1:9/v1"}}))
