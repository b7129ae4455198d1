"""What every run shares: the cache, progress, and cached model / embedder clients."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.client import (
    CachedEmbedder,
    CallStats,
    LLMClient,
    NullProgress,
    Progress,
    ScorerClient,
)
from veracity.embed.base import Embedder
from veracity.errors import ConfigError
from veracity.executors import RaySettings, runs_on_ray
from veracity.jsontypes import JsonObject
from veracity.registry import (
    load_embedder,
    load_model,
    load_scorer,
    resolve,
    resolved_options,
)
from veracity.runlock import release_run_dirs
from veracity.store import timestamp
from veracity.text import redact_urls


@dataclass
class Context:
    """Shared resources of one run; ``with Context(...) as ctx:`` closes them all at the end.

    Options are per provider, as declared in the registry (``--model-option``,
    ``--embedder-option`` and the HTTP flags): ``{"llamacpp": {"n_ctx": 2048}}``.
    ``cache=None`` disables caching.

    >>> from veracity.types import GenRequest
    >>> with Context(model_options={"fake": {"delay": 0.0}}) as ctx:
    ...     ctx.client("fake/echo").generate([GenRequest.user("hi")])[0].text
    'You asked: hi'
    """

    cache: Cache | None = None
    progress: Progress = field(default_factory=NullProgress)
    model_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Options per model provider, e.g. {"openai": {"base_url": ...}, "hf": {"device": "cpu"}}."""
    embedder_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Options per embedder provider, e.g. {"st": {"backend": "onnx"}}."""
    scorer_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Options per pair-scorer provider, e.g. {"cross-encoder": {"trust_remote_code": True}}."""
    ray: RaySettings | None = None
    """Run in-process models (and, if asked, embedders) on Ray actors instead of here."""
    close_cache: bool = True
    """Whether ``close`` closes the cache too (False when the caller shares it with others)."""
    clients: dict[str, LLMClient] = field(default_factory=dict)
    embedders: dict[str, CachedEmbedder] = field(default_factory=dict)
    scorers: dict[str, ScorerClient] = field(default_factory=dict)
    started: str = field(default_factory=timestamp)
    """When the run began, for run.json (its directory is written at the end)."""

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def client(self, spec: str, **options: Any) -> LLMClient:
        """The cached client of a model spec, built once per run."""
        if spec not in self.clients:
            merged = {**self.model_options.get(resolve(spec).provider, {}), **options}
            if self.ray is not None and runs_on_ray(spec):
                from veracity.executors.ray_actors import RayBackend

                backend: Backend = RayBackend(spec, merged, self.ray)
            else:
                backend = load_model(spec, **merged)
            self.clients[spec] = LLMClient(backend, self.cache, self.progress)
        return self.clients[spec]

    def embedder(self, spec: str, **options: Any) -> CachedEmbedder:
        """The cached embedder of a spec, built once per run."""
        if spec not in self.embedders:
            merged = {**self.embedder_options.get(resolve(spec).provider, {}), **options}
            if self.ray is not None and self.ray.embeddings and runs_on_ray(spec, "embedder"):
                from veracity.executors.ray_actors import RayEmbedder

                embedder: Embedder = RayEmbedder(spec, merged, self.ray)
            else:
                embedder = load_embedder(spec, **merged)
            self.embedders[spec] = CachedEmbedder(embedder, self.cache)
        return self.embedders[spec]

    def scorer(self, spec: str, **options: Any) -> ScorerClient:
        """The cached client of a pair-scorer spec (``cross-encoder/PATH``), built once per run."""
        if spec not in self.scorers:
            merged = {**self.scorer_options.get(resolve(spec).provider, {}), **options}
            self.scorers[spec] = ScorerClient(load_scorer(spec, **merged), self.cache,
                                              self.progress)
        return self.scorers[spec]

    def options_record(self) -> JsonObject:
        """Resolved options for run.json: per provider of every model and embedder given
        options or used, its declared defaults and what was set (key variable names only,
        never key values)."""
        record: JsonObject = {}
        for what, given, used in (("model", self.model_options, self.clients),
                                  ("embedder", self.embedder_options, self.embedders),
                                  ("scorer", self.scorer_options, self.scorers)):
            providers = dict.fromkeys([*given, *(resolve(s).provider for s in used)])
            resolved = {p: resolved_options(f"{p}/", dict(given.get(p, {})), what) for p in providers}
            plain: JsonObject = {p: _plain(v) for p, v in resolved.items() if v}
            if plain:
                record[f"{what}s"] = plain
        if self.ray is not None:
            record["executor"] = self.ray.describe()
        return record

    def stats(self) -> JsonObject:
        """Call statistics per model and embedder, for run.json."""
        out: JsonObject = {}
        for spec, client in self.clients.items():
            model: JsonObject = asdict(client.stats)
            per_endpoint = getattr(client.backend, "endpoint_stats", None)
            if per_endpoint is not None:  # several servers behind one spec
                model["endpoints"] = per_endpoint()
            path = getattr(client.backend, "compute_path", None)
            if path is not None:  # CPU features and kernels: what a γ can be traced to
                model["compute_path"] = path()
            out[f"model:{spec}"] = model
        for spec, embedder in self.embedders.items():
            # which path ran (e.g. st's backend, torch when ONNX Runtime is missing)
            used: JsonObject = asdict(embedder.stats) | {"identity": embedder.embedder.identity()}
            choice = getattr(embedder.embedder, "backend_choice", None)
            if choice is not None:  # how backend=auto chose, with its figures
                used["backend_choice"] = choice
            out[f"embedder:{spec}"] = used
        for spec, scorer in self.scorers.items():
            out[f"scorer:{spec}"] = asdict(scorer.stats) | {"identity": scorer.scorer.identity()}
        return out

    def reuse_endpoints(self, config: dict[str, Any], models: tuple[str, ...] = (),
                        embedders: tuple[str, ...] = ()) -> list[str]:
        """Take what a run recorded for the providers of the ``models`` and ``embedders`` it
        used (its endpoint above all: ``base_url``), wherever this command set nothing of its
        own, so a command re-opening a run's model asks the same server. Never a key, nor which
        variable holds one: those stay this command's. Returns what was taken, as lines to show.
        """
        recorded = config.get("model_options")
        recorded = recorded if isinstance(recorded, dict) else {}
        notes = []
        for what, specs, target in (("model", models, self.model_options),
                                    ("embedder", embedders, self.embedder_options)):
            kept = recorded.get(f"{what}s")
            for spec in specs:
                try:
                    provider = resolve(spec).provider
                except ConfigError:  # "recorded": generations read from a file, no model
                    continue
                options = kept.get(provider) if isinstance(kept, dict) else None
                if not isinstance(options, dict):
                    continue
                given = target.get(provider, {})
                taken = {k: v for k, v in options.items() if k not in given and not _secret(k)}
                if not taken:
                    continue
                target[provider] = {**given, **taken}
                url = taken.get("base_url") or taken.get("base_urls")
                if url:
                    key = resolved_options(f"{provider}/", target[provider], what).get("api_key_env")
                    sent = f"${key}" if key else "no key"
                    notes.append(f"{what} {spec}: the run's endpoint {redact_urls(str(url))} (from "
                                 f"run.json; {sent} is sent there; --base-url overrides it)")
        return notes

    def model_calls(self) -> int:
        return sum(c.stats.model_calls for c in self.clients.values())

    def close(self) -> None:
        """Close every model and embedder, then the cache (unless ``close_cache`` is False: then
        its pending writes are finished), and give up the run directories this thread claimed."""
        try:
            for client in self.clients.values():
                client.close()
            for cached in self.embedders.values():
                close = getattr(cached.embedder, "close", None)
                if close is not None:  # HTTP sessions, Ray actors
                    close()
            for scorer in self.scorers.values():
                scorer.close()
        finally:
            self.clients.clear()
            self.embedders.clear()
            self.scorers.clear()
            if self.close_cache and self.cache is not None:
                self.cache.close()
            elif self.cache is not None:
                self.cache.flush()  # the caller's cache: what this call embedded is written
            release_run_dirs()


def _secret(name: str) -> bool:
    """Option names a run file may not set for a command: keys and where they are read from."""
    return any(word in name.lower() for word in ("key", "secret", "token", "password", "auth"))


def _plain(options: dict[str, Any]) -> JsonObject:
    """Options as JSON values (a list of base URLs stays a list)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}


def total_stats(ctx: Context) -> CallStats:
    """All model clients' counters added up."""
    total = CallStats()
    for client in ctx.clients.values():
        s = client.stats
        total.requests += s.requests
        total.cache_hits += s.cache_hits
        total.model_calls += s.model_calls
        total.failed += s.failed
        total.completion_tokens += s.completion_tokens
        total.model_seconds += s.model_seconds
    return total


def open_cache(cache: bool | str | Path | Cache) -> Cache | None:
    """The cache an API call uses: True = the default file, False = none, or a path."""
    if isinstance(cache, Cache):
        return cache
    if cache is True:
        return Cache()
    if cache is False:
        return None
    return Cache(cache)


@contextmanager
def api_context(
    cache: bool | str | Path | Cache, *models: str | Backend
) -> Iterator[tuple[Context, list[str]]]:
    """A run Context for one API call and the spec of each model; a backend the caller built
    is used as is and left open (the caller owns it), everything loaded here is closed."""
    ctx = Context(cache=open_cache(cache))
    specs, adopted = [], []
    for model in models:
        if isinstance(model, str):
            specs.append(model)
            continue
        client = LLMClient(model, ctx.cache)
        ctx.clients[client.spec] = client
        specs.append(client.spec)
        adopted.append(client.spec)
    try:
        yield ctx, specs
    finally:
        for spec in adopted:
            ctx.clients.pop(spec, None)
        ctx.close()
