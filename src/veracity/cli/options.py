"""Options every command shares, and turning them into a run Context."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from veracity.cache import Cache
from veracity.cli.progress import TerminalProgress
from veracity.errors import ConfigError
from veracity.perturb import resolve_ball
from veracity.registry import parse_embedder_options
from veracity.runs.common import Context

F = TypeVar("F", bound=Callable[..., Any])


def ball_choice(*special: str) -> Callable[[click.Context, click.Parameter, str], str]:
    """An option callback accepting any registered ball, ``utf8:LOW-HIGH``, or ``special``.

    Checked when the command runs, not fixed at import, so balls registered by the user's
    code are accepted too.
    """

    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        if value in special:
            return value
        try:
            resolve_ball(value)
        except ConfigError as exc:
            known = f" (or {', '.join(special)})" if special else ""
            raise click.BadParameter(f"{exc}{known}") from None
        return value

    return check


def common_options(func: F) -> F:
    """--cache, --quiet, HTTP options (models and embedders), --device for hf/ models."""
    decorators = [
        click.option("--cache", "cache_path", type=click.Path(path_type=Path), default=None,
                     help="SQLite cache file (default: $VERACITY_HOME/cache.sqlite)."),
        click.option("--no-cache", is_flag=True, help="Do not read or write the cache."),
        click.option("--quiet", "-q", is_flag=True, help="No progress output."),
        click.option("--base-url", default=None,
                     help="Base URL of an OpenAI-compatible server (openai/... specs)."),
        click.option("--api-key-env", default=None,
                     help="Environment variable holding the API key (default OPENAI_API_KEY)."),
        click.option("--max-concurrency", type=int, default=None,
                     help="Concurrent HTTP requests (openai/... specs, default 16)."),
        click.option("--timeout", type=float, default=None,
                     help="Seconds per HTTP request (openai/... specs, default 60)."),
        click.option("--prefill-mode", type=click.Choice(["none", "continue", "completions"]),
                     default=None, help="How an openai/... server continues an assistant prefill: "
                     "'continue' (continue_final_message) or 'completions' (template applied here)."),
        click.option("--chat-template", default=None,
                     help="Jinja chat template file for --prefill-mode completions."),
        click.option("--embedder-base-url", default=None,
                     help="Base URL for openai/... embedders, when not the --base-url server."),
        click.option("--embedder-api-key-env", default=None,
                     help="Environment variable with the embedder's key (default: --api-key-env on the "
                          "same server, OPENAI_API_KEY on another)."),
        click.option("--embedder-option", "embedder_option", multiple=True, metavar="KEY=VALUE",
                     help="An option of the embedder's provider, repeatable; e.g. backend=onnx "
                          "(st/...: torch, onnx, onnx-int8). `veracity models` lists them."),
        click.option("--device", default=None,
                     help="Torch device of hf/... models: cpu, cuda, cuda:1 (default: cuda if "
                          "available, else cpu)."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def make_context(
    cache_path: Path | None = None,
    no_cache: bool = False,
    quiet: bool = False,
    base_url: str | None = None,
    api_key_env: str | None = None,
    max_concurrency: int | None = None,
    timeout: float | None = None,
    prefill_mode: str | None = None,
    chat_template: str | None = None,
    embedder_base_url: str | None = None,
    embedder_api_key_env: str | None = None,
    device: str | None = None,
    embedder_option: tuple[str, ...] = (),
    **_: Any,
) -> Context:
    """A Context from the common options (HTTP options reach openai/... specs only)."""
    http = {"base_url": base_url, "api_key_env": api_key_env, "max_concurrency": max_concurrency,
            "timeout": timeout, "prefill_mode": prefill_mode, "chat_template": chat_template}
    # another server means another key: the model's key is never sent to it
    endpoint = {"base_url": embedder_base_url or base_url,
                "api_key_env": embedder_api_key_env or (None if embedder_base_url else api_key_env),
                "timeout": timeout}
    provider_options = parse_embedder_options(embedder_option)  # before opening anything
    return Context(
        cache=None if no_cache else Cache(cache_path),
        progress=TerminalProgress(quiet),
        http_options={k: v for k, v in http.items() if v is not None},
        embedder_http_options={k: v for k, v in endpoint.items() if v is not None},
        hf_options={} if device is None else {"device": device},
        provider_embedder_options=provider_options,
    )


def pop_common(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove the common options from a command's kwargs and return them."""
    names = ("cache_path", "no_cache", "quiet", "base_url", "api_key_env", "max_concurrency",
             "timeout", "prefill_mode", "chat_template", "embedder_base_url",
             "embedder_api_key_env", "device", "embedder_option")
    return {name: kwargs.pop(name) for name in names if name in kwargs}


def handles_errors(func: F) -> F:
    """Turn veracity errors into clean CLI errors, and Ctrl-C into a resume hint."""
    from veracity.errors import VeracityError

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except VeracityError as exc:
            raise click.ClickException(str(exc)) from exc
        except KeyboardInterrupt:
            click.echo(
                "\ninterrupted: finished generations are cached; rerun the same command to resume.",
                err=True,
            )
            raise SystemExit(130) from None

    return wrapper  # type: ignore[return-value]
