"""gen_ai.evaluation.result events under the chat span, decoded from a real OTLP/HTTP receiver."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra")

from gateway_server import RunningApp  # noqa: E402
from mock_upstream import MockUpstream  # noqa: E402
from test_otel_gateway import Receiver  # noqa: E402
from veracity.decisions.policy import parse_policy  # noqa: E402
from veracity.serve import GatewaySettings, create_app  # noqa: E402
from veracity.serve.cli import gateway_tracing  # noqa: E402

KEY = "gw-key-events"


def _value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value"))


def test_evaluation_events_of_an_escalated_request(monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    tracing = gateway_tracing(False, False)
    with ExitStack() as stack:
        first = stack.enter_context(MockUpstream())
        stronger = stack.enter_context(MockUpstream(model="strong-model", stable=True))
        policy = parse_policy({"decide": {"gamma_max": 0.01, "otherwise": "escalate"},
                               "escalate": {"upstream": stronger.url, "model": "strong-model",
                                            "api_key_env": ""}})
        settings = GatewaySettings(upstream=first.url, upstream_api_key_env="", embedder="hash/default",
                                   n=2, api_keys=(KEY,), log=None, no_cache=True, policy=policy)
        running = stack.enter_context(RunningApp(create_app(settings, tracing=tracing)))
        body = {"model": "mock-model",
                "messages": [{"role": "user", "content": "An unstable question (secret-events)?"}]}
        response = httpx.post(running.url + "/v1/chat/completions", json=body, timeout=20,
                              headers={"Authorization": f"Bearer {KEY}"})
        assert response.status_code == 200
        veracity = response.json()["veracity"]
    receiver.server.shutdown()  # the app's shutdown flushed the spans into the receiver
    [chat] = [span for _, span, _ in receiver.spans() if span.kind == span.SPAN_KIND_SERVER]
    events = [{a.key: _value(a.value) for a in e.attributes} for e in chat.events
              if e.name == "gen_ai.evaluation.result"]
    assert [(e["gen_ai.evaluation.name"], e.get("gen_ai.evaluation.score.label"))
            for e in events] == [("veracity.gamma", "untrustworthy"),
                                 ("veracity.decision", "escalate"),
                                 ("veracity.gamma", "trustworthy"),
                                 ("veracity.decision", "answer")]
    assert events[0]["gen_ai.evaluation.score.value"] == pytest.approx(veracity["gamma"])
    assert events[0]["gen_ai.response.id"] == veracity["id"]
    assert "perturbed answers" in events[0]["gen_ai.evaluation.explanation"]
    assert events[1]["gen_ai.evaluation.explanation"] == veracity["decision_reason"]
    assert events[2]["gen_ai.evaluation.score.value"] == 0.0
    assert events[3]["gen_ai.response.id"] == veracity["id"] + "-escalated"
    raw = b"".join(r.SerializeToString() for r in receiver.requests)
    assert b"secret-events" not in raw
