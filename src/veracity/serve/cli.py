"""``veracity serve``: the OpenAI-compatible gateway that scores every answer with gamma."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from veracity.cli.options import ball_choice, handles_errors, options_as
from veracity.errors import ConfigError
from veracity.methods.gamma.core import FORMS, Form
from veracity.text import redact_url

if TYPE_CHECKING:
    from veracity.serve.settings import GatewaySettings, Mode


def parse_thresholds(value: str | None) -> tuple[float, float] | None:
    """``"low,high"`` -> (low, high)."""
    if value is None:
        return None
    parts = value.split(",")
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"--thresholds must be two numbers 'low,high', got '{value}'") from None
    return low, high


OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                  "OTEL_TRACES_EXPORTER")


def gateway_tracing(flag: bool, content: bool) -> Any:
    """The gateway's OpenTelemetry tracing when ``--otel`` or the SDK's environment asks for
    it (None otherwise: nothing of OpenTelemetry is imported)."""
    if content and not flag and not any(os.environ.get(v) for v in OTEL_VARIABLES):
        raise ConfigError("--trace-content needs tracing: --otel or OTEL_EXPORTER_OTLP_ENDPOINT")
    if not flag and not any(os.environ.get(v) for v in OTEL_VARIABLES):
        return None
    try:
        from veracity.serve.tracing import configure
    except ImportError as exc:
        hint = f"traces need the otel extra: pip install 'veracity[otel]' ({exc})"
        if flag:
            raise ConfigError(hint) from None
        click.echo(f"veracity gateway: OTEL_* is set but {hint}; no traces", err=True)
        return None
    return configure(content)


@dataclass(frozen=True)
class ServeOptions:
    """``veracity serve``'s options."""

    upstream: str | None
    upstream_api_key_env: str
    model: str
    model_option: tuple[str, ...]
    embedder: str
    embedder_option: tuple[str, ...]
    n: int
    ball: str
    seed: int
    form: Form
    temperature: float
    max_tokens: int
    thresholds: str | None
    calibration: Path | None
    force: bool
    mode: Mode
    max_concurrency: int
    queue: int
    timeout: float
    log_file: Path
    no_log: bool
    cache_path: Path | None
    no_cache: bool
    api_keys_env: str
    no_auth: bool
    host: str
    port: int
    shutdown_grace: float
    otel: bool
    trace_content: bool
    max_body: int
    client_timeout: float
    max_connections: int
    cors_origin: tuple[str, ...]
    score_retention: float

    def settings(self) -> GatewaySettings:
        """The gateway's settings; the in-process model's options are refused for an upstream."""
        from veracity.registry import parse_embedder_options, parse_options, resolve
        from veracity.serve.settings import GatewaySettings, keys_from_env

        options = parse_embedder_options(self.embedder_option).get(
            resolve(self.embedder).provider, {})
        parsed = parse_options(self.model_option)
        model_options = parsed.get(resolve(self.model).provider, {})
        unused = [p for p in self.model_option
                  if self.upstream or p.partition("=")[0].strip() not in model_options]
        if unused:
            served = "the upstream" if self.upstream else self.model
            raise ConfigError(f"--model-option sets the in-process model's options; {served} "
                              f"does not take {', '.join(unused)}")
        return GatewaySettings(
            upstream=self.upstream, upstream_api_key_env=self.upstream_api_key_env,
            model=self.model, model_options=model_options,
            embedder=self.embedder, embedder_options=options, n=self.n, ball=self.ball,
            seed=self.seed, form=self.form,
            temperature=self.temperature, max_tokens=self.max_tokens,
            thresholds=parse_thresholds(self.thresholds), calibration=self.calibration,
            force=self.force, mode=self.mode,
            max_concurrency=self.max_concurrency, queue=self.queue, timeout=self.timeout,
            log=None if self.no_log else self.log_file, cache=self.cache_path,
            no_cache=self.no_cache,
            api_keys=() if self.no_auth else keys_from_env(self.api_keys_env),
            no_auth=self.no_auth, host=self.host, port=self.port,
            shutdown_grace=self.shutdown_grace, max_body=self.max_body,
            client_timeout=self.client_timeout, max_connections=self.max_connections,
            cors_origins=tuple(self.cors_origin), score_retention=self.score_retention,
        )


@click.command()
@click.option("--upstream", default=None, metavar="URL",
              help="OpenAI-compatible server to front, e.g. http://127.0.0.1:8080/v1 "
                   "(default: serve --model in this process). USER:PASSWORD@ in it is sent as "
                   "HTTP Basic auth instead of the key.")
@click.option("--upstream-api-key-env", default="OPENAI_API_KEY", show_default=True, metavar="NAME",
              help="Environment variable with the upstream's key (held by the gateway only).")
@click.option("--model", default="llamacpp/default", show_default=True,
              help="In-process model served when there is no --upstream.")
@click.option("--model-option", "model_option", multiple=True, metavar="KEY=VALUE",
              help="An option of the in-process model's provider, repeatable; e.g. "
                   "decode=draft or extra_buffers=off (llamacpp/...).")
@click.option("--embedder", default="st/default", show_default=True)
@click.option("--embedder-option", "embedder_option", multiple=True, metavar="KEY=VALUE",
              help="An option of the embedder's provider, repeatable; e.g. backend=onnx "
                   "(st/...: auto, torch, onnx, onnx-int8, torch-bf16).")
@click.option("--n", "n", type=click.IntRange(1), default=3, show_default=True,
              help="Perturbed calls per answer.")
@click.option("--ball", default="ascii-control", show_default=True, callback=ball_choice())
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--form", type=click.Choice(FORMS), default="sin", show_default=True)
@click.option("--temperature", type=click.FloatRange(0.0), default=0.0, show_default=True,
              help="Temperature of the perturbed calls.")
@click.option("--max-tokens", type=click.IntRange(1), default=256, show_default=True,
              help="Token budget of perturbed calls when a request sets none.")
@click.option("--thresholds", default=None, metavar="LOW,HIGH",
              help="Verdict thresholds (default: the authors' 0.1 / 0.2 buckets in --form).")
@click.option("--calibration", "calibration", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Calibration file (veracity calibrate): verdict thresholds and "
                                 "P(correct) for this model, embedder, form, ball and N.")
@click.option("--force", is_flag=True,
              help="Use a --calibration made for another model, embedder, form, ball or N "
                   "(recorded in every score).")
@click.option("--mode", type=click.Choice(["inline", "async"]), default="inline", show_default=True,
              help="inline: the score is in the response; async: fetch it from /v1/veracity/scores/ID.")
@click.option("--max-concurrency", type=click.IntRange(1), default=32, show_default=True,
              help="Requests handled at once.")
@click.option("--queue", type=click.IntRange(0), default=64, show_default=True,
              help="Requests (and async scores) allowed to wait; beyond that: 429.")
@click.option("--timeout", type=click.FloatRange(0.0, min_open=True), default=60.0, show_default=True,
              help="Seconds per upstream call before a 504.")
@click.option("--log", "log_file", type=click.Path(path_type=Path, dir_okay=False),
              default=Path("veracity-traffic.sqlite"), show_default=True, help="SQLite traffic log.")
@click.option("--no-log", is_flag=True, help="Keep no traffic log.")
@click.option("--cache", "cache_path", type=click.Path(path_type=Path), default=None,
              help="SQLite cache file (default: $VERACITY_HOME/cache.sqlite).")
@click.option("--no-cache", is_flag=True, help="Do not read or write the cache.")
@click.option("--api-keys-env", default="VERACITY_API_KEYS", show_default=True, metavar="NAME",
              help="Environment variable with the comma-separated keys clients must send.")
@click.option("--no-auth", is_flag=True, help="No client keys (loopback --host only).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--shutdown-grace", type=click.FloatRange(0.0), default=30.0, show_default=True,
              help="Seconds in-flight requests and pending scores get on SIGTERM.")
@click.option("--otel", is_flag=True,
              help="Export OpenTelemetry traces (the otel extra), configured by the SDK's "
                   "variables: OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318), "
                   "OTEL_TRACES_EXPORTER, OTEL_SERVICE_NAME... Setting those turns traces on too.")
@click.option("--trace-content", is_flag=True,
              help="Put prompt and answer text in the spans (never by default).")
@click.option("--max-body", type=click.IntRange(1024), default=1 << 20, show_default=True,
              metavar="BYTES", help="Largest request body; beyond: 413, before the rest is read.")
@click.option("--client-timeout", type=click.FloatRange(0.0, min_open=True), default=30.0,
              show_default=True, help="Seconds a client gets to send a request's headers, and again "
                                      "its body; then 408 and the connection is closed.")
@click.option("--max-connections", type=click.IntRange(1), default=1024, show_default=True,
              help="Client connections open at once; more are answered 503 and closed.")
@click.option("--cors-origin", "cors_origin", multiple=True, metavar="ORIGIN",
              help="A web origin (https://app.example.com) whose pages may call the gateway; "
                   "repeatable. None by default: no CORS headers.")
@click.option("--score-retention", type=click.FloatRange(0.0, min_open=True), default=7 * 86400.0,
              show_default=True, metavar="SECONDS",
              help="How long async-mode scores stay fetchable (kept in the traffic log).")
@handles_errors
@options_as(ServeOptions)
def serve(o: ServeOptions) -> None:
    """Serve an OpenAI-compatible API that scores every answer with gamma."""
    try:
        from veracity.serve.app import create_app, threshold_source
        from veracity.serve.server import run
        from veracity.serve.upstream import split_credentials
    except ImportError as exc:
        raise ConfigError(
            f"veracity serve needs the serve extra: pip install 'veracity[serve]' ({exc})") from None
    settings = o.settings()
    embedder, thresholds = None, None
    if settings.calibration is not None:  # refused here, before anything listens
        from veracity.registry import load_embedder
        from veracity.serve.verdicts import CalibratedThresholds

        thresholds = threshold_source(settings)
        embedder = load_embedder(settings.embedder, **settings.embedder_options)
        assert isinstance(thresholds, CalibratedThresholds)
        thresholds.check(embedder.spec, settings.form, None if settings.upstream else settings.model)
    tracing = gateway_tracing(o.otel, o.trace_content)
    app = create_app(settings, embedder=embedder, thresholds=thresholds, freeze_gc=True,
                     tracing=tracing)
    if tracing is not None:
        click.echo(f"veracity gateway: OpenTelemetry traces on"
                   f"{', with prompt and answer text' if tracing.content else ''}", err=True)
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        raise ConfigError(f"cannot listen on {settings.host}:{settings.port}: {exc}") from None
    port = sock.getsockname()[1]
    source = redact_url(settings.upstream) if settings.upstream else settings.model
    key_env = settings.upstream_api_key_env
    if settings.upstream and split_credentials(settings.upstream)[1] and key_env and os.environ.get(key_env):
        click.echo(f"veracity gateway: the upstream's URL carries credentials, sent as its auth; "
                   f"${settings.upstream_api_key_env} is not sent", err=True)
    click.echo(f"veracity gateway on http://{settings.host}:{port}/v1 in front of {source} "
               f"(mode {settings.mode}, n {settings.n}, embedder {settings.embedder}; "
               f"log {settings.log or 'off'}"
               f"{'; calibration ' + str(settings.calibration) if settings.calibration else ''}"
               f"{' (forced)' if settings.force else ''})", err=True)
    run(app, settings, sock)
