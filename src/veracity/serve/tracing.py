"""OpenTelemetry traces of the gateway (``pip install 'veracity[otel]'``).

One SERVER span per ``POST /v1/chat/completions`` named ``chat {model}`` after the GenAI
semantic conventions (``gen_ai.operation.name``, ``gen_ai.request.model``, token usage, ...),
joined to the caller's trace when the request carries a W3C ``traceparent``. Its children:
the answer's upstream call, the perturbed calls, and the scoring. gamma, the verdict,
P(correct), N and the kind of any failure go on the request span (and on the score span,
which in async mode is the only one still open when the score is known).

Never exported: prompt or answer text (unless ``trace_content``), request headers other
than the trace context, keys, error messages (which may quote a prompt). Exporters come from
the standard environment (``OTEL_TRACES_EXPORTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, ...).
Nothing here is imported unless tracing is configured: without it the gateway pays nothing.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AnyValue
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from veracity.backends.base import Outcome
from veracity.errors import BackendError, ConfigError
from veracity.methods.gamma.calibration.trust import TrustScore
from veracity.registry import resolve
from veracity.serve.spans import GatewaySpan, GatewayTracer, SpanBatcher
from veracity.serve.upstream import Stream, Upstream, UpstreamError
from veracity.serve.wire import ChatCompletion, ChatRequest, ModelList
from veracity.types import Generation, GenRequest

log = logging.getLogger(__name__)
CHAT_PATH = "/v1/chat/completions"
TRACE_HEADERS = frozenset((b"traceparent", b"tracestate", b"baggage"))
"""The only request headers a span ever sees (W3C trace context and baggage)."""
SAMPLING = (("temperature", "gen_ai.request.temperature"), ("top_p", "gen_ai.request.top_p"),
            ("max_tokens", "gen_ai.request.max_tokens"),
            ("max_completion_tokens", "gen_ai.request.max_tokens"), ("seed", "gen_ai.request.seed"),
            ("presence_penalty", "gen_ai.request.presence_penalty"),
            ("frequency_penalty", "gen_ai.request.frequency_penalty"))
_SAMPLING_KEYS = frozenset(key for key, _ in SAMPLING)
STATUS_KINDS = {400: "invalid_request", 401: "unauthorized", 404: "not_found", 429: "at_capacity"}
SCORE_ERRORS = (("no text answer", "no_answer"), ("perturbed calls failed", "perturbed_calls"),
                ("gamma is undefined", "undefined"), ("score queue was full", "queue_full"),
                ("only text messages", "unscorable_request"), ("last message must be", "unscorable_request"),
                ("empty prompt", "unscorable_request"), ("calibration", "calibration"))
"""The kind of a scoring failure, from the start of the gateway's own messages (the message
itself is never exported: an upstream's error may quote the prompt)."""

_REQUEST: contextvars.ContextVar[Span | None] = contextvars.ContextVar("veracity_request_span", default=None)
"""The request span of the exchange being handled (its children change the current span)."""


Attributes = dict[str, AnyValue]
"""A span's or an event's attributes, as OpenTelemetry types their values."""

EVALUATION_EVENT = "gen_ai.evaluation.result"
"""The OpenTelemetry GenAI semantic conventions' event for an evaluation of a model's output."""


def evaluation_events(score: TrustScore, logprob: float | None = None) -> list[Attributes]:
    """The ``gen_ai.evaluation.result`` events of a score (GenAI semantic conventions:
    ``gen_ai.evaluation.name``, ``.score.value``, ``.score.label``, ``.explanation``): γ with
    its verdict, the log-probability when the policy used it, and the decision with its
    reason. Numbers and fixed words only: never a prompt or answer text."""
    base: Attributes = {"gen_ai.response.id": str(score.id)} if score.id else {}
    gamma: Attributes = {**base, "gen_ai.evaluation.name": "veracity.gamma",
                             "gen_ai.evaluation.score.label": score.verdict}
    if score.gamma is not None:
        gamma["gen_ai.evaluation.score.value"] = float(score.gamma)
        gamma["gen_ai.evaluation.explanation"] = (
            f"harmonic gamma over {score.n} perturbed answers ({score.form} form); "
            f"lower is more trustworthy")
    elif score.error:
        gamma["gen_ai.evaluation.explanation"] = (
            f"not scored: {score.error_kind or score_error_kind(score.error)}")
    events = [gamma] if score.n else []
    if logprob is not None:
        events.append({**base, "gen_ai.evaluation.name": "veracity.logprob",
                       "gen_ai.evaluation.score.value": float(logprob),
                       "gen_ai.evaluation.explanation": "mean token log-probability of the answer"})
    decision: Attributes = {**base, "gen_ai.evaluation.name": "veracity.decision",
                "gen_ai.evaluation.score.label": score.decision}
    if score.decision_reason:
        decision["gen_ai.evaluation.explanation"] = score.decision_reason
    events.append(decision)
    return events


def score_error_kind(message: str) -> str:
    """A short label for a scoring failure message."""
    return next((kind for needle, kind in SCORE_ERRORS if needle in message), "scoring_error")


def _messages(messages: Any) -> str:
    """Chat messages in the GenAI conventions' JSON shape (``gen_ai.input.messages``)."""
    out = []
    for m in messages if isinstance(messages, list) else []:
        if isinstance(m, dict) and isinstance(m.get("content"), str):
            out.append({"role": str(m.get("role")), "parts": [{"type": "text", "content": m["content"]}]})
    return json.dumps(out, ensure_ascii=False)


def _output(text: str, finish: str | None) -> str:
    message: dict[str, Any] = {"role": "assistant", "parts": [{"type": "text", "content": text}]}
    if finish:
        message["finish_reason"] = finish
    return json.dumps([message], ensure_ascii=False)


def _response_attributes(data: ChatCompletion) -> Attributes:
    """Response id, model, finish reasons and token usage of a chat completion."""
    out: Attributes = {}
    if isinstance(ident := data.get("id"), str):
        out["gen_ai.response.id"] = ident
    if isinstance(model := data.get("model"), str):
        out["gen_ai.response.model"] = model
    choices = data.get("choices")
    if isinstance(choices, list):
        reasons = [str(c["finish_reason"]) for c in choices
                   if isinstance(c, dict) and c.get("finish_reason") is not None]
        if reasons:
            out["gen_ai.response.finish_reasons"] = reasons
    usage = data.get("usage")
    if isinstance(usage, dict):
        for key, name in (("prompt_tokens", "gen_ai.usage.input_tokens"),
                          ("completion_tokens", "gen_ai.usage.output_tokens")):
            if isinstance(usage.get(key), int):
                out[name] = usage[key]
    return out


class Tracing:
    """The gateway's tracer and what it records; ``content``: also prompt and answer text."""

    def __init__(self, tracer: GatewayTracer, content: bool = False) -> None:
        self.tracer = tracer
        self.content = content

    def shutdown(self) -> None:
        """Export what is still buffered and stop the exporters (blocks: call off the loop)."""
        self.tracer.shutdown()

    def wrap(self, upstream: Upstream) -> TracedUpstream:
        return TracedUpstream(upstream, self)

    def child(self, name: str, kind: SpanKind = SpanKind.INTERNAL, attributes: Attributes | None = None,
              start_time: int | None = None) -> Span:
        """A span under the request span of the exchange being handled (``attributes``: the
        span's own from then on); outside one, under the current span."""
        request = _REQUEST.get()
        if type(request) is GatewaySpan and request.tracer is self.tracer:
            return self.tracer.child(request, name, kind, attributes, None, start_time)
        if request is not None and type(request) is not GatewaySpan:
            return request  # left out by the sampler: so are its children
        return self.tracer.start_span(name, kind=kind, attributes=attributes, start_time=start_time)

    @staticmethod
    def request_span() -> Span | None:
        span = _REQUEST.get()
        return span if span is not None and span.is_recording() else None

    def asked(self, body: ChatRequest) -> None:
        """A valid chat request: its model and sampling on the request span."""
        span = self.request_span()
        if span is None:
            return
        model = body["model"]
        span.update_name(f"chat {model}")
        attributes: Attributes = {"gen_ai.request.model": model,
                                      "veracity.stream": bool(body.get("stream"))}
        if not _SAMPLING_KEYS.isdisjoint(body):
            for key, name in SAMPLING:
                value = body.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    attributes[name] = value
        if self.content:
            attributes["gen_ai.input.messages"] = _messages(body.get("messages"))
        span.set_attributes(attributes)

    def scored(self, score: TrustScore, answer: str | None, logprob: float | None = None) -> None:
        """A finished (or failed) score: a ``veracity.score`` span over its scoring time, and
        gamma, the verdict and P(correct) on it and on the request span while it is open;
        ``gen_ai.evaluation.result`` events (:func:`evaluation_events`) on the request span
        (on the score span once the request span has ended: async mode)."""
        held = _REQUEST.get()
        if type(held) is not GatewaySpan:
            return  # not traced, or left out by the sampler
        events = evaluation_events(score, logprob)
        result: Attributes = {"veracity.verdict": score.verdict}
        if score.gamma is not None:
            result["veracity.gamma"] = float(score.gamma)
        if score.p_correct is not None:
            result["veracity.p_correct"] = float(score.p_correct)
        if score.error:
            result["veracity.error_kind"] = str(score.error_kind or score_error_kind(score.error))
        if held.is_recording():
            held.set_attributes(result)
            held.set_attributes({"veracity.score_id": score.id, "veracity.n": score.n,
                                 "veracity.model_calls": score.model_calls})
            if self.content and answer is not None:
                held.set_attribute("gen_ai.output.messages", _output(answer, None))
            for attributes in events:
                held.add_event(EVALUATION_EVENT, attributes)
        timings = score.timings
        embedding = timings.get("embedding_ms")
        if isinstance(embedding, (int, float)):
            result["veracity.embedding_ms"] = float(embedding)
        if self.content:
            result["veracity.perturbed_answers"] = [str(a) for a in score.perturbed_answers]
        end = time.time_ns()
        start = end - int(1e6 * float(timings.get("scoring_ms", 0.0)))
        span = self.tracer.child(held, f"veracity.score {score.model}", attributes=result,
                                 start_time=start)
        if not held.is_recording():
            for attributes in events:
                span.add_event(EVALUATION_EVENT, attributes)
        if score.error:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end)

    def bind(self, job: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """``job`` run later (async mode's score queue) inside this request's trace."""
        captured, request = context.get_current(), _REQUEST.get()

        async def bound() -> None:
            token, held = context.attach(captured), _REQUEST.set(request)
            try:
                await job()
            finally:
                _REQUEST.reset(held)
                context.detach(token)

        return bound


class TraceChat:
    """ASGI middleware: the request span of every chat completion, current while it is handled."""

    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != CHAT_PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        carrier: dict[str, str] = {}
        for k, v in scope["headers"]:
            if k in TRACE_HEADERS:
                carrier[k.decode("latin-1")] = v.decode("latin-1")
        parent = propagate.extract(carrier) if carrier else context.get_current()
        span = self.tracing.tracer.start_span(
            "chat", context=parent, kind=SpanKind.SERVER,
            attributes={"gen_ai.operation.name": "chat", "http.request.method": "POST",
                        "url.path": CHAT_PATH})
        token, held = context.attach(trace.set_span_in_context(span, parent)), _REQUEST.set(span)
        status = 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            raise
        finally:
            span.set_attribute("http.response.status_code", status)
            if status in STATUS_KINDS:
                span.set_attribute("veracity.error_kind", STATUS_KINDS[status])
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
                if "error.type" not in getattr(span, "attributes", {}):
                    span.set_attribute("error.type", str(status))
            span.end()
            _REQUEST.reset(held)
            context.detach(token)


class TracedStream(Stream):
    """An upstream stream whose answer span ends when the stream is closed or read to its end."""

    def __init__(self, inner: Stream, span: Span) -> None:
        super().__init__(self._chunks(inner.chunks), inner.response)
        self._inner = inner
        self._span = span

    async def _chunks(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                yield chunk
        except UpstreamError as exc:
            _failed(self._span, exc)
            raise
        finally:
            self._span.end()  # a second end() is ignored by the SDK

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._span.end()


def _failed(span: Span, exc: UpstreamError) -> None:
    span.set_attribute("error.type", exc.kind)
    span.set_status(Status(StatusCode.ERROR))
    request = Tracing.request_span()
    if request is not None:
        request.set_attribute("veracity.error_kind", f"upstream_{exc.kind}")
        request.set_attribute("error.type", exc.kind)


class TracedUpstream:
    """An upstream whose answer and perturbed calls are child spans of the request span."""

    def __init__(self, inner: Upstream, tracing: Tracing) -> None:
        self.inner = inner
        self.tracing = tracing
        self.name = inner.name
        self.overlaps_answer = inner.overlaps_answer
        self.key_ignored = bool(getattr(inner, "key_ignored", False))  # read by `veracity serve`
        self.scoring_key = inner.scoring_key  # untraced, and called for every request: no wrapper
        base = getattr(inner, "base_url", None)
        self._server: Attributes = {}
        self._made: dict[str, Attributes] = {}
        if isinstance(base, str):
            parts = urlsplit(base)
            self._server = {"server.address": parts.hostname or ""}
            if parts.port:
                self._server["server.port"] = parts.port
            host = parts.hostname or ""
            self._provider = "openai" if host.endswith("openai.com") else "openai_compatible"
        else:
            self._provider = resolve(inner.name).provider

    def _attributes(self, model: str) -> Attributes:
        """The client span's first attributes (a copy of those made for the model before)."""
        made = self._made.get(model)
        if made is None:
            if len(self._made) >= 256:  # model names come from clients
                self._made.clear()
            made = self._made[model] = {"gen_ai.operation.name": "chat",
                                        "gen_ai.provider.name": self._provider,
                                        "gen_ai.request.model": model, **self._server}
        return made.copy()

    async def start(self) -> None:
        await self.inner.start()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def models(self) -> ModelList:
        return await self.inner.models()

    def _opened(self, body: ChatRequest) -> Span:
        """The client span of an upstream call."""
        model = str(body.get("model"))
        return self.tracing.child(f"chat {model}", SpanKind.CLIENT, self._attributes(model))

    @staticmethod
    def _unanswered(span: Span, exc: BaseException) -> None:
        """The span of a call that raised, ended (marked when the upstream said why)."""
        if isinstance(exc, UpstreamError):
            _failed(span, exc)
        span.end()

    async def chat(self, body: ChatRequest) -> ChatCompletion:
        span = self._opened(body)
        try:  # awaited here, not in a helper: one coroutine fewer to resume at each step
            data = await self.inner.chat(body)
        except BaseException as exc:
            self._unanswered(span, exc)
            raise
        if span.is_recording():
            found = _response_attributes(data)
            span.set_attributes(found)
            request = self.tracing.request_span()
            if request is not None:
                request.set_attributes({k: v for k, v in found.items() if k.startswith("gen_ai.usage.")})
        span.end()
        return data

    async def stream(self, body: ChatRequest) -> Stream:
        span = self._opened(body)
        try:
            inner = await self.inner.stream(body)
        except BaseException as exc:
            self._unanswered(span, exc)
            raise
        return TracedStream(inner, span)

    async def perturbed(self, model: str, requests: Sequence[GenRequest]) -> list[Outcome]:
        span = self.tracing.child(f"veracity.perturbed {model}", attributes={
            "gen_ai.request.model": model, "veracity.requests": len(requests)})
        try:
            outcomes = await self.inner.perturbed(model, requests)
        except BaseException:
            span.set_status(Status(StatusCode.ERROR))
            span.end()
            raise
        failed: list[Outcome] = []
        read = written = 0
        for outcome in outcomes:
            if isinstance(outcome, Generation):
                read += outcome.prompt_tokens
                written += outcome.completion_tokens
            else:
                failed.append(outcome)
        found: Attributes = {"veracity.failed": len(failed)}
        if read:
            found["gen_ai.usage.input_tokens"] = read
        if written:
            found["gen_ai.usage.output_tokens"] = written
        if failed:
            found["error.type"] = type(failed[0]).__name__ if isinstance(failed[0], BackendError) else "error"
            span.set_status(Status(StatusCode.ERROR))
        span.set_attributes(found)
        span.end()
        return outcomes


def _exporters() -> list[SpanExporter]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (default otlp), as the SDK documents."""
    named = os.environ.get("OTEL_TRACES_EXPORTER", "otlp")
    names = [n.strip().lower() for n in named.split(",") if n.strip()]
    out: list[SpanExporter] = []
    for name in names:
        if name == "none":
            continue
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            out.append(ConsoleSpanExporter())
        elif name == "otlp":
            protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
            if protocol != "http/protobuf":
                raise ConfigError(f"OTLP protocol '{protocol}' is not supported by veracity serve: "
                                  "use http/protobuf (OTEL_EXPORTER_OTLP_PROTOCOL)")
            from veracity.serve.otlp import OTLPExporter

            out.append(OTLPExporter())  # endpoint, headers, timeout: from the environment
        else:
            raise ConfigError(f"OTEL_TRACES_EXPORTER: unknown exporter '{name}' (otlp, console, none)")
    return out


def configure(content: bool = False, processor: SpanProcessor | None = None) -> Tracing | None:
    """The gateway's tracing from the OpenTelemetry environment; None when the SDK is
    disabled (``OTEL_SDK_DISABLED=true``) or no exporter is left (``OTEL_TRACES_EXPORTER=none``).
    ``processor``: used instead of the environment's exporters (tests)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    named = {"service.name": "veracity-gateway"}
    resource = os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in resource:  # the user's name wins
        named = {}
    processors: list[SpanProcessor] = ([processor] if processor is not None
                                       else [SpanBatcher(e) for e in _exporters()])
    if not processors:
        return None
    if len(processors) > 1:
        multiple = SynchronousMultiSpanProcessor()  # type: ignore[no-untyped-call]
        for p in processors:
            multiple.add_span_processor(p)
        processors = [multiple]
    # the SDK's provider reads the sampler, id generator and resource from the environment
    provider = TracerProvider(resource=Resource.create(named), shutdown_on_exit=False)
    return Tracing(GatewayTracer(provider, processors[0]), content)
