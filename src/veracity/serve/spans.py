"""A tracer for the gateway's own spans: the SDK's sampler, ids, resource and span
processors, without the SDK span's per-attribute checks, lock and copy at the end.

The SDK's span validates and copies every attribute value under a lock and makes a second,
read-only span when it ends: about 10 us an attribute and 30 us a span, for values this
gateway builds itself (strings, numbers, lists of strings) on its one event-loop thread.
A :class:`GatewaySpan` keeps them in a dict and is its own read-only view, so the span
processors (batch, simple, in-memory) and exporters receive it as they would an SDK span.
What the SDK's environment configures still applies: ``OTEL_TRACES_SAMPLER`` and its
argument, the resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), the batch
processor's ``OTEL_BSP_*``. Not applied: span limits (``OTEL_SPAN_ATTRIBUTE_*``): the
gateway sets fewer than 30 attributes a span, and long values only with ``--trace-content``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util import types

log = logging.getLogger(__name__)
_UNSET = Status(StatusCode.UNSET)
_RANDOM = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)  # W3C trace context level 2 (SDK >= 1.40)


class GatewaySpan(trace.Span, ReadableSpan):
    """A recording span, and once ended the read-only span its processors are given."""

    def __init__(self, name: str, context: SpanContext, parent: SpanContext | None,
                 tracer: GatewayTracer, kind: SpanKind, attributes: dict[str, Any],
                 links: tuple[Link, ...], start_time: int) -> None:
        ReadableSpan.__init__(self, name, context, parent, tracer.resource, attributes, [], links,
                              kind, None, _UNSET, start_time, None, tracer.scope)
        self.tracer = tracer
        self._processor = tracer.processor

    def get_span_context(self) -> SpanContext:
        return self._context  # type: ignore[return-value]  # always set in __init__

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        if self._end_time is None:
            self._attributes.update(attributes)  # type: ignore[union-attr]  # a dict, from __init__

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        if self._end_time is None:
            self._attributes[key] = value  # type: ignore[index]

    def add_event(self, name: str, attributes: types.Attributes = None,
                  timestamp: int | None = None) -> None:
        if self._end_time is None:
            self._events.append(Event(name, attributes, timestamp or time.time_ns()))  # type: ignore[attr-defined]

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self._end_time is None and context.is_valid:
            self._links = (*self._links, Link(context, attributes))

    def update_name(self, name: str) -> None:
        if self._end_time is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end_time is not None or self._status.status_code is StatusCode.OK:
            return  # OK is final, as the API says
        self._status = status if isinstance(status, Status) else Status(status, description)

    def record_exception(self, exception: BaseException, attributes: types.Attributes = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        """The exception's type only: its message may quote a prompt."""
        self.add_event("exception", {"exception.type": type(exception).__name__, **(attributes or {})},
                       timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end_time is not None:
            return  # a second end (a stream closed after it ran out) changes nothing
        self._end_time = end_time if end_time is not None else time.time_ns()
        self._processor.on_end(self)


class GatewayTracer(trace.Tracer):
    """Spans sampled and identified as the SDK's tracer would, ended into ``processor``."""

    def __init__(self, provider: TracerProvider, processor: SpanProcessor,
                 name: str = "veracity.serve") -> None:
        self.sampler = provider.sampler
        self.ids = provider.id_generator
        self.resource = provider.resource
        self.scope = InstrumentationScope(name)
        self.processor = processor
        is_random = getattr(self.ids, "is_trace_id_random", None)
        self._random = _RANDOM if callable(is_random) and is_random() else 0

    def start_span(self, name: str, context: context_api.Context | None = None,
                   kind: SpanKind = SpanKind.INTERNAL, attributes: types.Attributes = None,
                   links: Sequence[Link] | None = (), start_time: int | None = None,
                   record_exception: bool = True, set_status_on_exception: bool = True) -> trace.Span:
        current = trace.get_current_span(context)
        if isinstance(current, GatewaySpan) and current.tracer is self:
            return self.child(current, name, kind, attributes, links, start_time)
        parent: SpanContext | None = current.get_span_context()
        if parent is not None and not parent.is_valid:
            parent = None
        if parent is None:
            trace_id, random = self.ids.generate_trace_id(), self._random
        else:
            trace_id, random = parent.trace_id, parent.trace_flags & _RANDOM
        sampled = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
        flags = TraceFlags((TraceFlags.SAMPLED if sampled.decision is Decision.RECORD_AND_SAMPLE else 0)
                           | random)
        span_context = SpanContext(trace_id, self.ids.generate_span_id(), is_remote=False,
                                   trace_flags=flags, trace_state=sampled.trace_state)
        if sampled.decision is Decision.DROP:
            return trace.NonRecordingSpan(span_context)
        chosen = sampled.attributes
        return GatewaySpan(name, span_context, parent, self, kind, dict(chosen) if chosen else {},
                           tuple(links or ()), start_time or time.time_ns())

    def child(self, parent: GatewaySpan, name: str, kind: SpanKind = SpanKind.INTERNAL,
              attributes: types.Attributes = None, links: Sequence[Link] | None = (),
              start_time: int | None = None) -> trace.Span:
        """A span under one of this tracer's own: sampled as its parent was, without asking
        the sampler again (each sampler the SDK's environment can name decides a local
        child as its parent: always on or off, by trace id, or following the parent)."""
        above = parent._context
        assert above is not None  # set in GatewaySpan.__init__
        span_context = SpanContext(above.trace_id, self.ids.generate_span_id(), is_remote=False,
                                   trace_flags=above.trace_flags, trace_state=above.trace_state)
        if not above.trace_flags.sampled:
            return trace.NonRecordingSpan(span_context)
        return GatewaySpan(name, span_context, above, self, kind, dict(attributes) if attributes else {},
                           tuple(links or ()), start_time or time.time_ns())

    @contextmanager
    def start_as_current_span(  # type: ignore[override]  # the API's is a decorator too; unused as one
            self, name: str, context: context_api.Context | None = None,
            kind: SpanKind = SpanKind.INTERNAL, attributes: types.Attributes = None,
            links: Sequence[Link] | None = (), start_time: int | None = None,
            record_exception: bool = True, set_status_on_exception: bool = True,
            end_on_exit: bool = True) -> Iterator[trace.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                            set_status_on_exception=set_status_on_exception) as current:
            yield current

    def shutdown(self) -> None:
        self.processor.shutdown()
