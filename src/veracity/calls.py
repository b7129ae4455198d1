"""The one call path of every model client: cache lookup, chunked calls, progress, counters, errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from veracity.cache import Cache
from veracity.errors import AccessError, BackendError, ErrorKind, Interrupted, PermanentError

_CHUNK_SECONDS = 0.5
"""Target duration of one call of a backend without ``stream``: what a kill -9 can lose."""


class Progress(Protocol):
    """Receives progress of one stage; the CLI renders it, the library stays silent."""

    def start(self, stage: str, total: int | None) -> None:
        """A stage of ``total`` requests begins (None: a total nobody knows in advance)."""
        ...

    def update(self, done: int, calls: int, hits: int) -> None: ...

    def finish(self) -> None: ...


class NullProgress:
    """Progress that shows nothing."""

    def start(self, stage: str, total: int | None) -> None:
        pass

    def update(self, done: int, calls: int, hits: int) -> None:
        pass

    def finish(self) -> None:
        pass


@dataclass
class CallStats:
    """Counters for one client over its lifetime."""

    requests: int = 0
    cache_hits: int = 0
    model_calls: int = 0
    failed: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0
    texts_embedded: int = 0
    embed_seconds: float = 0.0
    by_stage: dict[str, int] = field(default_factory=dict)


Payload = TypeVar("Payload")
Value = TypeVar("Value")


@dataclass(frozen=True)
class Codec(Generic[Value]):
    """How one kind of result is cached and counted."""

    kind: str
    """The cache's kind column: ``generation``, ``similarity``."""
    load: Callable[[Any], Value]
    dump: Callable[[Value], Any]
    clean: Callable[[Value], Value] = field(default=lambda v: v)
    tokens: Callable[[Value], int] = field(default=lambda v: 0)


def chunked(
    call: Callable[[Sequence[Payload]], Sequence[Value | BackendError]],
    payloads: Sequence[Payload],
    stop: threading.Event,
    first: int,
    largest: int,
    smallest: int = 1,
) -> Iterator[list[tuple[int, Value | BackendError]]]:
    """``call`` over ``payloads`` in chunks sized to take about _CHUNK_SECONDS each (never
    fewer than ``smallest`` payloads: a backend's batch), so an interruption loses at most one
    chunk; stops early once ``stop`` is set."""
    smallest = max(1, smallest)
    size, start = max(smallest, first), 0
    while start < len(payloads) and not stop.is_set():
        chunk = payloads[start : start + size]
        began = time.perf_counter()
        outcomes = call(chunk)
        took = time.perf_counter() - began
        yield list(enumerate(outcomes, start))
        start += len(chunk)
        if took < _CHUNK_SECONDS / 2:
            size = max(smallest, min(largest, size * 2))
        elif took > _CHUNK_SECONDS:
            size = max(smallest, size // 2)


def _arrived(finished: Iterator[Any], cut: KeyboardInterrupt) -> list[tuple[int, Any]]:
    """The outcomes that had arrived when Ctrl-C came but were not handed over yet: carried
    by the producer's interrupt, or asked for by throwing Ctrl-C in at its ``yield``."""
    arrived = getattr(cut, "finished", None)
    throw = getattr(finished, "throw", None)
    if arrived is None and throw is not None:
        try:
            throw(KeyboardInterrupt())
        except (KeyboardInterrupt, StopIteration) as inner:
            arrived = getattr(inner, "finished", None)
    return list(arrived or [])


class CachedCalls:
    """The one call path: cache lookup, chunked calls, progress, counters and error policy."""

    def __init__(self, spec: str, cache: Cache | None, progress: Progress | None,
                 max_concurrency: int, chunk_size: int | None) -> None:
        self._spec = spec
        self.cache = cache
        self.progress: Progress = progress or NullProgress()
        self.max_concurrency = max(1, max_concurrency)
        self.chunk_size = chunk_size or max(16, self.max_concurrency * 8)
        self.stats = CallStats()
        self._answered = False
        """Whether the model ever produced an output for this client (cached or fresh)."""

    @property
    def spec(self) -> str:
        return self._spec

    def call(
        self,
        keys: Sequence[str],
        payloads: Sequence[Payload],
        produce: Callable[[Sequence[Payload], threading.Event], Iterator[list[tuple[int, Any]]]],
        codec: Codec[Value],
        stage: str,
        keep_going: bool = False,
    ) -> list[Value | BackendError]:
        """One value per key: cached ones reused, the rest produced from their payloads.

        ``produce(payloads, stop)`` yields outcomes (value or BackendError, with the index of
        the payload) as they finish. Each group is cached as soon as it arrives, so an
        interrupted or failed stage loses nothing already computed. Errors are never cached.
        With ``keep_going`` a request that fails on its own gets its error in its slot and the
        stage goes on; otherwise, and whenever the model looks down, requests not yet sent are
        dropped, those in flight are awaited and kept, and a BackendError is raised.
        """
        found: dict[str, Value | BackendError] = {}
        if self.cache is not None:
            found = {k: codec.load(v) for k, v in self.cache.get_json(list(keys)).items()}
        self._answered = self._answered or bool(found)
        pending: dict[str, Payload] = {}
        for key, payload in zip(keys, payloads, strict=True):
            if key not in found and key not in pending:
                pending[key] = payload
        hits = len(keys) - sum(1 for k in keys if k not in found)
        self.stats.requests += len(keys)
        self.stats.cache_hits += hits
        self.stats.by_stage[stage] = self.stats.by_stage.get(stage, 0) + len(pending)
        self.progress.start(stage, len(keys))
        done = len(keys) - len(pending)
        calls = 0
        self.progress.update(done, calls, hits)
        todo = list(pending.items())
        stop = threading.Event()
        outage = max(8, self.max_concurrency)
        # failures; server faults in a row; rejections before the model ever answered
        failed = faults = rejected = 0
        fatal: list[BackendError] = []
        began = time.perf_counter()
        finished = produce([payload for _, payload in todo], stop)
        fresh: dict[str, Value] = {}
        try:
            for group in finished:
                fresh = {}
                for index, outcome in group:
                    key = todo[index][0]
                    if not isinstance(outcome, BackendError):
                        fresh[key] = codec.clean(outcome)
                        self.stats.completion_tokens += codec.tokens(outcome)
                        faults = 0
                        continue
                    self.stats.failed += 1
                    failed += 1
                    server = not isinstance(outcome, PermanentError)
                    faults = faults + 1 if server else 0
                    rejected += outcome.kind is ErrorKind.REJECTED and not self._answered
                    down = (faults >= outage or isinstance(outcome, AccessError)
                            or (not self._answered and rejected >= min(len(todo), self.chunk_size)))
                    if keep_going and not down:
                        found[key] = outcome  # never cached
                    else:
                        fatal.append(outcome)
                        stop.set()
                self._save(codec, fresh)
                found.update(fresh)
                self._answered = self._answered or bool(fresh)
                fresh = {}
                calls += len(group)
                self.stats.model_calls += len(group)
                done += len(group)
                self.progress.update(done, calls, hits)
        except KeyboardInterrupt as cut:
            self._save(codec, fresh)  # the group Ctrl-C cut short, if any
            late = {todo[i][0]: codec.clean(o) for i, o in _arrived(finished, cut)
                    if not isinstance(o, BackendError)}
            self._save(codec, late)
            self.stats.model_calls += len(late)
            raise Interrupted(self._kept(stage)) from None
        finally:
            close = getattr(finished, "close", None)
            if close is not None:  # on Ctrl-C or an error: requests in flight are abandoned
                close()
            self.stats.model_seconds += time.perf_counter() - began
            self.progress.finish()
        if fatal:
            kept = "kept in the cache" if self.cache is not None else "not cached"
            so_far = sum(not isinstance(g, BackendError) for g in found.values())
            raise BackendError(
                f"{self.spec}: {failed} of {calls} requests failed in stage '{stage}' "
                f"({so_far} outputs so far, {kept}). First error: {fatal[0]}"
            ) from fatal[0]
        return [found[k] for k in keys]

    def _save(self, codec: Codec[Value], fresh: dict[str, Value]) -> None:
        if self.cache is not None and fresh:
            self.cache.put_json(codec.kind, self.spec, {k: codec.dump(v) for k, v in fresh.items()})

    def _kept(self, stage: str) -> str:
        """What an interruption keeps, for the user."""
        new = self.stats.model_calls - self.stats.failed
        if self.cache is None:
            return (f"during '{stage}': {new} answers received from {self.spec} in this run are "
                    "lost (no cache)")
        return (f"during '{stage}': {new} answers received from {self.spec} in this run are in the "
                f"cache ({self.stats.cache_hits} were there before); rerun the same command to "
                "resume: it sends only the missing requests")
