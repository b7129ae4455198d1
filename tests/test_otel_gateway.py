"""OpenTelemetry traces of the gateway: span shape and attributes (the SDK's in-memory
exporter), the real OTLP/HTTP exporter into a receiver on 127.0.0.1 that decodes the protobuf
payload, an incoming traceparent joined, and no prompt, answer or key text by default."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from gateway_server import RunningApp  # noqa: E402
from mock_upstream import STABLE, MockUpstream, Reply, only  # noqa: E402
from veracity.errors import ConfigError  # noqa: E402
from veracity.serve import GatewaySettings, create_app  # noqa: E402
from veracity.serve.cli import gateway_tracing  # noqa: E402
from veracity.serve.tracing import Tracing, configure  # noqa: E402

UPSTREAM_KEY = "sk-upstream-CANARY-0tel"
GATEWAY_KEY = "gw-key-CANARY-0tel"
PROMPT = "Which river flows through Vienna? (secret-prompt-0tel)"
UNSTABLE = "Is this unstable? (secret-prompt-0tel)"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


class Traced:
    """A mock upstream and a gateway whose spans go to an in-memory exporter."""

    def __init__(self, mock: MockUpstream, running: RunningApp,
                 exporter: InMemorySpanExporter | None) -> None:
        self.mock = mock
        self.url = running.url
        self.exporter = exporter

    def chat(self, prompt: str = PROMPT, headers: dict[str, str] | None = None,
             **body: Any) -> httpx.Response:
        payload = {"model": "mock-model", "messages": [{"role": "user", "content": prompt}]} | body
        return httpx.post(self.url + "/v1/chat/completions", json=payload, timeout=20,
                          headers={"Authorization": f"Bearer {GATEWAY_KEY}"} | (headers or {}))

    def spans(self, count: int) -> list[ReadableSpan]:
        assert self.exporter is not None
        for _ in range(200):  # a stream's span ends after its last byte was sent
            if len(self.exporter.get_finished_spans()) >= count:
                break
            time.sleep(0.02)
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Traced]]:
    monkeypatch.setenv("MOCK_UPSTREAM_KEY", UPSTREAM_KEY)
    with ExitStack() as stack:

        def start(content: bool = False, tracing: Tracing | None = None, **overrides: Any) -> Traced:
            mock = stack.enter_context(MockUpstream())
            exporter = None
            if tracing is None:
                exporter = InMemorySpanExporter()
                tracing = configure(content, SimpleSpanProcessor(exporter))
            settings = GatewaySettings(**{
                "upstream": mock.url, "upstream_api_key_env": "MOCK_UPSTREAM_KEY",
                "embedder": "hash/default", "n": 3, "api_keys": (GATEWAY_KEY,), "log": None,
                "cache": tmp_path / "cache.sqlite", "timeout": 5.0, "shutdown_grace": 5.0} | overrides)
            running = stack.enter_context(RunningApp(create_app(settings, tracing=tracing)))
            return Traced(mock, running, exporter)

        yield start


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def exported_text(spans: list[ReadableSpan]) -> str:
    return "".join(s.to_json() for s in spans)


def test_request_span_joins_the_callers_trace(traced: Callable[..., Traced]) -> None:
    gw = traced()
    response = gw.chat(headers={"traceparent": TRACEPARENT}, temperature=0.5, max_tokens=40, seed=7)
    assert response.status_code == 200
    score = response.json()["veracity"]
    spans = by_name(gw.spans(4))
    assert set(spans) == {"chat mock-model", "veracity.perturbed mock-model", "veracity.score mock-model"}
    request = next(s for s in gw.spans(4) if s.kind == SpanKind.SERVER)
    answer = next(s for s in gw.spans(4) if s.kind == SpanKind.CLIENT and s.name == "chat mock-model")
    assert request.context is not None and request.parent is not None
    assert f"{request.context.trace_id:032x}" == TRACE_ID and f"{request.parent.span_id:016x}" == PARENT_ID
    attrs = dict(request.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.request.model"] == "mock-model"
    assert attrs["gen_ai.request.temperature"] == 0.5 and attrs["gen_ai.request.max_tokens"] == 40
    assert attrs["gen_ai.request.seed"] == 7
    assert attrs["gen_ai.usage.input_tokens"] == 7 and attrs["gen_ai.usage.output_tokens"] == 7
    assert attrs["http.response.status_code"] == 200
    assert attrs["veracity.gamma"] == 0.0 == score["gamma"]
    assert attrs["veracity.verdict"] == "trustworthy" and attrs["veracity.n"] == 3
    assert attrs["veracity.score_id"] == score["id"] and "veracity.p_correct" not in attrs
    for child in (answer, spans["veracity.perturbed mock-model"], spans["veracity.score mock-model"]):
        assert child.parent is not None and child.context is not None
        assert child.parent.span_id == request.context.span_id
        assert child.context.trace_id == request.context.trace_id
    called = dict(answer.attributes or {})
    assert called["server.address"] == "127.0.0.1" and called["gen_ai.provider.name"] == "openai_compatible"
    assert called["gen_ai.response.id"] == "chatcmpl-mock" and called["gen_ai.usage.output_tokens"] == 7
    assert tuple(called["gen_ai.response.finish_reasons"]) == ("stop",)
    perturbed = dict(spans["veracity.perturbed mock-model"].attributes or {})
    assert perturbed["veracity.requests"] == 3 and perturbed["veracity.failed"] == 0
    scored = spans["veracity.score mock-model"]
    assert dict(scored.attributes or {})["veracity.gamma"] == 0.0
    assert scored.start_time is not None and scored.end_time is not None
    took = score["timings"]["scoring_ms"] * 1e6
    assert scored.end_time - scored.start_time == pytest.approx(took, rel=0.01)
    # nothing the client or upstream said, and no key, leaves in a span by default
    text = exported_text(gw.spans(4))
    for secret in ("secret-prompt-0tel", STABLE, UPSTREAM_KEY, GATEWAY_KEY, "Bearer"):
        assert secret not in text


def test_without_traceparent_a_new_trace_starts(traced: Callable[..., Traced]) -> None:
    gw = traced()
    gw.chat(UNSTABLE)
    request = next(s for s in gw.spans(4) if s.kind == SpanKind.SERVER)
    assert request.parent is None
    attrs = dict(request.attributes or {})
    assert attrs["veracity.gamma"] > 0  # the mock's answer depends on the appended characters


def test_trace_content_exports_prompt_and_answer(traced: Callable[..., Traced]) -> None:
    gw = traced(content=True)
    gw.chat()
    spans = gw.spans(4)
    request = next(s for s in spans if s.kind == SpanKind.SERVER)
    attrs = dict(request.attributes or {})
    assert json.loads(str(attrs["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": PROMPT}]}]
    assert json.loads(str(attrs["gen_ai.output.messages"]))[0]["parts"][0]["content"] == STABLE
    scored = by_name(spans)["veracity.score mock-model"]
    assert list(dict(scored.attributes or {})["veracity.perturbed_answers"]) == [STABLE] * 3
    assert UPSTREAM_KEY not in exported_text(spans) and GATEWAY_KEY not in exported_text(spans)


def test_streamed_answer(traced: Callable[..., Traced]) -> None:
    gw = traced()
    with httpx.stream("POST", gw.url + "/v1/chat/completions", timeout=20,
                      headers={"Authorization": f"Bearer {GATEWAY_KEY}", "traceparent": TRACEPARENT},
                      json={"model": "mock-model", "stream": True,
                            "messages": [{"role": "user", "content": PROMPT}]}) as response:
        body = b"".join(response.iter_bytes())
    assert b'"veracity"' in body
    spans = gw.spans(4)
    request = next(s for s in spans if s.kind == SpanKind.SERVER)
    answer = next(s for s in spans if s.kind == SpanKind.CLIENT and s.name == "chat mock-model")
    attrs = dict(request.attributes or {})
    assert attrs["veracity.stream"] is True and attrs["veracity.verdict"] == "trustworthy"
    assert answer.end_time is not None and request.end_time is not None
    assert answer.end_time <= request.end_time
    assert "secret-prompt-0tel" not in exported_text(spans)


def test_async_score_is_a_child_of_the_request(traced: Callable[..., Traced]) -> None:
    gw = traced(mode="async")
    pending = gw.chat().json()["veracity"]
    for _ in range(200):
        done = httpx.get(gw.url + pending["url"], headers={"Authorization": f"Bearer {GATEWAY_KEY}"}).json()
        if done["status"] == "done":
            break
        time.sleep(0.02)
    spans = by_name(gw.spans(4))
    request = next(s for s in gw.spans(4) if s.kind == SpanKind.SERVER)
    scored = spans["veracity.score mock-model"]
    assert request.context is not None and scored.parent is not None
    assert scored.parent.span_id == request.context.span_id
    assert dict(scored.attributes or {})["veracity.verdict"] == "trustworthy"
    assert "veracity.gamma" not in dict(request.attributes or {})  # answered before it was scored


def test_failures_carry_their_kind_not_their_text(traced: Callable[..., Traced]) -> None:
    gw = traced()
    gw.mock.script(Reply(status=500, body={"error": {"message": f"overloaded by {PROMPT}"}},
                         match=only(PROMPT)))
    assert gw.chat().status_code == 500
    bad = httpx.post(gw.url + "/v1/chat/completions", json={"model": "m", "messages": []},
                     headers={"Authorization": f"Bearer {GATEWAY_KEY}"}, timeout=20)
    assert bad.status_code == 400
    spans = gw.spans(4)
    requests = [s for s in spans if s.kind == SpanKind.SERVER]
    failed = next(s for s in requests if dict(s.attributes or {}).get("http.response.status_code") == 500)
    attrs = dict(failed.attributes or {})
    assert failed.status.status_code == StatusCode.ERROR
    assert attrs["error.type"] == "http_500" and attrs["veracity.error_kind"] == "upstream_http_500"
    answer = next(s for s in spans if s.kind == SpanKind.CLIENT and s.name == "chat mock-model")
    assert answer.status.status_code == StatusCode.ERROR
    invalid = next(s for s in requests if dict(s.attributes or {}).get("http.response.status_code") == 400)
    assert dict(invalid.attributes or {})["veracity.error_kind"] == "invalid_request"
    assert invalid.status.status_code == StatusCode.UNSET  # a client's mistake, not the server's
    assert "secret-prompt-0tel" not in exported_text(spans)


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1 that decodes what it is sent."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["Content-Length"]))
                message = ExportTraceServiceRequest()
                message.ParseFromString(data)
                receiver.requests.append(message)
                receiver.headers.append(dict(self.headers.items()))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[tuple[str, Any, dict[str, Any]]]:
        """(service name, span, attributes) of every span received."""
        out = []
        for request in self.requests:
            for resource in request.resource_spans:
                service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        attrs = {a.key: getattr(a.value, a.value.WhichOneof("value"))
                                 for a in span.attributes}
                        out.append((service, span, attrs))
        return out


def test_otlp_http_export_into_a_receiver(monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=veracity-tests")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    tracing = gateway_tracing(False, False)  # what `veracity serve` does with these variables
    assert isinstance(tracing, Tracing)
    with ExitStack() as stack:
        mock = stack.enter_context(MockUpstream())
        monkeypatch.setenv("MOCK_UPSTREAM_KEY", UPSTREAM_KEY)
        settings = GatewaySettings(upstream=mock.url, upstream_api_key_env="MOCK_UPSTREAM_KEY",
                                   embedder="hash/default", n=2, api_keys=(GATEWAY_KEY,), log=None,
                                   no_cache=True)
        running = stack.enter_context(RunningApp(create_app(settings, tracing=tracing)))
        headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "traceparent": TRACEPARENT}
        body = {"model": "mock-model", "messages": [{"role": "user", "content": UNSTABLE}]}
        response = httpx.post(running.url + "/v1/chat/completions", timeout=20, headers=headers, json=body)
        assert response.status_code == 200
        gamma = response.json()["veracity"]["gamma"]
    # the app's shutdown flushed the batch processor into the receiver
    received = receiver.spans()
    receiver.server.shutdown()
    assert {service for service, _, _ in received} == {"veracity-gateway"}
    assert receiver.headers[0]["x-tenant"] == "veracity-tests"
    assert {k.lower(): v for k, v in receiver.headers[0].items()}["content-type"] == "application/x-protobuf"
    names = sorted(span.name for _, span, _ in received)
    assert names == ["chat mock-model", "chat mock-model", "veracity.perturbed mock-model",
                     "veracity.score mock-model"]
    assert all(span.trace_id.hex() == TRACE_ID for _, span, _ in received)
    [(_, request, attrs)] = [r for r in received if r[1].kind == r[1].SPAN_KIND_SERVER]
    assert request.parent_span_id.hex() == PARENT_ID
    assert attrs["veracity.gamma"] == pytest.approx(gamma) and gamma > 0
    assert attrs["veracity.n"] == 2 and attrs["gen_ai.request.model"] == "mock-model"
    raw = b"".join(r.SerializeToString() for r in receiver.requests)
    for secret in (b"secret-prompt-0tel", UPSTREAM_KEY.encode(), GATEWAY_KEY.encode()):
        assert secret not in raw


def test_configuration_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
                 "OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    assert gateway_tracing(False, False) is None  # nothing asked for: nothing imported or built
    with pytest.raises(ConfigError, match="--trace-content needs tracing"):
        gateway_tracing(False, True)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert gateway_tracing(True, False) is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ConfigError, match="unknown exporter 'zipkin'"):
        gateway_tracing(True, False)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigError, match="http/protobuf"):
        gateway_tracing(True, False)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert gateway_tracing(True, False) is None


def test_untraced_gateway_has_no_tracing_in_its_path(tmp_path: Path) -> None:
    settings = GatewaySettings(upstream="http://127.0.0.1:9/v1", embedder="hash/default", no_auth=True,
                               log=None, no_cache=True)
    app = create_app(settings)
    gateway = app.state.gateway
    assert gateway.tracing is None and type(gateway.upstream).__name__ == "HttpUpstream"
    assert all(m.cls.__name__ != "TraceChat" for m in app.user_middleware)


def test_the_sdks_sampler_is_honoured(traced: Callable[..., Traced], monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_TRACES_SAMPLER, as the SDK documents: a request left out records nothing, and a
    sampled caller's trace is followed (parentbased_always_off keeps what the caller sampled)."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    gw = traced()
    assert gw.chat().json()["veracity"]["verdict"] == "trustworthy"
    assert gw.spans(0) == []
    gw.chat(UNSTABLE, headers={"traceparent": TRACEPARENT})  # another prompt: nothing cached
    assert len(gw.spans(4)) == 4
