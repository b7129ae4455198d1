"""The gateway's tracer and OTLP encoder: spans as the SDK would make them, bytes that decode
to what the SDK's own encoder builds from the same spans."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra")

from opentelemetry import context, trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased  # noqa: E402
from opentelemetry.trace import (  # noqa: E402
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from veracity.serve.otlp import encode, varint  # noqa: E402
from veracity.serve.spans import GatewaySpan, GatewayTracer, SpanBatcher  # noqa: E402

REMOTE = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=True,
                     trace_flags=TraceFlags(TraceFlags.SAMPLED), trace_state=TraceState([("vendor", "x1")]))


def tracer(sampler: ParentBased | None = None) -> tuple[GatewayTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "enc-test"}), sampler=sampler,
                              shutdown_on_exit=False)
    return GatewayTracer(provider, SimpleSpanProcessor(exporter)), exporter


def test_varint_matches_the_wire_format() -> None:
    assert varint(0) == b"\x00" and varint(1) == b"\x01" and varint(127) == b"\x7f"
    assert varint(128) == b"\x80\x01" and varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"  # int64 -1: ten bytes, as protobuf writes it


def test_encoded_spans_decode_to_the_sdks_encoding() -> None:
    ours, exported = tracer()
    parent = trace.set_span_in_context(NonRecordingSpan(REMOTE))
    request = ours.start_span("chat m", context=parent, kind=SpanKind.SERVER,
                              attributes={"gen_ai.operation.name": "chat", "http.response.status_code": 200})
    token = context.attach(trace.set_span_in_context(request))
    try:
        child = ours.start_span("veracity.score m", attributes={"veracity.gamma": 0.25})
    finally:
        context.detach(token)
    child.set_attributes({"veracity.verdict": "uncertain", "veracity.ok": False, "veracity.n": -3,
                          "gen_ai.response.finish_reasons": ["stop", "length"], "ints": [1, 2],
                          "floats": (0.5, -1.5), "flags": [True, False], "text": "Wien über Alles ✓",
                          "empty": "", "zero": 0, "big": 2**62})
    child.add_event("retry", {"attempt": 2}, timestamp=1_700_000_000_000_000_000)
    child.add_link(SpanContext(0x1, 0x2, is_remote=True, trace_flags=TraceFlags(1)), {"why": "batch"})
    child.set_status(Status(StatusCode.ERROR, "upstream_http_500"))
    child.end()
    request.set_attribute("veracity.gamma", 0.125)
    request.end()
    # a new trace (no parent, no trace state) and a child without events: the fast path whole
    root = ours.start_span("chat m", kind=SpanKind.SERVER, attributes={"http.response.status_code": 200})
    token = context.attach(trace.set_span_in_context(root))
    try:
        under = ours.start_span("veracity.perturbed m", attributes={"veracity.requests": 3})
    finally:
        context.detach(token)
    under.set_attributes({"veracity.gamma": 0.5, "veracity.ok": True, "same": 1, "mixed": [1, True],
                          "reasons": ("stop",), "verdict": "uncertain"})
    under.set_status(Status(StatusCode.ERROR, "perturbed_calls"))
    under.end()
    root.end()
    # spans of the SDK's own tracer too: another resource and scope, grouped apart
    provider = TracerProvider(resource=Resource.create({"service.name": "other", "k": 3}),
                              shutdown_on_exit=False)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    sdk = provider.get_tracer("elsewhere", "1.2", schema_url="https://example.test/schema")
    with sdk.start_as_current_span("sdk span", kind=SpanKind.CLIENT, attributes={"a": "b"}):
        pass
    spans: list[ReadableSpan] = [*exported.get_finished_spans(), *memory.get_finished_spans()]
    assert [type(s) for s in spans[:4]] == [GatewaySpan] * 4
    data = encode(spans)
    assert encode(spans) == data  # the second time from what was remembered: the same bytes
    decoded = ExportTraceServiceRequest.FromString(data)
    assert decoded == encode_spans(spans)
    assert len(decoded.resource_spans) == 2
    [server] = [s for s in decoded.resource_spans[0].scope_spans[0].spans
                if s.kind == s.SPAN_KIND_SERVER and s.parent_span_id]
    assert server.parent_span_id.hex() == "00f067aa0ba902b7" and server.trace_state == "vendor=x1"
    assert server.flags == 0x300  # the parent came from another process


def test_children_follow_their_request_and_the_sampler_decides_the_request() -> None:
    ours, exported = tracer()
    request = ours.start_span("chat m", kind=SpanKind.SERVER)
    assert isinstance(request, GatewaySpan) and request.tracer is ours
    child = ours.start_span("chat m", context=trace.set_span_in_context(request), kind=SpanKind.CLIENT)
    assert child.get_span_context().trace_id == request.get_span_context().trace_id
    assert isinstance(child, GatewaySpan) and child.parent == request.get_span_context()
    child.end()
    child.set_attribute("late", 1)  # after the end: ignored, as the SDK does
    child.end()  # and a second end is too
    request.end()
    assert [s.name for s in exported.get_finished_spans()] == ["chat m", "chat m"]
    assert "late" not in dict(exported.get_finished_spans()[0].attributes or {})

    dropped, nothing = tracer(ParentBased(ALWAYS_OFF))
    root = dropped.start_span("chat m", kind=SpanKind.SERVER)
    assert not root.is_recording() and not root.get_span_context().trace_flags.sampled
    joined = dropped.start_span("chat m", context=trace.set_span_in_context(NonRecordingSpan(REMOTE)))
    assert joined.is_recording()  # a sampled caller's trace is followed
    under = dropped.start_span("veracity.score m", context=trace.set_span_in_context(joined))
    assert under.is_recording() and under.get_span_context().trace_id == REMOTE.trace_id
    under.end()
    joined.end()
    assert len(nothing.get_finished_spans()) == 2


def test_many_distinct_values_of_a_key_encode_as_the_sdk_does() -> None:
    """Past the values remembered per key (ids, counts) fields are written each time."""
    ours, exported = tracer()
    root = ours.start_span("chat m", kind=SpanKind.SERVER)
    assert isinstance(root, GatewaySpan)
    for i in range(150):
        ours.child(root, "veracity.score m", attributes={
            "veracity.score_id": f"vrc-{i:04x}-é", "gen_ai.usage.input_tokens": 100 + 997 * i,
            "gen_ai.response.finish_reasons": ["stop", f"length-{i}"], "veracity.verdict": "uncertain"}).end()
    root.end()
    spans = list(exported.get_finished_spans())
    first, again = encode(spans), encode(spans)
    assert first == again
    assert ExportTraceServiceRequest.FromString(first) == encode_spans(spans)


class Batches(InMemorySpanExporter):
    """An in-memory exporter that also keeps the size of each batch and whether it was shut down."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []
        self.closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.sizes.append(len(spans))
        return super().export(spans)

    def shutdown(self) -> None:
        self.closed = True


def wait_for(check: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


def test_span_batcher_exports_full_batches_then_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # only full batches until shutdown
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    exporter = Batches()
    batcher = SpanBatcher(exporter)
    provider = TracerProvider(shutdown_on_exit=False)
    ours = GatewayTracer(provider, batcher)
    for i in range(6):
        ours.start_span(f"s{i}").end()
    assert wait_for(lambda: exporter.sizes == [4])  # the full batch, without waiting for the delay
    time.sleep(3 * SpanBatcher.POLL)
    assert exporter.sizes == [4]  # two left: not a batch yet
    batcher.shutdown()
    assert exporter.sizes == [4, 2] and exporter.closed
    assert [s.name for s in exporter.get_finished_spans()] == [f"s{i}" for i in range(6)]  # oldest first


def test_span_batcher_delay_and_a_full_queue(monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    exporter = Batches()
    batcher = SpanBatcher(exporter)
    ours = GatewayTracer(TracerProvider(shutdown_on_exit=False), batcher)
    ours.start_span("alone").end()
    assert wait_for(lambda: exporter.sizes == [1])  # less than a batch: sent once the delay passed
    batcher.shutdown()

    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "3")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "nonsense")  # logged; the default, capped at 3
    exporter = Batches()
    batcher = SpanBatcher(exporter)
    assert batcher.batch == 3 and "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" in caplog.text
    ours = GatewayTracer(TracerProvider(shutdown_on_exit=False), batcher)
    with batcher._exporting:  # as if an export were under way: the queue fills up
        for i in range(5):
            ours.start_span(f"s{i}").end()
        assert batcher.dropped == 2 and exporter.sizes == []
    with caplog.at_level("WARNING"):
        assert batcher.force_flush()  # (or the thread, woken at half the queue, was first)
    assert "2 spans dropped" in caplog.text
    assert [s.name for s in exporter.get_finished_spans()] == ["s2", "s3", "s4"]  # the oldest dropped
    batcher.shutdown()  # wakes the thread at once
    assert exporter.closed and not batcher._thread.is_alive()
