"""A tracer for the gateway's own spans: the SDK's sampler, ids, resource and span
processors, without the SDK span's per-attribute checks, lock and copy at the end.

The SDK's span validates and copies every attribute value under a lock and makes a second,
read-only span when it ends: about 10 us an attribute and 30 us a span, for values this
gateway builds itself (strings, numbers, lists of strings) on its one event-loop thread.
A :class:`GatewaySpan` is a plain record: its ids as ints (the ``SpanContext`` objects made
only when an SDK processor or exporter asks for them), its attributes in a dict, and it is
its own read-only view, so the span processors (batch, simple, in-memory) and exporters
receive it as they would an SDK span. :class:`SpanBatcher` is the batch processor for these
records: ending a span appends it to a queue; the export, encoding included, runs on the
processor's own thread.
What the SDK's environment configures still applies: ``OTEL_TRACES_SAMPLER`` and its
argument, the resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), the batch
processor's ``OTEL_BSP_*``. Not applied: span limits (``OTEL_SPAN_ATTRIBUTE_*``): the
gateway sets fewer than 30 attributes a span, and long values only with ``--trace-content``.
"""

from __future__ import annotations

import collections
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, DEFAULT_ON, Decision
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.util import types

log = logging.getLogger(__name__)
_UNSET = Status(StatusCode.UNSET)
_RANDOM = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)  # W3C trace context level 2 (SDK >= 1.40)
_SAMPLED = TraceFlags.SAMPLED


class GatewaySpan(trace.Span, ReadableSpan):
    """A recording span, and once ended the read-only span its processors are given.

    ``parent`` is the span it was started under: one of this tracer's own, or the caller's
    context (a ``SpanContext``), or None for a new trace. Only sampled spans are made."""

    _attributes: dict[str, types.AnyValue]

    def __init__(self, tracer: GatewayTracer, name: str, trace_id: int, span_id: int, flags: int,
                 state: TraceState | None, parent: GatewaySpan | SpanContext | None, kind: SpanKind,
                 attributes: dict[str, types.AnyValue], start_time: int,
                 links: tuple[Link, ...] = ()) -> None:
        self.tracer = tracer
        self._name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self.flags = flags
        self.trace_state = state
        self.up = parent
        self._kind = kind
        self._attributes = attributes
        self._start_time = start_time
        if links:
            self._links = links

    # until set: the class's (fewer stores for each span on the event loop)
    _events: tuple[Event, ...] = ()
    _links: tuple[Link, ...] = ()
    _status = _UNSET
    _end_time: int | None = None
    _instrumentation_info = None
    _made: SpanContext | None = None

    @property
    def _resource(self) -> Resource:  # type: ignore[override]  # ReadableSpan's attribute, read-only here
        return self.tracer.resource

    @property
    def _instrumentation_scope(self) -> InstrumentationScope:  # type: ignore[override]
        return self.tracer.scope

    # what ReadableSpan's properties (and its to_json) read, made when first read
    @property
    def _context(self) -> SpanContext:  # type: ignore[override]  # ReadableSpan's attribute, read-only here
        made = self._made
        if made is None:
            made = self._made = SpanContext(self.trace_id, self.span_id, is_remote=False,
                                            trace_flags=TraceFlags(self.flags), trace_state=self.trace_state)
        return made

    @property
    def _parent(self) -> SpanContext | None:  # type: ignore[override]
        up = self.up
        return up._context if isinstance(up, GatewaySpan) else up

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        if self._end_time is None:
            self._attributes.update(attributes)

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        if self._end_time is None:
            self._attributes[key] = value

    def add_event(self, name: str, attributes: types.Attributes = None,
                  timestamp: int | None = None) -> None:
        if self._end_time is None:
            self._events = (*self._events, Event(name, attributes, timestamp or time.time_ns()))

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
        self.tracer.on_end(self)


class GatewayTracer(trace.Tracer):
    """Spans sampled and identified as the SDK's tracer would, ended into ``processor``."""

    def __init__(self, provider: TracerProvider, processor: SpanProcessor,
                 name: str = "veracity.serve") -> None:
        self.sampler = provider.sampler
        self.ids = provider.id_generator
        self.resource = provider.resource
        self.scope = InstrumentationScope(name)
        self.processor = processor
        self.on_end: Callable[[GatewaySpan], None] = processor.on_end
        is_random = getattr(self.ids, "is_trace_id_random", None)
        self._random = _RANDOM if callable(is_random) and is_random() else 0
        # the SDK's default generator is random.getrandbits, retried on the invalid id 0
        self._span_id: Callable[[], int] = (_random_span_id if type(self.ids) is RandomIdGenerator
                                            else self.ids.generate_span_id)

    def start_span(self, name: str, context: context_api.Context | None = None,
                   kind: SpanKind = SpanKind.INTERNAL, attributes: types.Attributes = None,
                   links: Sequence[Link] | None = (), start_time: int | None = None,
                   record_exception: bool = True, set_status_on_exception: bool = True) -> trace.Span:
        current = trace.get_current_span(context)
        if isinstance(current, GatewaySpan) and current.tracer is self:
            return self.child(current, name, kind, dict(attributes) if attributes else {}, links, start_time)
        parent: SpanContext | None = current.get_span_context()
        if parent is not None and not parent.is_valid:
            parent = None
        if parent is None:
            trace_id, random_flag = self.ids.generate_trace_id(), self._random
            if self.sampler is DEFAULT_ON or self.sampler is ALWAYS_ON:  # a new trace: sampled, as they say
                return GatewaySpan(self, name, trace_id, self._span_id(), _SAMPLED | random_flag, None, None,
                                   kind, dict(attributes) if attributes else {}, start_time or time.time_ns(),
                                   tuple(links or ()))
        else:
            trace_id, random_flag = parent.trace_id, parent.trace_flags & _RANDOM
        sampled = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
        if sampled.decision is not Decision.RECORD_AND_SAMPLE:
            return trace.NonRecordingSpan(SpanContext(
                trace_id, self._span_id(), is_remote=False, trace_flags=TraceFlags(random_flag),
                trace_state=sampled.trace_state))
        chosen = sampled.attributes
        return GatewaySpan(self, name, trace_id, self._span_id(), _SAMPLED | random_flag,
                           sampled.trace_state, parent, kind, dict(chosen) if chosen else {},
                           start_time or time.time_ns(), tuple(links or ()))

    def child(self, parent: GatewaySpan, name: str, kind: SpanKind = SpanKind.INTERNAL,
              attributes: dict[str, types.AnyValue] | None = None,
              links: Sequence[Link] | None = (),
              start_time: int | None = None) -> GatewaySpan:
        """A span under one of this tracer's own: sampled as its parent was (a GatewaySpan
        is), without asking the sampler again (each sampler the SDK's environment can name
        decides a local child as its parent: always on or off, by trace id, or following
        the parent). ``attributes``: the span's own from then on (not copied)."""
        return GatewaySpan(self, name, parent.trace_id, self._span_id(), parent.flags, parent.trace_state,
                           parent, kind, {} if attributes is None else attributes,
                           start_time or time.time_ns(), tuple(links) if links else ())

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


def _random_span_id() -> int:
    span_id = random.getrandbits(64)
    while not span_id:
        span_id = random.getrandbits(64)
    return span_id


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    try:
        number = int(value) if value else default
    except ValueError:
        log.warning("%s=%r is not a whole number: using %d", name, value, default)
        return default
    if number <= 0:
        log.warning("%s=%r must be above 0: using %d", name, value, default)
        return default
    return number


class SpanBatcher(SpanProcessor):
    """The SDK's batch span processor for the gateway's spans, with the same environment
    (``OTEL_BSP_SCHEDULE_DELAY``, ``OTEL_BSP_MAX_QUEUE_SIZE``, ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``):
    ending a span only appends it to a queue (the SDK's also checks the span's context, the
    process id and its metrics, and wakes its thread, on the event loop); a batch is
    exported, encoding included, on this processor's thread once it is full (seen within
    ``POLL`` seconds) or the delay has passed. When the queue is full the oldest span is
    dropped, as the SDK does."""

    POLL = 0.5

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.delay = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self.capacity = _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self.batch = min(_env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), self.capacity)
        self.dropped = 0
        self._urgent = self.capacity // 2
        self._queue: collections.deque[ReadableSpan] = collections.deque(maxlen=self.capacity)
        self._wake = threading.Event()
        self._exporting = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="veracity-span-export", daemon=True)
        self._thread.start()

    def on_end(self, span: ReadableSpan) -> None:
        queue = self._queue
        if len(queue) >= self._urgent:
            self._filling(len(queue))
        queue.append(span)

    def _filling(self, queued: int) -> None:
        """The queue is half full: wake the thread now rather than at its next look."""
        if queued >= self.capacity:
            self.dropped += 1  # the append drops the oldest; logged from the export thread
        if not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        """Look at the queue every ``POLL`` seconds. Waking this thread from the event loop
        for each batch costs the loop a system call, and on a busy machine its core for a
        while: the loop does so only when the queue is half full."""
        due = time.monotonic() + self.delay
        while not self._stopped:
            self._wake.wait(min(self.POLL, self.delay))
            self._wake.clear()
            if self._stopped:
                break
            now = time.monotonic()
            if now >= due:
                self._export(everything=True)
                due = now + self.delay
            elif len(self._queue) >= self.batch:
                self._export(everything=False)

    def _export(self, everything: bool) -> None:
        """Full batches, then (``everything``) what is left."""
        from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value

        with self._exporting:
            queue = self._queue
            while len(queue) >= self.batch or (everything and queue):
                if self.dropped:
                    log.warning("span queue full (OTEL_BSP_MAX_QUEUE_SIZE=%d): %d spans dropped",
                                self.capacity, self.dropped)
                    self.dropped = 0
                popleft = queue.popleft
                batch = [popleft() for _ in range(min(self.batch, len(queue)))]
                token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))  # no spans of the export
                try:
                    self.exporter.export(batch)
                except Exception:  # an exporter's failure must not stop the thread
                    log.exception("span export failed")
                finally:
                    detach(token)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if self._stopped:
            return False
        self._export(everything=True)
        return True

    def shutdown(self) -> None:
        """Export what is queued, then stop the exporter (blocks)."""
        if self._stopped:
            return
        self._stopped = True
        self._wake.set()
        self._thread.join()
        self._export(everything=True)
        self.exporter.shutdown()
