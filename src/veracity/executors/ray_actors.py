"""Models and embedders on Ray actors: each actor loads its model once and answers batches.

The driver keeps the one SQLite cache: ``LLMClient`` sends only uncached requests here,
and every batch is written to the cache the moment it comes back, so a driver killed
mid-stage loses only the batches still on the actors and a rerun resumes. Actors that
crash are restarted by Ray (``max_restarts``) and their batches retried
(``max_task_retries``); a batch whose actor is gone for good goes to another actor.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from veracity.backends.base import Capabilities, Finished, Outcome
from veracity.embed.base import Matrix
from veracity.errors import BackendError, ConfigError
from veracity.executors import RaySettings
from veracity.jsontypes import JsonObject
from veracity.registry import resolve
from veracity.types import GenRequest

try:
    import ray
    from ray.exceptions import RayActorError, RayTaskError
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ConfigError("the Ray executor needs ray: pip install 'veracity[ray]'") from exc

RESTARTS = 2
"""Times Ray restarts a crashed actor (reloading its model) before its batches move on."""
IN_FLIGHT = 2
"""Batches queued per actor, so an actor never waits for the driver between batches."""


def connect(settings: RaySettings) -> None:
    """Join the cluster the settings name, or start a local Ray, once per process."""
    if ray.is_initialized():
        return
    options: dict[str, Any] = {"logging_level": "warning", "log_to_driver": False}
    if settings.address is None:
        options["include_dashboard"] = False
    try:  # "local": a new Ray here, never a stale cluster some earlier run left a note of
        ray.init(address=settings.address or "local", **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = settings.address or "a local Ray"
        raise ConfigError(f"cannot start or reach {where}: {exc}") from None


LoadOptions = Mapping[str, object]
"""Keyword options of ``load_model`` / ``load_embedder``, sent to every actor."""


@dataclass(frozen=True)
class Described:
    """What an actor reports of the model it loaded."""

    spec: str
    identity: JsonObject
    """The model's own ``identity()``: equal on every actor, or the models differ."""
    pid: int
    capabilities: Capabilities | None = None
    """A generating model's capabilities (None for an embedder)."""


def _load_options(spec: str, options: LoadOptions, settings: RaySettings) -> LoadOptions:
    """An actor's in-process threads follow the CPUs it reserved, unless given."""
    threads = max(1, int(settings.num_cpus))
    provider = resolve(spec).provider
    if provider == "llamacpp":
        return {"n_threads": threads, **options}
    if provider == "hf" and not settings.num_gpus:
        return {"threads": threads, **options}
    return dict(options)


class ModelActor:
    """Runs on a Ray worker: one model, loaded once."""

    def __init__(self, spec: str, options: LoadOptions) -> None:
        from veracity.registry import load_model

        self.backend = load_model(spec, **options)

    def describe(self) -> Described:
        return Described(self.backend.spec, self.backend.identity(), os.getpid(),
                         self.backend.capabilities)

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        return self.backend.generate(requests)


class EmbedActor:
    """Runs on a Ray worker: one embedder, loaded once."""

    def __init__(self, spec: str, options: LoadOptions) -> None:
        from veracity.registry import load_embedder

        self.embedder = load_embedder(spec, **options)

    def describe(self) -> Described:
        return Described(self.embedder.spec, self.embedder.identity(), os.getpid())

    def embed(self, texts: Sequence[str]) -> Matrix:
        return self.embedder.embed(texts)


def _start(cls: type, settings: RaySettings, spec: str, options: LoadOptions) -> list[Any]:
    remote: Any = ray.remote(cls).options(
        num_cpus=settings.num_cpus, num_gpus=settings.num_gpus,
        max_restarts=RESTARTS, max_task_retries=RESTARTS,
    )
    return [remote.remote(spec, options) for _ in range(settings.actors)]


def _describe(actors: Sequence[Any], spec: str) -> list[Described]:
    try:
        described: list[Described] = ray.get([actor.describe.remote() for actor in actors])
    except RayTaskError as exc:
        cause = exc.cause if isinstance(exc.cause, Exception) else exc
        raise ConfigError(f"{spec} could not be loaded on a Ray actor: {cause}") from None
    except RayActorError as exc:
        raise ConfigError(f"{spec}: a Ray actor died while loading the model: {exc}") from None
    identities = [d.identity for d in described]
    if any(identity != identities[0] for identity in identities):
        raise ConfigError(
            f"{spec} is not the same model on every Ray actor (identities {identities}): "
            "install the same model files and package versions on every node"
        )
    return list(described)


class RayBackend:
    """A streaming Backend whose requests run on ``settings.actors`` Ray actors.

    ``spec`` and ``identity()`` are the model's own, so the cache (written by the client as
    each batch arrives) is shared with the in-process executor and the records are the same.
    """

    def __init__(self, spec: str, options: LoadOptions, settings: RaySettings) -> None:
        connect(settings)
        self.settings = settings
        self.actors = _start(ModelActor, settings, spec, _load_options(spec, options, settings))
        first = _describe(self.actors, spec)[0]
        self.spec = first.spec
        self._identity = first.identity
        caps = first.capabilities
        assert caps is not None
        self.capabilities = Capabilities(
            prefill=caps.prefill, seed=caps.seed, inputs_embeds=False,
            max_concurrency=settings.actors * settings.batch_size, logprobs=caps.logprobs,
        )
        self.batches_resent = 0

    def identity(self) -> JsonObject:
        return dict(self._identity)

    def actor_pids(self) -> list[int]:
        """Process ids of the actors (for tests that kill one)."""
        return [d.pid for d in _describe(self.actors, self.spec)]

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(requests)
        for group in self.stream(requests, threading.Event()):
            for i, outcome in group:
                out[i] = outcome
        return [o for o in out if o is not None]

    def stream(self, requests: Sequence[GenRequest], stop: threading.Event) -> Iterator[Finished]:
        """Each batch's outcomes as soon as its actor returns them (the client caches them at
        once); a batch whose actor died is sent again to a live one. Once ``stop`` is set no
        new batch is sent; closing the iterator cancels those in flight."""
        size = self.settings.batch_size
        todo = deque(range(start, min(start + size, len(requests)))
                     for start in range(0, len(requests), size))
        live = list(self.actors)
        load = {id(actor): 0 for actor in live}
        running: dict[Any, tuple[Any, range]] = {}
        try:
            while todo or running:
                if stop.is_set():
                    todo.clear()
                for actor in live:
                    while todo and load[id(actor)] < IN_FLIGHT:
                        batch = todo.popleft()
                        ref = actor.generate.remote([requests[i] for i in batch])
                        running[ref] = (actor, batch)
                        load[id(actor)] += 1
                if not running:
                    break
                [ref], _ = ray.wait(list(running), num_returns=1)
                actor, batch = running.pop(ref)
                load[id(actor)] -= 1
                try:
                    outcomes = ray.get(ref)
                except RayActorError as exc:
                    live = [a for a in live if a is not actor]
                    todo.appendleft(batch)
                    self.batches_resent += 1
                    if not live:
                        raise BackendError(
                            f"{self.spec}: every Ray actor died (last: {exc}); finished batches are "
                            "kept in the cache, rerun to resume"
                        ) from None
                    continue
                except RayTaskError as exc:
                    raise BackendError(f"{self.spec}: a Ray actor failed: {exc.cause or exc}") from None
                yield list(zip(batch, outcomes, strict=True))
        except BaseException:  # an error, Ctrl-C, or the client closing the iterator
            for ref in running:
                ray.cancel(ref)
            raise

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []


class RayEmbedder:
    """An Embedder whose batches are split over Ray actors."""

    def __init__(self, spec: str, options: LoadOptions, settings: RaySettings) -> None:
        connect(settings)
        self.actors = _start(EmbedActor, settings, spec, options)
        first = _describe(self.actors, spec)[0]
        self.spec = first.spec
        self._identity = first.identity

    def identity(self) -> JsonObject:
        return dict(self._identity)

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        share = -(-len(texts) // len(self.actors))
        parts = [list(texts[start : start + share]) for start in range(0, len(texts), share)]
        try:
            vectors = ray.get([a.embed.remote(p) for a, p in zip(self.actors, parts, strict=False)])
        except (RayActorError, RayTaskError) as exc:
            raise BackendError(f"{self.spec}: embedding on Ray failed: {exc}") from None
        return np.concatenate(vectors).astype(np.float32, copy=False)

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
