"""What every run shares: the cache, progress, and cached model / embedder clients."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.client import CachedEmbedder, CallStats, LLMClient, NullProgress, Progress
from veracity.embed.base import Embedder
from veracity.executors import RaySettings, runs_on_ray
from veracity.registry import load_embedder, load_model, split_spec
from veracity.store import timestamp


@dataclass
class Context:
    """Shared resources of one run. ``cache=None`` disables caching."""

    cache: Cache | None = None
    progress: Progress = field(default_factory=NullProgress)
    model_options: dict[str, Any] = field(default_factory=dict)
    """Options passed to every model factory."""
    embedder_options: dict[str, Any] = field(default_factory=dict)
    """Options passed to every embedder factory."""
    http_options: dict[str, Any] = field(default_factory=dict)
    """Options for ``openai/...`` models only (base_url, api_key_env, prefill_mode, ...)."""
    embedder_http_options: dict[str, Any] = field(default_factory=dict)
    """Options for ``openai/...`` embedders only (base_url, api_key_env, timeout)."""
    hf_options: dict[str, Any] = field(default_factory=dict)
    """Options for ``hf/...`` models only (device)."""
    ray: RaySettings | None = None
    """Run in-process models (and, if asked, embedders) on Ray actors instead of here."""
    provider_embedder_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Options per embedder provider (``--embedder-option``), e.g. {"st": {"backend": "onnx"}}."""
    clients: dict[str, LLMClient] = field(default_factory=dict)
    embedders: dict[str, CachedEmbedder] = field(default_factory=dict)
    started: str = field(default_factory=timestamp)
    """When the run began, for run.json (its directory is written at the end)."""

    def client(self, spec: str, **options: Any) -> LLMClient:
        """The cached client of a model spec, built once per run."""
        if spec not in self.clients:
            only = (self.http_options if spec.startswith("openai/")
                    else self.hf_options if spec.startswith("hf/") else {})
            merged = {**self.model_options, **only, **options}
            if self.ray is not None and runs_on_ray(spec):
                from veracity.executors.ray_actors import RayBackend

                backend: Backend = RayBackend(spec, merged, self.ray, self.cache)
            else:
                backend = load_model(spec, **merged)
            self.clients[spec] = LLMClient(backend, self.cache, self.progress)
        return self.clients[spec]

    def embedder(self, spec: str, **options: Any) -> CachedEmbedder:
        """The cached embedder of a spec, built once per run."""
        if spec not in self.embedders:
            http = self.embedder_http_options if spec.startswith("openai/") else {}
            declared = self.provider_embedder_options.get(split_spec(spec)[0], {})
            merged = {**self.embedder_options, **http, **declared, **options}
            if self.ray is not None and self.ray.embeddings and runs_on_ray(spec):
                from veracity.executors.ray_actors import RayEmbedder

                embedder: Embedder = RayEmbedder(spec, merged, self.ray)
            else:
                embedder = load_embedder(spec, **merged)
            self.embedders[spec] = CachedEmbedder(embedder, self.cache)
        return self.embedders[spec]

    def options_record(self) -> dict[str, Any]:
        """Model options for run.json (key variable names only, never key values)."""
        record = {**self.model_options, **self.http_options, **self.hf_options}
        if self.embedder_http_options:
            record["embedder_http"] = dict(self.embedder_http_options)
        if self.ray is not None:
            record["executor"] = self.ray.describe()
        if self.provider_embedder_options:
            record["embedder_options"] = {k: dict(v) for k, v in self.provider_embedder_options.items()}
        return record

    def stats(self) -> dict[str, Any]:
        """Call statistics per model and embedder, for run.json."""
        out: dict[str, Any] = {}
        for spec, client in self.clients.items():
            out[f"model:{spec}"] = asdict(client.stats)
            per_endpoint = getattr(client.backend, "endpoint_stats", None)
            if per_endpoint is not None:  # several servers behind one spec
                out[f"model:{spec}"]["endpoints"] = per_endpoint()
        for spec, embedder in self.embedders.items():
            # which path ran (e.g. st's backend, torch when ONNX Runtime is missing)
            out[f"embedder:{spec}"] = asdict(embedder.stats) | {"identity": embedder.embedder.identity()}
        return out

    def model_calls(self) -> int:
        return sum(c.stats.model_calls for c in self.clients.values())

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        self.clients.clear()
        for cached in self.embedders.values():
            close = getattr(cached.embedder, "close", None)
            if close is not None:  # HTTP sessions, Ray actors
                close()
        self.embedders.clear()


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
