"""Options every command shares, and turning them into a run Context."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from veracity.backends.endpoints import read_base_urls
from veracity.cache import Cache
from veracity.cli.output import safe
from veracity.cli.progress import TerminalProgress
from veracity.data.sample import Sample, Selection
from veracity.errors import ConfigError
from veracity.executors import parse_executor
from veracity.perturb import resolve_ball
from veracity.registry import parse_options
from veracity.runs.common import Context
from veracity.store import RunDir
from veracity.text import redact_urls, slug

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Finite(click.FloatRange):
    """A float range that also refuses NaN and infinity (FloatRange lets NaN through)."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


SEED = click.IntRange(0, 2**32 - 1)
THRESHOLD = Finite(0.0, 2.0, min_open=True)
"""γ thresholds: γ is at most 1 (sin form) or sqrt(2) (paper-code form)."""


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


def sample_options(func: F) -> F:
    """--sample K and --sample-seed S: a random sample of the dataset, drawn after --limit."""
    func = click.option("--sample-seed", type=SEED, default=0, show_default=True,
                        help="Seed of --sample (recorded in run.json).")(func)
    return click.option("--sample", "sample", type=click.IntRange(min=1), default=None,
                        metavar="K", help="A random K items of the dataset (of the first "
                        "--limit items when both are given), in the dataset's order.")(func)


def selection_of(sample: int | None, sample_seed: int, limit: int | None = None) -> Selection:
    """The items ``--limit``, ``--sample`` and ``--sample-seed`` choose."""
    if sample is None and click.get_current_context(silent=True) is not None \
            and click.get_current_context().get_parameter_source("sample_seed") \
            == click.core.ParameterSource.COMMANDLINE:
        raise ConfigError("--sample-seed only applies with --sample K")
    return Selection(limit, Sample(sample, sample_seed) if sample is not None else None)


def pick(items: Sequence[T], selection: Selection, ids: Callable[[T], str]) -> tuple[list[T],
                                                                                      dict[str, Any]]:
    """The selected items and what run.json records about the choice."""
    chosen = selection.apply(items)
    return chosen, selection.record(len(items), [ids(item) for item in chosen])


def record_selection(run: RunDir | None, record: dict[str, Any] | None) -> None:
    """Add the dataset selection to run.json's config (as ``selection``)."""
    if run is not None and record is not None:
        run.update_config({"selection": record})


def common_options(func: F) -> F:
    """--cache, --quiet, HTTP options (models and embedders), --device for hf/ models."""
    decorators = [
        click.option("--cache", "cache_path", type=click.Path(path_type=Path), default=None,
                     help="SQLite cache file (default: $VERACITY_HOME/cache.sqlite)."),
        click.option("--no-cache", is_flag=True, help="Do not read or write the cache."),
        click.option("--quiet", "-q", is_flag=True, help="No progress output."),
        click.option("--base-url", multiple=True,
                     help="Base URL of an OpenAI-compatible server (openai/... specs); repeat it to "
                          "spread requests over several servers of the same model."),
        click.option("--base-urls-file", type=click.Path(path_type=Path), default=None,
                     help="File with one base URL per line (# comments), like repeated --base-url."),
        click.option("--api-key-env", default=None,
                     help="Environment variable holding the API key (default OPENAI_API_KEY)."),
        click.option("--max-concurrency", type=click.IntRange(1, 1024), default=None,
                     help="Concurrent HTTP requests (openai/... specs, default 16; per endpoint when "
                          "there are several)."),
        click.option("--timeout", type=Finite(0.0, 86400.0, min_open=True), default=None,
                     help="Seconds per HTTP request (openai/... specs, default 60)."),
        click.option("--prefill-mode", type=click.Choice(["none", "continue", "completions"]),
                     default=None, help="How an openai/... server continues an assistant prefill: "
                     "'continue' (continue_final_message) or 'completions' (template applied here)."),
        click.option("--chat-template", default=None, metavar="FILE|NAME",
                     help="Prompt format of llamacpp/ and hf/ models (and of openai/ ones with "
                          "--prefill-mode completions) instead of the model's own: a Jinja file, "
                          "chatml, llama-2, plain, or raw (raw completion, no template). Part of "
                          "the run's model identity and of the cache key."),
        click.option("--embedder-base-url", default=None,
                     help="Base URL for openai/... embedders, when not the --base-url server."),
        click.option("--embedder-api-key-env", default=None,
                     help="Environment variable with the embedder's key (default: --api-key-env on the "
                          "same server, no key at all on another)."),
        click.option("--executor", default=None, metavar="local|ray|ray://HOST:PORT",
                     help="Where llamacpp/, hf/ and fake/ models run: here (local, default) or on "
                          "Ray actors (ray: a local Ray, or the cluster of --ray-address)."),
        click.option("--ray-address", default=None,
                     help="Ray cluster to join (auto, HOST:6379, ray://HOST:10001); implies --executor ray."),
        click.option("--actors", type=click.IntRange(min=1), default=2, show_default=True,
                     help="Ray actors per model; each loads the model once."),
        click.option("--actor-cpus", type=click.FloatRange(min=0), default=1.0, show_default=True,
                     help="CPUs each Ray actor reserves (and the threads its model uses)."),
        click.option("--actor-gpus", type=click.FloatRange(min=0), default=0.0, show_default=True,
                     help="GPUs each Ray actor reserves (e.g. 1 per model copy)."),
        click.option("--actor-batch", type=click.IntRange(min=1), default=8, show_default=True,
                     help="Requests sent to a Ray actor at once."),
        click.option("--ray-embeddings", is_flag=True,
                     help="Embed on Ray actors too (st/... and hash/... embedders)."),
        click.option("--model-option", "model_option", multiple=True, metavar="KEY=VALUE",
                     help="An option of the model's provider, repeatable; e.g. n_ctx=2048 "
                          "(llamacpp/...), dtype=float16 (hf/...). `veracity models` lists them."),
        click.option("--embedder-option", "embedder_option", multiple=True, metavar="KEY=VALUE",
                     help="An option of the embedder's provider, repeatable; e.g. backend=onnx "
                          "(st/...: torch, onnx, onnx-int8, torch-bf16). `veracity models` lists them."),
        click.option("--scorer-option", "scorer_option", multiple=True, metavar="KEY=VALUE",
                     help="An option of a pair scorer (cross-encoder/..., nli/...), repeatable; "
                          "e.g. trust_remote_code=true (off by default), batch_size=16."),
        click.option("--device", default=None,
                     help="Torch device of hf/... models: cpu, cuda, cuda:1 (default: cuda if "
                          "available, else cpu)."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


@dataclass(frozen=True)
class CommonOptions:
    """What :func:`common_options` adds to a command: the cache, how servers are reached,
    where models run and the providers' own options (turned into a run Context)."""

    cache_path: Path | None = None
    no_cache: bool = False
    quiet: bool = False
    base_url: tuple[str, ...] = ()
    base_urls_file: Path | None = None
    api_key_env: str | None = None
    max_concurrency: int | None = None
    timeout: float | None = None
    prefill_mode: str | None = None
    chat_template: str | None = None
    embedder_base_url: str | None = None
    embedder_api_key_env: str | None = None
    device: str | None = None
    executor: str | None = None
    ray_address: str | None = None
    actors: int = 2
    actor_cpus: float = 1.0
    actor_gpus: float = 0.0
    actor_batch: int = 8
    ray_embeddings: bool = False
    embedder_option: tuple[str, ...] = ()
    model_option: tuple[str, ...] = ()
    scorer_option: tuple[str, ...] = ()

    def context(self) -> Context:
        return make_context(**{f.name: getattr(self, f.name) for f in fields(self)})


S = TypeVar("S")


def options_as(cls: type[S]) -> Callable[[Callable[[S], None]], Callable[..., None]]:
    """A command that takes its options as one frozen dataclass ``cls`` (a field per option,
    typed): click's keyword arguments become its fields, the common options its ``common``
    field. The dataclass builds the method's settings, so no command reads an untyped dict."""
    takes_common = "common" in {f.name for f in fields(cast(Any, cls))}
    common_names = {f.name for f in fields(CommonOptions)} if takes_common else set()

    def wrap(func: Callable[[S], None]) -> Callable[..., None]:
        @functools.wraps(func)
        def command(**kw: Any) -> None:
            common = {k: kw.pop(k) for k in list(kw) if k in common_names}
            if common:
                kw["common"] = CommonOptions(**common)
            func(cls(**kw))

        return command

    return wrap


def make_context(
    cache_path: Path | None = None,
    no_cache: bool = False,
    quiet: bool = False,
    base_url: str | Sequence[str] | None = None,
    base_urls_file: Path | None = None,
    api_key_env: str | None = None,
    max_concurrency: int | None = None,
    timeout: float | None = None,
    prefill_mode: str | None = None,
    chat_template: str | None = None,
    embedder_base_url: str | None = None,
    embedder_api_key_env: str | None = None,
    device: str | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    actors: int = 2,
    actor_cpus: float = 1.0,
    actor_gpus: float = 0.0,
    actor_batch: int = 8,
    ray_embeddings: bool = False,
    embedder_option: tuple[str, ...] = (),
    model_option: tuple[str, ...] = (),
    scorer_option: tuple[str, ...] = (),
    **_: Any,
) -> Context:
    """A Context from the common options: the HTTP flags are options of the openai provider,
    --device one of hf, and --model-option / --embedder-option any declared option."""
    urls = [base_url] if isinstance(base_url, str) else list(base_url or ())
    if base_urls_file is not None:
        urls += read_base_urls(base_urls_file)
    urls = list(dict.fromkeys(urls))
    first = urls[0] if urls else None
    http = {"base_url": urls if len(urls) > 1 else first, "api_key_env": api_key_env,
            "max_concurrency": max_concurrency, "timeout": timeout, "prefill_mode": prefill_mode,
            "chat_template": chat_template}
    # another server gets a key only when one is named for it ("" = send none)
    other = embedder_base_url is not None and embedder_base_url.rstrip("/") not in {
        u.rstrip("/") for u in urls}
    endpoint = {"base_url": embedder_base_url or first,
                "api_key_env": embedder_api_key_env or ("" if other else api_key_env),
                "timeout": timeout}
    # parsed before anything is opened; the flags win over --model-option
    local = {"chat_template": chat_template}
    models = _merge(parse_options(model_option, "model"),
                    {"openai": http, "hf": {"device": device, **local}, "llamacpp": local})
    embedders = _merge(parse_options(embedder_option, "embedder"), {"openai": endpoint})
    scorers = parse_options(scorer_option, "scorer")
    return Context(
        cache=None if no_cache else Cache(cache_path),
        progress=TerminalProgress(quiet),
        model_options=models,
        embedder_options=embedders,
        scorer_options=scorers,
        ray=parse_executor(executor, ray_address, actors, actor_cpus, actor_gpus, actor_batch,
                           ray_embeddings),
    )


def _merge(parsed: dict[str, dict[str, Any]],
           flags: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per-provider options with the flags that were given (not None) on top."""
    out = {provider: dict(options) for provider, options in parsed.items()}
    for provider, options in flags.items():
        given = {k: v for k, v in options.items() if v is not None}
        if given:
            out.setdefault(provider, {}).update(given)
    return out


def pop_common(kwargs: dict[str, Any]) -> CommonOptions:
    """Remove the common options from a command's kwargs and return them."""
    return CommonOptions(**{f.name: kwargs.pop(f.name) for f in fields(CommonOptions)
                            if f.name in kwargs})


def handles_errors(func: F) -> F:
    """Turn veracity errors into clean CLI errors, and Ctrl-C into a resume hint. A write that
    ran out of space where no message names its file yet still gets one line, no traceback."""
    import sqlite3

    from veracity.errors import VeracityError
    from veracity.space import is_no_space, storage_error

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except VeracityError as exc:
            raise click.ClickException(safe(redact_urls(str(exc)))) from exc
        except (OSError, sqlite3.Error) as exc:
            if not is_no_space(exc):
                raise
            where = getattr(exc, "filename", None) or "a file"
            message = str(storage_error(exc, where, "data"))
            raise click.ClickException(safe(redact_urls(message))) from exc
        except KeyboardInterrupt as exc:
            detail = (f" {exc}" if str(exc) else
                      ": finished generations are cached; rerun the same command to resume")
            click.echo(f"\ninterrupted{detail}.", err=True)
            raise SystemExit(130) from None

    return wrapper  # type: ignore[return-value]


def default_out(kind: str, dataset: str, model: str) -> Path:
    """A stable run directory name, so rerunning the same command resumes in place; another
    configuration gets a directory of its own (:func:`unique_out`)."""
    return unique_out(slug(f"{kind}-{Path(dataset).stem}-{model}"))


FINGERPRINT_FILE = ".veracity-settings"
"""In a run directory made under a default name: the digest of the settings that made it."""
_NOT_SETTINGS = frozenset({
    "out", "cache_path", "no_cache", "quiet", "as_json", "max_concurrency", "timeout",
    "api_key_env", "embedder_api_key_env", "executor", "ray_address", "actors", "actor_cpus",
    "actor_gpus", "actor_batch", "ray_embeddings", "force"})
"""Options that change where and how fast a run goes, not what it computes."""


def settings_digest() -> str:
    """A digest of the current command and every option that changes what it computes."""
    import hashlib
    import json

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return "0" * 12
    given = {k: v for k, v in ctx.params.items() if k not in _NOT_SETTINGS}
    text = json.dumps([ctx.command_path.split()[1:], given], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def unique_out(name: str) -> Path:
    """``runs/NAME`` unless it holds a run made with other settings; then ``runs/NAME-DIGEST``
    (said on stderr), so a default directory is never replaced by another configuration's run
    and rerunning the same command still resumes in place."""
    digest = settings_digest()
    plain = Path("runs") / name
    for candidate in (plain, Path("runs") / f"{name}-{digest}"):
        mark = candidate / FINGERPRINT_FILE
        try:
            recorded = mark.read_text(encoding="utf-8").strip()
        except OSError:
            recorded = None
        if recorded == digest or (recorded is None and not (candidate / "run.json").exists()):
            if candidate != plain:
                click.echo(safe(f"{plain} holds a run made with other settings: this one goes "
                                f"to {candidate}"), err=True)
            candidate.mkdir(parents=True, exist_ok=True)
            mark.write_text(digest + "\n", encoding="utf-8")
            return candidate
    raise ConfigError(f"{plain} and {plain}-{digest} hold runs made with other settings: give "
                      "--out DIR")
