"""Decisions through a real uvicorn: a mock upstream, a mock stronger upstream, a policy; the
three decisions in the response, its header, the metrics and the traffic log; sampled scoring."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway_server import RunningApp
from mock_upstream import STABLE, MockUpstream
from veracity.decisions.policy import parse_policy
from veracity.errors import ConfigError
from veracity.serve import GatewaySettings, create_app

pytest.importorskip("uvicorn")

KEY = "gw-key-decisions"
STABLE_PROMPT = "What is the capital of France?"
UNSTABLE_PROMPT = "An unstable question about France?"


class Running:
    def __init__(self, url: str, first: MockUpstream, stronger: MockUpstream, log: Path) -> None:
        self.url, self.first, self.stronger, self.log = url, first, stronger, log

    def ask(self, prompt: str, request_id: str | None = None, model: str = "mock-model",
            stream: bool = False, route: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {KEY}"}
        if request_id:
            headers["X-Request-Id"] = request_id
        if route:
            headers["X-Veracity-Route"] = route
        body = {"model": model, "messages": [{"role": "user", "content": prompt}]}
        if stream:
            body["stream"] = True
        return httpx.post(self.url + "/v1/chat/completions", json=body, headers=headers, timeout=20)

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=20).text


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Running]]:
    monkeypatch.setenv("MOCK_KEY", "sk-first")
    monkeypatch.setenv("STRONG_KEY", "sk-strong-CANARY")
    with ExitStack() as stack:

        def start(policy: dict[str, Any] | None, stable_stronger: bool = True,
                  **overrides: Any) -> Running:
            first = stack.enter_context(MockUpstream())
            stronger = stack.enter_context(MockUpstream(model="strong-model", stable=stable_stronger))
            if policy is not None and "escalate" in policy:
                policy["escalate"] = {"upstream": stronger.url, "model": "strong-model",
                                      "api_key_env": "STRONG_KEY"} | policy["escalate"]
            log = tmp_path / f"traffic-{len(list(tmp_path.iterdir()))}.sqlite"
            settings = GatewaySettings(
                upstream=first.url, upstream_api_key_env="MOCK_KEY", embedder="hash/default", n=3,
                api_keys=(KEY,), log=log, no_cache=True, timeout=5.0, shutdown_grace=5.0,
                policy=None if policy is None else parse_policy(policy, "test policy"),
                **overrides)
            running = stack.enter_context(RunningApp(create_app(settings)))
            return Running(running.url, first, stronger, log)

        yield start


def wait_for_rows(log: Path, count: int) -> bool:
    """The traffic log is written in batches by a worker thread."""
    for _ in range(100):
        if len(_logged(log)) >= count:
            return True
        time.sleep(0.05)
    return False


def _logged(log: Path) -> dict[str, str]:
    with sqlite3.connect(log) as conn:
        return dict(conn.execute("SELECT id, decision FROM exchanges").fetchall())


def escalating() -> dict[str, Any]:
    return {"decide": {"gamma_max": 0.01, "otherwise": "escalate"}, "escalate": {}}


def test_answer_escalate_and_their_records(gateway: Callable[..., Running]) -> None:
    g = gateway(escalating())
    passed = g.ask(STABLE_PROMPT)
    assert passed.status_code == 200
    assert passed.headers["x-veracity-decision"] == "answer"
    v = passed.json()["veracity"]
    assert v["decision"] == "answer" and v["gamma"] == 0.0 and "≤ 0.01" in v["decision_reason"]

    escalated = g.ask(UNSTABLE_PROMPT)
    assert escalated.status_code == 200
    assert escalated.headers["x-veracity-decision"] == "escalate"
    data = escalated.json()
    assert data["choices"][0]["message"]["content"] == STABLE  # the stronger model's answer
    assert data["model"] == "strong-model"
    v = data["veracity"]
    assert v["decision"] == "escalate" and v["gamma"] > 0.01
    second = v["escalation"]["veracity"]
    assert v["escalation"]["model"] == "strong-model"
    assert second["decision"] == "answer" and second["gamma"] == 0.0
    assert second["id"] == v["id"] + "-escalated"
    # the stronger upstream got the question and its perturbed calls, with its own key
    bodies = g.stronger.chat_bodies()
    assert len(bodies) == 1 + 3 and all(b["model"] == "strong-model" for b in bodies)
    assert all(r.headers.get("authorization") == "Bearer sk-strong-CANARY"
               for r in g.stronger.received)
    metrics = g.metrics()
    assert 'veracity_gateway_decisions_total{decision="answer",model="mock-model",stage="first"} 1.0' \
        in metrics
    assert 'veracity_gateway_decisions_total{decision="escalate",model="mock-model",stage="first"} 1.0' \
        in metrics
    assert ('veracity_gateway_decisions_total{decision="answer",model="strong-model",'
            'stage="escalated"} 1.0') in metrics
    assert "sk-strong-CANARY" not in metrics
    logged = {}
    for _ in range(100):  # the log is written in batches by a worker thread
        logged = _logged(g.log)
        if len(logged) == 3:
            break
        time.sleep(0.05)
    assert sorted(logged.values()) == ["answer", "answer", "escalate"]
    assert logged[v["id"]] == "escalate" and logged[second["id"]] == "answer"


def test_abstain_withholds_or_flags(gateway: Callable[..., Running]) -> None:
    g = gateway({"decide": {"gamma_max": 0.01}, "abstain": {"action": "withhold",
                                                            "message": "Held back."}})
    held = g.ask(UNSTABLE_PROMPT)
    assert held.headers["x-veracity-decision"] == "abstain"
    data = held.json()
    assert data["choices"][0]["message"]["content"] == "Held back."
    assert data["veracity"]["decision"] == "abstain" and data["veracity"]["withheld"] is True
    assert 'decision="abstain"' in g.metrics()
    flagged = gateway({"decide": {"gamma_max": 0.01}})
    data = flagged.ask(UNSTABLE_PROMPT).json()
    assert data["veracity"]["decision"] == "abstain" and data["veracity"]["withheld"] is False
    assert data["choices"][0]["message"]["content"].startswith("It depends on")


def test_an_escalated_answer_that_fails_too_is_abstained(gateway: Callable[..., Running]) -> None:
    g = gateway({**escalating(), "abstain": {"action": "withhold"}}, stable_stronger=False)
    response = g.ask(UNSTABLE_PROMPT)
    assert response.headers["x-veracity-decision"] == "escalate"
    data = response.json()
    assert data["veracity"]["escalation"]["veracity"]["decision"] == "abstain"
    assert data["choices"][0]["message"]["content"].startswith("The answer was withheld")


def test_without_a_policy_every_answer_is_answered(gateway: Callable[..., Running]) -> None:
    g = gateway(None)
    for prompt in (STABLE_PROMPT, UNSTABLE_PROMPT):
        response = g.ask(prompt)
        assert response.headers["x-veracity-decision"] == "answer"
        assert response.json()["veracity"]["decision"] == "answer"
    streamed = g.ask(UNSTABLE_PROMPT, stream=True)
    assert '"decision": "answer"' in streamed.text or '"decision":"answer"' in streamed.text


def test_a_streamed_answer_reports_the_decision_it_could_not_act_on(
        gateway: Callable[..., Running]) -> None:
    g = gateway({"decide": {"gamma_max": 0.01}})
    text = g.ask(UNSTABLE_PROMPT, stream=True).text
    assert '"decision":"abstain"' in text.replace(" ", "") and '"acted":false' in text.replace(" ", "")


def test_score_rate_zero_passes_through_with_no_perturbed_call(gateway: Callable[..., Running]) -> None:
    g = gateway(None, score_rate=0.0)
    response = g.ask(UNSTABLE_PROMPT)
    assert response.status_code == 200
    assert response.headers["x-veracity-scored"] == "false"
    assert response.json()["veracity"] == {"id": response.headers["x-veracity-id"], "scored": False,
                                           "decision": "answer"}
    assert len(g.first.chat_bodies()) == 1
    streamed = g.ask(UNSTABLE_PROMPT, stream=True)
    assert '"scored":false' in streamed.text.replace(" ", "") and "[DONE]" in streamed.text
    assert len(g.first.chat_bodies()) == 2  # no perturbed call for the stream either
    assert 'veracity_gateway_unscored_total{model="mock-model"} 2.0' in g.metrics()


def test_sampling_follows_the_request_id_and_the_policy_rates(gateway: Callable[..., Running]) -> None:
    g = gateway({"sampling": {"rate": 0.5, "models": {"never": 0.0},
                              "routes": {"audited": 1.0, "muted": 0.0}}})
    outcomes = {}
    for k in range(12):
        first = g.ask(STABLE_PROMPT, request_id=f"req-{k}").headers.get("x-veracity-scored")
        again = g.ask(STABLE_PROMPT, request_id=f"req-{k}").headers.get("x-veracity-scored")
        assert first == again
        outcomes[k] = first
    assert set(outcomes.values()) == {None, "false"}  # some scored, some not
    assert g.ask(STABLE_PROMPT, model="never").headers["x-veracity-scored"] == "false"
    # a route's rate wins over its model's and the overall one
    assert "x-veracity-scored" not in g.ask(STABLE_PROMPT, model="never", route="audited").headers
    assert all(g.ask(STABLE_PROMPT, request_id=f"req-{k}", route="muted")
               .headers["x-veracity-scored"] == "false" for k in range(4))


def test_a_deciding_policy_needs_inline_mode() -> None:
    with pytest.raises(ConfigError, match="--mode inline"):
        GatewaySettings(no_auth=True, mode="async", policy=parse_policy({"decide": {"gamma_max": 0.1}}))
    with pytest.raises(ConfigError, match="--score-rate"):
        GatewaySettings(no_auth=True, score_rate=1.5)


def _feedback(g: Running, body: Any, key: str | None = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(g.url + "/v1/veracity/feedback", json=body, headers=headers, timeout=20)


def test_feedback_recalibrates_and_closes_the_loop(gateway: Callable[..., Running],
                                                   tmp_path: Path) -> None:
    g = gateway(None)
    ids = {}
    for k in range(16):
        ids[f"right-{k}"] = g.ask(f"What is the capital of France, question {k}?").json()["veracity"]
    for k in range(4):
        ids[f"wrong-{k}"] = g.ask(f"An unstable question {k} about France?").json()["veracity"]
    for name, v in ids.items():
        response = _feedback(g, {"id": v["id"], "correct": name.startswith("right")})
        assert response.status_code == 200, response.text
        assert response.json()["decision"] == "answer"
    assert _feedback(g, {"id": "vrc-unknown", "correct": True}).status_code == 404
    assert _feedback(g, {"id": ids["right-0"]["id"], "correct": "yes"}).status_code == 400
    assert _feedback(g, {"id": ids["right-0"]["id"], "correct": True}, key=None).status_code == 401
    metrics = g.metrics()
    assert 'veracity_gateway_observed_error{model="mock-model"} 0.2' in metrics
    assert ('veracity_gateway_feedback_total{correct="false",decision="answer",'
            'model="mock-model"} 4.0') in metrics

    from click.testing import CliRunner

    from veracity.cli import main

    out = tmp_path / "risk.json"
    result = CliRunner().invoke(main, ["calibrate", "--risk", "0.2", "--from-traffic", str(g.log),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    # 16 right at γ = 0, 4 wrong above: pass γ ≤ 0; 16 passed, none wrong, p = 0.8^16 = 0.028
    assert "threshold: pass when gamma ≤ 0" in result.output
    assert "coverage 0.800 (16 of 20 passed)" in result.output
    looped = gateway({"decide": {"calibration": str(out)}})
    assert "veracity_gateway_error_bound 0.2" in looped.metrics()
    assert looped.ask(UNSTABLE_PROMPT).headers["x-veracity-decision"] == "abstain"
    assert looped.ask(STABLE_PROMPT).headers["x-veracity-decision"] == "answer"
    refused = CliRunner().invoke(main, ["calibrate", "--risk", "0.1", "--from-traffic", str(g.log)])
    assert refused.exit_code == 1 and "at least 29 are needed" in refused.output


def test_a_logprob_policy_decides_with_no_extra_call(gateway: Callable[..., Running]) -> None:
    g = gateway({"decide": {"score": "logprob", "logprob_min": -0.5}})
    sure = g.ask(STABLE_PROMPT)
    assert sure.headers["x-veracity-decision"] == "answer"
    data = sure.json()
    assert data["veracity"]["logprob"] == pytest.approx(-0.05)
    assert data["veracity"]["gamma"] is None and data["veracity"]["model_calls"] == 0
    assert "logprobs" not in data["choices"][0]  # asked for by the gateway, not by the client
    unsure = g.ask(UNSTABLE_PROMPT)
    assert unsure.headers["x-veracity-decision"] == "abstain"
    assert unsure.json()["veracity"]["decision_reason"] == "logprob -1.5 < -0.5"
    bodies = g.first.chat_bodies()
    assert len(bodies) == 2 and all(b["logprobs"] is True for b in bodies)  # no perturbed call


def test_logprob_and_gamma_together(gateway: Callable[..., Running]) -> None:
    g = gateway({"decide": {"score": "both", "gamma_max": 0.01, "logprob_min": -0.5}})
    sure = g.ask(STABLE_PROMPT).json()["veracity"]
    assert sure["decision"] == "answer" and sure["gamma"] == 0.0
    assert sure["logprob"] == pytest.approx(-0.05)
    assert "gamma 0 ≤ 0.01; logprob -0.05 ≥ -0.5" == sure["decision_reason"]
    assert g.ask(UNSTABLE_PROMPT).json()["veracity"]["decision"] == "abstain"


def test_tokens_and_cost_of_scoring(gateway: Callable[..., Running], tmp_path: Path) -> None:
    from veracity.prices import read_prices

    prices = tmp_path / "prices.toml"
    prices.write_text('[default]\ninput = 1.0\noutput = 2.0\n[models."other"]\ninput = 9.0\n')
    g = gateway({"decide": {"gamma_max": 0.01}}, prices=read_prices(prices))
    assert g.ask(UNSTABLE_PROMPT).headers["x-veracity-decision"] == "abstain"
    v = g.ask(STABLE_PROMPT).json()["veracity"]
    # three perturbed calls, each 7 prompt and 7 completion tokens (the mock's usage):
    # (21 × 1 + 21 × 2) / 1e6 USD
    assert v["tokens"] == {"prompt": 21, "completion": 21}
    assert v["cost_usd"] == pytest.approx(63e-6)
    metrics = g.metrics()
    assert 'veracity_gateway_scoring_tokens_sum{model="mock-model"} 84.0' in metrics
    assert 'veracity_gateway_scoring_cost_usd_total{model="mock-model"} 0.000126' in metrics
    from veracity.report.traffic import build_traffic_report

    assert wait_for_rows(g.log, 2)
    html = build_traffic_report(g.log, tmp_path / "traffic.html").read_text()
    section = html[html.index("Decisions and the cost of scoring"):]
    # per model: answer 1, abstain 1, escalate 0, 42 tokens a scored answer, USD 0.063 per 1,000
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", section)[:6]
    assert cells[:4] == ["mock-model", "1", "1", "0"]
    assert float(cells[4]) == 42 and float(cells[5]) == pytest.approx(0.063)
    assert read_prices(prices).cost("other", 1_000_000, 0) == 9.0


def test_bad_prices_are_refused(tmp_path: Path) -> None:
    from veracity.prices import read_prices

    bad = tmp_path / "p.toml"
    bad.write_text("[default]\ninput = -1\n")
    with pytest.raises(ConfigError, match="non-negative"):
        read_prices(bad)
    bad.write_text("[defaults]\n")
    with pytest.raises(ConfigError, match="unknown tables defaults"):
        read_prices(bad)
