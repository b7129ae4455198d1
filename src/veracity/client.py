"""What methods call: a backend or embedder wrapped with the cache, batching and progress."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, cast

import numpy as np

from veracity.backends.base import Backend, Finished, StreamingBackend
from veracity.cache import Cache, cache_key
from veracity.embed.base import Embedder, Matrix
from veracity.errors import AccessError, BackendError, ErrorKind, Interrupted, PermanentError
from veracity.types import Generation, GenRequest

_CHUNK_SECONDS = 0.5
"""Target duration of one call of a backend without ``stream``: what a kill -9 can lose."""


class Progress(Protocol):
    """Receives progress of one stage; the CLI renders it, the library stays silent."""

    def start(self, stage: str, total: int) -> None: ...

    def update(self, done: int, calls: int, hits: int) -> None: ...

    def finish(self) -> None: ...


class NullProgress:
    """Progress that shows nothing."""

    def start(self, stage: str, total: int) -> None:
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


def request_key(spec: str, identity: dict[str, Any], request: GenRequest) -> str:
    """Cache key of one request: backend, model identity, messages, prefill, sampling, sample."""
    sampling = asdict(request.sampling)
    if request.sampling.greedy:
        # greedy decoding ignores these, so they must not split the cache
        for name in ("seed", "top_p", "top_k", "temperature"):
            sampling.pop(name)
    return cache_key(
        {
            "kind": "generation",
            "backend": spec,
            "identity": identity,
            "messages": [[m.role, m.content] for m in request.messages],
            "prefill": request.prefill,
            "sampling": sampling,
            "sample_index": request.sample_index,
        }
    )


class LLMClient:
    """Backend + cache + batching + progress. Methods hand it whole stages at once."""

    def __init__(
        self,
        backend: Backend,
        cache: Cache | None = None,
        progress: Progress | None = None,
        chunk_size: int | None = None,
    ) -> None:
        self.backend = backend
        self.cache = cache
        self.progress: Progress = progress or NullProgress()
        self.chunk_size = chunk_size or max(16, backend.capabilities.max_concurrency * 8)
        self.stats = CallStats()
        self._identity = backend.identity()
        self._answered = False
        """Whether the model ever produced an output for this client (cached or fresh)."""

    @property
    def spec(self) -> str:
        return self.backend.spec

    def generate(self, requests: Sequence[GenRequest], stage: str = "generate") -> list[Generation]:
        """One generation per request; cached ones are reused, the rest sent to the backend.

        Each answer is cached as soon as it arrives, so an interrupted or failed stage loses
        nothing already generated. If any request fails after the backend's own retries,
        requests not yet sent are dropped, those in flight are awaited and kept, and a
        BackendError is raised.
        """
        return cast(list[Generation], self._generate(requests, stage, keep_going=False))

    def generate_each(
        self, requests: Sequence[GenRequest], stage: str = "generate"
    ) -> list[Generation | BackendError]:
        """Like ``generate``, but a request that fails on its own gets its error in its slot
        (never cached; its ``kind`` says why) and the stage goes on: a request the backend
        rejects (a prompt too long for the context), a reply with no text, or a server fault
        that outlasted the retries. Errors that no request could escape still raise: a
        rejected key, a server that fails every request in a row (down), or requests all
        rejected before the model ever answered."""
        return self._generate(requests, stage, keep_going=True)

    def _generate(
        self, requests: Sequence[GenRequest], stage: str, keep_going: bool
    ) -> list[Generation | BackendError]:
        keys = [request_key(self.spec, self._identity, r) for r in requests]
        found: dict[str, Generation | BackendError] = {}
        if self.cache is not None:
            found = {k: Generation(**v) for k, v in self.cache.get_json(keys).items()}
        self._answered = self._answered or bool(found)
        pending: dict[str, GenRequest] = {}
        for key, request in zip(keys, requests, strict=True):
            if key not in found and key not in pending:
                pending[key] = request
        hits = len(requests) - sum(1 for k in keys if k not in found)
        self.stats.requests += len(requests)
        self.stats.cache_hits += hits
        self.stats.by_stage[stage] = self.stats.by_stage.get(stage, 0) + len(pending)
        self.progress.start(stage, len(requests))
        done = len(requests) - len(pending)
        calls = 0
        self.progress.update(done, calls, hits)
        todo = list(pending.items())
        stop = threading.Event()
        outage = max(8, self.backend.capabilities.max_concurrency)
        # failures; server faults in a row; rejections before the model ever answered
        failed = faults = rejected = 0
        fatal: list[BackendError] = []
        began = time.perf_counter()
        finished = self._finished([request for _, request in todo], stop)
        fresh: dict[str, Generation] = {}
        try:
            for group in finished:
                fresh = {}
                for index, outcome in group:
                    key = todo[index][0]
                    if isinstance(outcome, Generation):
                        fresh[key] = _repaired(outcome)
                        self.stats.completion_tokens += outcome.completion_tokens
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
                self._save(fresh)
                found.update(fresh)
                self._answered = self._answered or bool(fresh)
                fresh = {}
                calls += len(group)
                self.stats.model_calls += len(group)
                done += len(group)
                self.progress.update(done, calls, hits)
        except KeyboardInterrupt:
            self._save(fresh)  # the group Ctrl-C cut short, if any
            raise Interrupted(self._kept(stage)) from None
        finally:
            finished.close()  # on Ctrl-C or an error: requests in flight are abandoned
            self.stats.model_seconds += time.perf_counter() - began
            self.progress.finish()
        if fatal:
            kept = "kept in the cache" if self.cache is not None else "not cached"
            so_far = sum(isinstance(g, Generation) for g in found.values())
            raise BackendError(
                f"{self.spec}: {failed} of {calls} requests failed in stage '{stage}' "
                f"({so_far} outputs so far, {kept}). First error: {fatal[0]}"
            ) from fatal[0]
        return [found[k] for k in keys]

    def _save(self, fresh: dict[str, Generation]) -> None:
        if self.cache is not None and fresh:
            self.cache.put_json("generation", self.spec, {k: _stored(g) for k, g in fresh.items()})

    def _finished(
        self, requests: Sequence[GenRequest], stop: threading.Event
    ) -> Generator[Finished, None, None]:
        """Outcomes as they finish: from the backend's stream, else from ``generate`` in
        chunks sized to take about _CHUNK_SECONDS each."""
        if isinstance(self.backend, StreamingBackend):
            yield from self.backend.stream(requests, stop)
            return
        size, start = max(1, self.backend.capabilities.max_concurrency), 0
        while start < len(requests) and not stop.is_set():
            chunk = requests[start : start + size]
            began = time.perf_counter()
            outcomes = self.backend.generate(chunk)
            took = time.perf_counter() - began
            yield list(enumerate(outcomes, start))
            start += len(chunk)
            if took < _CHUNK_SECONDS / 2:
                size = min(self.chunk_size, size * 2)
            elif took > _CHUNK_SECONDS:
                size = max(1, size // 2)

    def _kept(self, stage: str) -> str:
        """What an interruption keeps, for the user."""
        new = self.stats.model_calls - self.stats.failed
        if self.cache is None:
            return (f"during '{stage}': {new} answers received from {self.spec} in this run are "
                    "lost (no cache)")
        return (f"during '{stage}': {new} answers received from {self.spec} in this run are in the "
                f"cache ({self.stats.cache_hits} were there before); rerun the same command to "
                "resume: it sends only the missing requests")

    def close(self) -> None:
        self.backend.close()


def _stored(generation: Generation) -> dict[str, Any]:
    """A generation as cached; ``replaced_chars`` only when set, so caches written before it
    existed and after read alike."""
    value = asdict(generation)
    if not value["replaced_chars"]:
        del value["replaced_chars"]
    return value


def _repaired(generation: Generation) -> Generation:
    """The generation with lone UTF-16 surrogates (which a server's JSON can hold, and which no
    UTF-8 file or database accepts) replaced by U+FFFD and counted."""
    text = generation.text
    if text.isascii():
        return generation
    try:
        text.encode("utf-8")
        return generation
    except UnicodeEncodeError:
        pass
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    count = fixed.count("\ufffd") - text.count("\ufffd")
    return replace(generation, text=fixed, replaced_chars=generation.replaced_chars + count)


def embedding_key(spec: str, identity: dict[str, Any], text: str) -> str:
    return cache_key({"kind": "embedding", "embedder": spec, "identity": identity, "text": text})


class CachedEmbedder:
    """Embeds each distinct text once per process and once per cache, in batches."""

    def __init__(
        self,
        embedder: Embedder,
        cache: Cache | None = None,
        batch_size: int = 256,
        stats: CallStats | None = None,
    ) -> None:
        self.embedder = embedder
        self.cache = cache
        self.batch_size = batch_size
        self.stats = stats or CallStats()
        self._identity = embedder.identity()
        self._memo: dict[str, Matrix] = {}

    @property
    def spec(self) -> str:
        return self.embedder.spec

    def embed(self, texts: Sequence[str]) -> Matrix:
        """(n, d) float32 matrix, one row per text."""
        self.stats.requests += len(texts)
        distinct = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if distinct and self.cache is not None:
            keys = {t: embedding_key(self.spec, self._identity, t) for t in distinct}
            stored = self.cache.get_vectors(list(keys.values()))
            for text, key in keys.items():
                if key in stored:
                    self._memo[text] = stored[key]
            self.stats.cache_hits += len(stored)
            distinct = [t for t in distinct if t not in self._memo]
        for start in range(0, len(distinct), self.batch_size):
            batch = distinct[start : start + self.batch_size]
            began = time.perf_counter()
            vectors = self.embedder.embed(batch)
            self.stats.embed_seconds += time.perf_counter() - began
            self.stats.texts_embedded += len(batch)
            fresh = dict(zip(batch, vectors, strict=True))
            self._memo.update(fresh)
            if self.cache is not None:
                self.cache.put_vectors(
                    self.spec, {embedding_key(self.spec, self._identity, t): v for t, v in fresh.items()}
                )
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts]).astype(np.float32, copy=False)
