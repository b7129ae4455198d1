"""Scoring one exchange: the project's trust score (perturbed calls in one batch, gamma, verdict).

Each score gets its own LLMClient and CachedEmbedder (per-score call counts, no unbounded
memo in a long-lived process) over a shared backend, embedder and cache. The blocking work
runs in a worker thread; the perturbed calls of one answer go out together, as one
``generate`` call: concurrent HTTP requests upstream, one batch on an in-process model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.client import CachedEmbedder, LLMClient
from veracity.embed.base import Embedder, Matrix
from veracity.errors import VeracityError
from veracity.methods.trust import TrustScore, TrustSettings, score_trust
from veracity.serve.local import ROLES, request_sampling
from veracity.serve.settings import GatewaySettings
from veracity.serve.verdicts import Thresholds, ThresholdSource
from veracity.types import Message

SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop",
                   "presence_penalty", "frequency_penalty", "n")


class ScoringError(VeracityError):
    """This exchange cannot be scored; the answer is still returned."""


class LockedEmbedder:
    """One embedding batch at a time: embedders hold models that are not thread-safe."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.spec = embedder.spec
        self._lock = threading.Lock()

    def identity(self) -> dict[str, Any]:
        return self.embedder.identity()

    def embed(self, texts: Sequence[str]) -> Matrix:
        with self._lock:
            return self.embedder.embed(texts)


@dataclass(frozen=True)
class Exchange:
    """What a score is computed from: the request as sent and the answer returned."""

    id: str
    model: str
    body: dict[str, Any]
    answer: str | None

    def split(self) -> tuple[tuple[Message, ...], str]:
        """(turns before the prompt, the prompt): the last message must be a user's text."""
        messages = self.body.get("messages") or []
        turns = []
        for m in messages:
            role, content = (m.get("role"), m.get("content")) if isinstance(m, dict) else (None, None)
            if role not in ROLES or not isinstance(content, str):
                raise ScoringError("only text messages (system, user, assistant) can be scored")
            turns.append(Message(role, content))
        if not turns or turns[-1].role != "user":
            raise ScoringError("the last message must be the user's prompt to be scored")
        return tuple(turns[:-1]), turns[-1].content

    def prompt(self) -> str:
        try:
            return self.split()[1]
        except ScoringError:
            return ""

    def sampling(self) -> dict[str, Any]:
        return {k: self.body[k] for k in SAMPLING_FIELDS if k in self.body}


class Scorer:
    """Turns an exchange into the ``veracity`` object of the response."""

    def __init__(self, settings: GatewaySettings, embedder: Embedder, cache: Cache | None,
                 thresholds: ThresholdSource) -> None:
        self.settings = settings
        self.embedder = LockedEmbedder(embedder)
        self.cache = cache
        self.thresholds = thresholds
        self._threads = anyio.CapacityLimiter(settings.max_concurrency)

    def trust_settings(self, exchange: Exchange, thresholds: Thresholds) -> TrustSettings:
        s = self.settings
        try:
            sampling = request_sampling(exchange.body, s.max_tokens, s.temperature)
        except VeracityError as exc:
            raise ScoringError(str(exc)) from None
        # perturbed calls: the configured temperature, the request's token budget
        sampling = type(sampling)(temperature=s.temperature, max_tokens=sampling.max_tokens, seed=s.seed)
        return TrustSettings(n=s.n, ball=s.ball, seed=s.seed, form=s.form,
                             thresholds=(thresholds.low, thresholds.high), sampling=sampling)

    async def score(self, exchange: Exchange, backend_for: Callable[[str], Backend]) -> dict[str, Any]:
        """The ``veracity`` object; scoring failures are reported in it, never raised.

        ``backend_for(model)`` is the backend the perturbed prompts go to.
        """
        thresholds = self.thresholds.lookup(exchange.model, self.embedder.spec, self.settings.form)
        record = self.describe(exchange, thresholds)
        began = time.perf_counter()
        try:
            if not exchange.answer or not exchange.answer.strip():
                raise ScoringError("no text answer to score")
            context, prompt = exchange.split()
            settings = self.trust_settings(exchange, thresholds)
            record["sampling"]["perturbed"]["max_tokens"] = settings.sampling.max_tokens
            result = await anyio.to_thread.run_sync(
                self._score, prompt, exchange.answer, context, settings, backend_for(exchange.model),
                limiter=self._threads)
        except VeracityError as exc:
            record["error"] = str(exc)
        else:
            record |= _evidence(result)
        record["timings"]["scoring_ms"] = 1000 * (time.perf_counter() - began)
        return record

    def _score(self, prompt: str, answer: str, context: tuple[Message, ...],
               settings: TrustSettings, backend: Backend) -> TrustScore:
        client = LLMClient(backend, self.cache)
        embedder = CachedEmbedder(self.embedder, self.cache)
        return score_trust(prompt, client, embedder, answer, settings, context=context)

    def describe(self, exchange: Exchange, thresholds: Thresholds) -> dict[str, Any]:
        """The score's settings, before any result: what is compared and how."""
        s = self.settings
        return {
            "id": exchange.id, "gamma": None, "verdict": "unscored",
            "thresholds": thresholds.to_dict(), "form": s.form, "n": s.n, "ball": s.ball,
            "seed": s.seed, "model": exchange.model, "embedder": self.embedder.spec,
            "sampling": {"answer": exchange.sampling(),
                         "perturbed": {"temperature": s.temperature, "seed": s.seed}},
            "perturbed_prompts": [], "perturbed_answers": [], "model_calls": 0,
            "timings": {}, "error": None,
        }


def _evidence(result: TrustScore) -> dict[str, Any]:
    return {
        "gamma": result.gamma, "verdict": result.verdict, "model_calls": result.model_calls,
        "perturbed_prompts": list(result.perturbed_prompts),
        "perturbed_answers": list(result.perturbed_answers),
        "error": None if result.gamma is not None else "gamma is undefined for this answer",
    }
