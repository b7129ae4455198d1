"""Declared provider options: parsing, defaults that match the constructors, Context lifecycle."""

from __future__ import annotations

import inspect
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from veracity.backends.fake import FakeBackend
from veracity.backends.hf import DTYPES, HFBackend
from veracity.backends.llamacpp import LlamaCppBackend
from veracity.backends.openai import PREFILL_MODES, OpenAIBackend
from veracity.cache import Cache
from veracity.cli import main
from veracity.cli.options import make_context
from veracity.client import LLMClient
from veracity.embed.cross import CrossEncoderScorer
from veracity.embed.openai import OpenAIEmbedder
from veracity.embed.st import BACKENDS, SentenceTransformerEmbedder
from veracity.errors import ConfigError
from veracity.registry import (
    EMBEDDERS,
    MODELS,
    SCORERS,
    Option,
    Provider,
    declared,
    parse_options,
    resolved_options,
)
from veracity.runs.common import Context
from veracity.types import GenRequest

CONSTRUCTORS: dict[tuple[str, str], Any] = {
    ("model", "llamacpp"): LlamaCppBackend,
    ("model", "openai"): OpenAIBackend,
    ("model", "hf"): HFBackend,
    ("model", "fake"): FakeBackend,
    ("embedder", "st"): SentenceTransformerEmbedder,
    ("embedder", "openai"): OpenAIEmbedder,
    ("scorer", "cross-encoder"): CrossEncoderScorer,
    ("scorer", "nli"): CrossEncoderScorer,
}


@pytest.mark.parametrize(("what", "provider"), sorted(CONSTRUCTORS))
def test_declared_options_are_constructor_parameters_with_the_same_defaults(
    what: str, provider: str
) -> None:
    table = {"model": MODELS, "embedder": EMBEDDERS, "scorer": SCORERS}[what]
    parameters = inspect.signature(CONSTRUCTORS[(what, provider)]).parameters
    for option in declared(table[provider]):
        assert option.name in parameters, option.name
        expected = parameters[option.name].default
        assert option.default == (None if expected is inspect.Parameter.empty else expected), option


def test_declared_choices_are_the_backends_own() -> None:
    options = {o.name: o for o in MODELS["hf"].options}
    assert set(options["dtype"].choices) == set(DTYPES)
    options = {o.name: o for o in MODELS["openai"].options}
    assert options["prefill_mode"].choices == PREFILL_MODES
    options = {o.name: o for o in EMBEDDERS["st"].options}
    assert options["backend"].choices == BACKENDS


def test_model_options_are_typed_and_reach_every_provider_declaring_them() -> None:
    assert parse_options(["n_ctx=2048", "timeout=2.5", "dtype=float16"]) == {
        "llamacpp": {"n_ctx": 2048}, "openai": {"timeout": 2.5}, "hf": {"dtype": "float16"}}
    assert parse_options(["batch_size=4"]) == {"hf": {"batch_size": 4}}


def test_bad_model_options_are_clear_errors_listing_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown model option 'n_ctxx'\. Known: .*n_ctx \(llamacpp/"):
        parse_options(["n_ctxx=1"])
    with pytest.raises(ConfigError, match="n_ctx=big: not a valid int"):
        parse_options(["n_ctx=big"])
    with pytest.raises(ConfigError, match="choose one of auto, float32, float16, bfloat16"):
        parse_options(["dtype=int4"])
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_options(["n_ctx"])


def test_a_plugin_factory_declares_its_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MODELS, "plug", Provider("plug", "tests_plugin:load", "plug/...", "plugin"))

    def load(name: str, **options: Any) -> FakeBackend:
        return FakeBackend(name, **options)

    load.options = (Option("delay", "seconds", type=float, default=0.0),)  # type: ignore[attr-defined]
    monkeypatch.setattr(Provider, "factory", lambda self: load)
    assert parse_options(["delay=0.5"])["plug"] == {"delay": 0.5}
    assert resolved_options("plug/echo", {}) == {"delay": 0.0}


def test_options_go_to_their_provider_only_and_resolved_values_are_recorded() -> None:
    with Context(model_options={"fake": {"delay": 0.0}, "llamacpp": {"n_ctx": 1024}}) as ctx:
        client = ctx.client("fake/echo")
        assert isinstance(client.backend, FakeBackend) and client.backend.delay == 0.0
        record = ctx.options_record()
    assert record["models"]["fake"] == {"delay": 0.0}
    # given but not used: recorded with the declared defaults it would have run with
    assert record["models"]["llamacpp"] == {"n_ctx": 1024, "n_batch": 32, "n_gpu_layers": 0,
                                            "extra_buffers": "auto", "decode": "auto",
                                            "attention": "auto"}


def test_the_cli_flags_are_options_of_their_providers() -> None:
    ctx = make_context(no_cache=True, quiet=True, base_url="http://h:1/v1", timeout=3.0,
                       device="cpu", model_option=("n_threads=2", "timeout=9"))
    # an explicit flag wins over the same --model-option
    assert ctx.model_options == {"openai": {"base_url": "http://h:1/v1", "timeout": 3.0},
                                 "hf": {"device": "cpu"}, "llamacpp": {"n_threads": 2}}
    with pytest.raises(ConfigError, match="unknown model option"):
        make_context(no_cache=True, quiet=True, model_option=("colour=red",))


def test_cli_model_option_is_validated_and_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["gamma", "What is 2+2?", "--model", "fake/echo", "--embedder", "hash/default", "-n", "2",
            "--out", str(out), "--quiet"]
    bad = CliRunner().invoke(main, [*args, "--model-option", "n_layers=3"])
    assert bad.exit_code != 0 and "unknown model option 'n_layers'" in bad.output
    assert "n_gpu_layers (llamacpp/...)" in bad.output and not out.exists()
    good = CliRunner().invoke(main, [*args, "--model-option", "delay=0.001"])
    assert good.exit_code == 0, good.output
    info = json.loads((out / "run.json").read_text("utf-8"))
    assert info["config"]["model_options"]["models"] == {"fake": {"delay": 0.001}}


class Closing(FakeBackend):
    closed = 0

    def close(self) -> None:
        Closing.closed += 1


def test_context_closes_models_embedders_and_the_cache(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    with Context(cache=cache) as ctx:
        ctx.clients["fake/closing"] = LLMClient(Closing("echo"), cache)
        ctx.embedder("hash/default").embed(["a"])
        ctx.client("fake/echo").generate([GenRequest.user("hi")])
    assert Closing.closed == 1 and ctx.clients == {} and ctx.embedders == {}
    with pytest.raises(sqlite3.ProgrammingError):
        cache.get_json(["k"])  # closed


def test_context_closes_everything_even_when_the_run_fails(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    with pytest.raises(ConfigError), Context(cache=cache) as ctx:
        ctx.client("fake/no-such-mode")
    with pytest.raises(sqlite3.ProgrammingError):
        cache.get_json(["k"])
    shared = Cache(tmp_path / "shared.sqlite")
    with Context(cache=shared, close_cache=False):
        pass
    assert shared.get_json(["k"]) == {}  # still open for its owner
    shared.close()


def test_where_a_model_runs_is_declared_by_its_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    from veracity.executors import runs_on_ray

    assert not runs_on_ray("openai/gpt-4o-mini") and runs_on_ray("llamacpp/default")
    assert not runs_on_ray("openai/emb", "embedder") and runs_on_ray("st/default", "embedder")
    monkeypatch.setitem(MODELS, "svc", Provider("svc", "x:load", "svc/...", "a service", remote=True))
    assert not runs_on_ray("svc/model")  # no prefix list to extend


def test_models_lists_every_declared_option_with_its_default() -> None:
    result = CliRunner().invoke(main, ["models"])
    assert result.exit_code == 0, result.output
    assert "--model-option n_ctx=INT: context length in tokens (default 4096)" in result.output
    assert "--model-option dtype=auto|float32|float16|bfloat16" in result.output
    assert "--embedder-option backend=auto|torch|onnx|onnx-int8" in result.output
    assert "--model-option extra_buffers=auto|on|off" in result.output
    assert "Pair scorers (FEWL --similarity):" in result.output
    assert "cross-encoder/PATH" in result.output
