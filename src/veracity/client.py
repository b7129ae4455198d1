"""What methods call: a backend, embedder or pair scorer wrapped with the cache, batching and progress."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from veracity.backends.base import Backend, Finished, Outcome, StreamingBackend
from veracity.cache import Cache, cache_key
from veracity.calls import CachedCalls, CallStats, Codec, NullProgress, Progress, chunked
from veracity.embed.base import Embedder, Matrix, PairScorer
from veracity.errors import BackendError
from veracity.jsontypes import JsonObject, JsonValue
from veracity.types import Generation, GenRequest, TokenLogprob

__all__ = ["CachedEmbedder", "CallStats", "LLMClient", "NullProgress", "Progress", "ScorerClient",
           "request_key"]


def request_key(spec: str, identity: Mapping[str, JsonValue], request: GenRequest) -> str:
    """Cache key of one request: backend, model identity, messages, prefill, sampling, sample
    (and the draft, for a backend that verifies drafts)."""
    sampling = asdict(request.sampling)
    if request.sampling.greedy:
        # greedy decoding ignores these, so they must not split the cache
        for name in ("seed", "top_p", "top_k", "temperature"):
            sampling.pop(name)
    payload: JsonObject = {
        "kind": "generation",
        "backend": spec,
        "identity": identity,
        "messages": [[m.role, m.content] for m in request.messages],
        "prefill": request.prefill,
        "sampling": sampling,
        "sample_index": request.sample_index,
    }
    if request.logprobs is not None:
        # only when asked, so every key written before log-probabilities existed stays valid
        payload["logprobs"] = request.logprobs
    if request.draft and identity.get("decode") == "draft":
        # which tokens were verified in a batch can change a near-tied greedy choice
        payload["draft"] = request.draft
    return cache_key(payload)


class LLMClient(CachedCalls):
    """Backend + cache + batching + progress. Methods hand it whole stages at once."""

    def __init__(
        self,
        backend: Backend,
        cache: Cache | None = None,
        progress: Progress | None = None,
        chunk_size: int | None = None,
    ) -> None:
        super().__init__(backend.spec, cache, progress, backend.capabilities.max_concurrency,
                         chunk_size)
        self.backend = backend
        self._identity = backend.identity()

    @property
    def spec(self) -> str:
        return self.backend.spec

    def identity(self) -> JsonObject:
        """The backend's identity, read once."""
        return dict(self._identity)

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

    def generate_from_embeddings(
        self,
        keys: Sequence[str],
        requests: Sequence[GenRequest],
        embeddings: Sequence[npt.NDArray[np.float32]],
        stage: str,
    ) -> list[Generation]:
        """Generations from input embeddings (white-box), cached under the caller's ``keys``;
        needs a backend with ``generate_from_embeddings``."""
        model: Any = self.backend

        def call(chunk: Sequence[tuple[GenRequest, npt.NDArray[np.float32]]]) -> list[Outcome]:
            return list(model.generate_from_embeddings([r for r, _ in chunk], [e for _, e in chunk]))

        def produce(payloads: Sequence[tuple[GenRequest, npt.NDArray[np.float32]]],
                    stop: threading.Event) -> Iterator[list[tuple[int, Outcome]]]:
            return chunked(call, payloads, stop, self.max_concurrency, self.chunk_size,
                           getattr(self.backend.capabilities, "batch", 1))

        payloads = list(zip(requests, embeddings, strict=True))
        return cast(list[Generation], self.call(keys, payloads, produce, GENERATIONS, stage))

    def _generate(
        self, requests: Sequence[GenRequest], stage: str, keep_going: bool
    ) -> list[Generation | BackendError]:
        keys = [request_key(self.spec, self._identity, r) for r in requests]
        return self.call(keys, requests, self._finished, GENERATIONS, stage, keep_going)

    def _finished(
        self, requests: Sequence[GenRequest], stop: threading.Event
    ) -> Generator[Finished, None, None]:
        """Outcomes as they finish: from the backend's stream, else from ``generate`` in
        chunks sized to take about _CHUNK_SECONDS each."""
        if isinstance(self.backend, StreamingBackend):
            yield from self.backend.stream(requests, stop)
            return
        yield from chunked(self.backend.generate, requests, stop, self.max_concurrency,
                           self.chunk_size,
                           getattr(self.backend.capabilities, "batch", 1))

    def close(self) -> None:
        self.backend.close()


def pair_key(spec: str, identity: Mapping[str, JsonValue], a: str, b: str) -> str:
    """Cache key of the score of the ordered pair (a, b)."""
    return cache_key({"kind": "similarity", "model": spec, **identity, "a": a, "b": b})


class ScorerClient(CachedCalls):
    """A pair scorer (cross-encoder) with the cache, chunking and progress of LLMClient."""

    def __init__(self, scorer: PairScorer, cache: Cache | None = None,
                 progress: Progress | None = None) -> None:
        super().__init__(scorer.spec, cache, progress, 1, 4096)
        self.scorer = scorer
        self._identity = scorer.identity()

    def scores(self, pairs: Sequence[tuple[str, str]],
               stage: str = "similarity") -> dict[tuple[str, str], float]:
        """The score of each distinct ordered pair, from the cache or the model."""
        distinct = list(dict.fromkeys(pairs))
        keys = [pair_key(self.spec, self._identity, a, b) for a, b in distinct]

        def call(chunk: Sequence[tuple[str, str]]) -> list[float | BackendError]:
            return [float(v) for v in self.scorer.score(chunk)]

        def produce(payloads: Sequence[tuple[str, str]],
                    stop: threading.Event) -> Iterator[list[tuple[int, float | BackendError]]]:
            return chunked(call, payloads, stop, 32, self.chunk_size)

        values = self.call(keys, distinct, produce, SCORES, stage)
        return {p: cast(float, v) for p, v in zip(distinct, values, strict=True)}

    def close(self) -> None:
        self.scorer.close()


def _stored(generation: Generation) -> JsonObject:
    """A generation as cached; ``replaced_chars`` only when set, so caches written before it
    existed and after read alike."""
    value = asdict(generation)
    if not value["replaced_chars"]:
        del value["replaced_chars"]
    del value["logprobs"]
    if generation.logprobs is not None:
        value["logprobs"] = [t.to_json() for t in generation.logprobs]
    return value


def _loaded(value: dict[str, Any]) -> Generation:
    """A cached generation (with its token log-probabilities when they were asked for)."""
    fields = dict(value)
    tokens = fields.pop("logprobs", None)
    return Generation(**fields, logprobs=None if tokens is None
                      else tuple(TokenLogprob.from_json(t) for t in tokens))


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


def _generation_codec() -> Codec[Generation]:
    return Codec("generation", _loaded, _stored, _repaired,
                 lambda g: g.completion_tokens)


GENERATIONS: Codec[Generation] = _generation_codec()
SCORES: Codec[float] = Codec("similarity", float, float)


def embedding_key(spec: str, identity: Mapping[str, JsonValue], text: str) -> str:
    return cache_key({"kind": "embedding", "embedder": spec, "identity": identity, "text": text})


class CachedEmbedder:
    """Embeds each distinct text once per process and once per cache, in batches."""

    def __init__(
        self,
        embedder: Embedder,
        cache: Cache | None = None,
        batch_size: int = 256,
        stats: CallStats | None = None,
        memo_limit: int = 65_536,
    ) -> None:
        self.embedder = embedder
        self.memo_limit = memo_limit
        """Vectors kept in memory between calls; past it the memory starts over (the cache
        still holds them), so a long run does not grow with every text it embeds."""
        self.cache = cache
        self.batch_size = batch_size
        self.stats = stats or CallStats()
        self._identity = embedder.identity()
        self._memo: dict[str, Matrix] = {}

    @property
    def spec(self) -> str:
        return self.embedder.spec

    def embed(self, texts: Sequence[str], counted: bool = True) -> Matrix:
        """(n, d) float32 matrix, one row per text. Not ``counted``: the requests and cache
        hits are left to a later call for the same texts (work done ahead of it); what is
        embedded is counted either way."""
        if counted:
            self.stats.requests += len(texts)
        if len(self._memo) > self.memo_limit:
            self._memo.clear()
        distinct = [t for t in dict.fromkeys(texts) if t not in self._memo]
        keys: dict[str, str] = {}
        if distinct and self.cache is not None:
            keys = {t: embedding_key(self.spec, self._identity, t) for t in distinct}
            stored = self.cache.get_vectors(list(keys.values()))
            for text, key in keys.items():
                if key in stored:
                    self._memo[text] = stored[key]
            if counted:
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
                self.cache.put_vectors(self.spec, {keys[t]: v for t, v in fresh.items()})
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts]).astype(np.float32, copy=False)
