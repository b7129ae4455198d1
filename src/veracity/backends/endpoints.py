"""Several OpenAI-compatible servers behind one ``openai/MODEL`` spec, and the registry's
factory of that spec (one server or several).

Each request goes to the endpoint with the fewest requests in flight, never past that
endpoint's own concurrency limit. A request that fails on one endpoint (server error, rate
limit, timeout, connection lost) is sent again to another; an endpoint that fails
``fail_threshold`` times in a row is left out for a cool-down, then gets one probe request
and is back as soon as it answers. At start every endpoint must list the model in its
``/models`` answer, so all of them serve the same model and the cache key (which names the
model, not the endpoint) is shared by all.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from veracity.backends.base import Capabilities, Outcome
from veracity.backends.openai import OpenAIBackend
from veracity.backends.openai_wire import resolve_base_url
from veracity.errors import AccessError, BackendError, ConfigError, RetryableError
from veracity.jsontypes import JsonObject
from veracity.paths import user_path
from veracity.retry import backoff_delay
from veracity.types import Generation, GenRequest


def read_base_urls(path: Path | str) -> list[str]:
    """Base URLs from a file: one per line; blank lines and ``#`` comments are skipped."""
    target = user_path(path)
    try:
        lines = target.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read the base URLs file {target}: {exc.strerror or exc}") from None
    urls = [line.split("#", 1)[0].strip() for line in lines]
    urls = [url for url in urls if url]
    if not urls:
        raise ConfigError(f"{target} lists no base URL")
    return urls


def shown_url(url: str) -> str:
    """The URL without any user:password part, for run.json and messages."""
    return str(httpx.URL(url).copy_with(userinfo=b""))


@dataclass(eq=False)
class Endpoint:
    """One server of the pool, with its load, health and counters."""

    url: str
    backend: OpenAIBackend
    limit: int
    outstanding: int = 0
    failures_in_row: int = 0
    cooled_until: float = 0.0
    cooldowns: int = 0
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    max_seconds: float = 0.0

    def record(self) -> JsonObject:
        answered = self.requests - self.errors
        return {
            "url": shown_url(self.url),
            "requests": self.requests,
            "errors": self.errors,
            "mean_latency_s": round(self.seconds / answered, 4) if answered else None,
            "max_latency_s": round(self.max_seconds, 4),
            "cooldowns": self.cooldowns,
        }


@dataclass
class EndpointPool:
    """Least-outstanding-requests choice with per-endpoint limits and cool-downs."""

    endpoints: list[Endpoint]
    cooldown: float = 10.0
    fail_threshold: int = 3
    clock: Callable[[], float] = time.monotonic
    _ready: threading.Condition = field(default_factory=threading.Condition)

    def _usable(self, endpoint: Endpoint, now: float) -> bool:
        if endpoint.cooled_until > now:
            return False
        # after a cool-down (or while failing) one probe at a time, until it answers again
        limit = 1 if endpoint.failures_in_row >= self.fail_threshold else endpoint.limit
        return endpoint.outstanding < limit

    def acquire(self, avoid: Sequence[Endpoint] = ()) -> Endpoint:
        """The usable endpoint with the fewest requests in flight, preferring those not in
        ``avoid``; waits while every endpoint is full or cooling down."""
        with self._ready:
            while True:
                now = self.clock()
                healthy = [e for e in self.endpoints if e.cooled_until <= now]
                # wait for another endpoint rather than retry on the one that failed
                preferred = [e for e in healthy if e not in avoid] or healthy
                usable = [e for e in preferred if self._usable(e, now)]
                if usable:
                    chosen = min(usable, key=lambda e: e.outstanding / e.limit)
                    chosen.outstanding += 1
                    return chosen
                waits = [e.cooled_until - now for e in self.endpoints if e.cooled_until > now]
                self._ready.wait(timeout=min(waits) if waits else None)

    def release(self, endpoint: Endpoint, outcome: Outcome, seconds: float) -> None:
        """Count the outcome; cool the endpoint down when it keeps failing."""
        with self._ready:
            endpoint.outstanding -= 1
            endpoint.requests += 1
            if is_endpoint_fault(outcome):
                endpoint.errors += 1
                endpoint.failures_in_row += 1
                wait = outcome.retry_after if isinstance(outcome, RetryableError) else None
                if endpoint.failures_in_row >= self.fail_threshold:
                    endpoint.cooldowns += 1
                    wait = max(wait or 0.0, self.cooldown)
                if wait:
                    endpoint.cooled_until = max(endpoint.cooled_until, self.clock() + wait)
            else:
                endpoint.failures_in_row = 0
                if isinstance(outcome, Generation):
                    endpoint.seconds += seconds
                    endpoint.max_seconds = max(endpoint.max_seconds, seconds)
                else:
                    endpoint.errors += 1
            self._ready.notify_all()


def is_endpoint_fault(outcome: Outcome) -> bool:
    """A failure another endpoint may not share: transient errors and refusals of access."""
    return isinstance(outcome, RetryableError | AccessError)


def served_models(url: str, api_key_env: str, timeout: float) -> list[str]:
    """Model ids an OpenAI-compatible server lists at ``GET {url}/models``."""
    key = os.environ.get(api_key_env) if api_key_env else None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    where = f"{shown_url(url)}/models"
    try:
        response = httpx.get(url + "/models", headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ConfigError(f"endpoint {where} did not answer ({type(exc).__name__}); "
                          "remove it from the list or start it") from None
    if response.status_code != 200:
        raise ConfigError(f"endpoint {where} answered HTTP {response.status_code}: "
                          "cannot check which model it serves")
    try:
        rows = response.json()["data"]
        return [str(row["id"]) for row in rows]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"endpoint {where} did not list models as OpenAI's API does") from None


class PooledOpenAIBackend:
    """``openai/MODEL`` served by several endpoints; the Backend protocol of one server."""

    def __init__(
        self,
        model: str,
        base_urls: Sequence[str],
        max_concurrency: int = 16,
        max_retries: int = 5,
        timeout: float = 60.0,
        api_key_env: str = "OPENAI_API_KEY",
        cooldown: float = 10.0,
        fail_threshold: int = 3,
        check_models: bool = True,
        sleep: Callable[[float], None] = time.sleep,
        **options: Any,
    ) -> None:
        """``max_concurrency`` is per endpoint; ``options`` go to each endpoint's OpenAIBackend."""
        urls = list(dict.fromkeys(resolve_base_url(u) for u in base_urls))
        if len(urls) < 2:
            raise ConfigError("an endpoint pool needs at least two distinct base URLs")
        if max_retries < 0 or fail_threshold < 1 or cooldown < 0:
            raise ConfigError("max_retries >= 0, fail_threshold >= 1 and cooldown >= 0 are required")
        if check_models:
            for url in urls:
                served = served_models(url, api_key_env, min(timeout, 30.0))
                if model not in served:
                    raise ConfigError(
                        f"endpoint {shown_url(url)} serves {', '.join(served) or 'no model'}, not "
                        f"'{model}': every base URL of one spec must serve the same model"
                    )
        self.model = model
        self.spec = f"openai/{model}"
        self.max_retries = max_retries
        self._sleep = sleep
        endpoints = [
            Endpoint(url, OpenAIBackend(model, base_url=url, api_key_env=api_key_env,
                                        max_concurrency=max_concurrency, timeout=timeout,
                                        max_retries=0, **options), max_concurrency)
            for url in urls
        ]
        self.pool = EndpointPool(endpoints, cooldown, fail_threshold)
        first = endpoints[0].backend
        self.prefill_mode = first.prefill_mode
        self.capabilities = Capabilities(
            prefill=first.capabilities.prefill, seed=True, max_concurrency=max_concurrency * len(urls),
            logprobs=first.capabilities.logprobs,
        )
        self._identity = {k: v for k, v in first.identity().items() if k != "base_url"}
        self._identity["served_model"] = model
        self._workers = ThreadPoolExecutor(self.capabilities.max_concurrency,
                                           thread_name_prefix="veracity-pool")

    def __repr__(self) -> str:
        urls = ", ".join(shown_url(e.url) for e in self.pool.endpoints)
        return f"PooledOpenAIBackend(spec={self.spec!r}, endpoints=[{urls}])"

    def identity(self) -> JsonObject:
        """The model and request shaping, never which endpoint: the endpoints share the cache."""
        return dict(self._identity)

    def endpoint_stats(self) -> list[dict[str, Any]]:
        """Requests, errors and latency per endpoint, for run.json."""
        with self.pool._ready:
            return [e.record() for e in self.pool.endpoints]

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        futures: list[Future[Outcome]] = [self._workers.submit(self._one, r) for r in requests]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise

    def _one(self, request: GenRequest) -> Outcome:
        tried: list[Endpoint] = []
        outcome: Outcome = BackendError(f"{self.spec}: no attempt made")
        rounds = 0
        for _ in range(self.max_retries + 1):
            endpoint = self.pool.acquire(avoid=tried)
            began = time.perf_counter()
            try:
                [outcome] = endpoint.backend.generate([request])
            finally:
                seconds = time.perf_counter() - began
            self.pool.release(endpoint, outcome, seconds)
            if not is_endpoint_fault(outcome):
                return outcome
            tried.append(endpoint)
            if len(set(tried)) == len(self.pool.endpoints):
                if isinstance(outcome, AccessError):
                    return outcome  # every endpoint refused: the key or the model, not a server
                retry_after = outcome.retry_after if isinstance(outcome, RetryableError) else None
                self._sleep(backoff_delay(rounds, retry_after))
                rounds += 1
                tried.clear()
        attempts = self.max_retries + 1
        return RetryableError(
            f"{self.spec}: failed on every endpoint tried ({attempts} attempts); last: {outcome}"
        )

    def close(self) -> None:
        self._workers.shutdown(wait=False, cancel_futures=True)
        for endpoint in self.pool.endpoints:
            endpoint.backend.close()


def load(name: str, base_url: str | Sequence[str] | None = None,
         **options: Any) -> OpenAIBackend | PooledOpenAIBackend:
    """Registry factory for ``openai/MODEL``; ``options`` are OpenAIBackend's (api_key_env,
    max_concurrency, timeout, max_retries, prefill_mode, chat_template, extra_body, ...).
    Several base URLs make an endpoint pool."""
    if not isinstance(base_url, str | None):
        urls = list(base_url)
        if len(urls) > 1:
            return PooledOpenAIBackend(name, urls, **options)
        base_url = urls[0] if urls else None
    return OpenAIBackend(name, base_url=base_url, **options)
