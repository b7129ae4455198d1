"""Gateway settings: one frozen object, validated once, that ``create_app`` is built from."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from veracity.errors import ConfigError
from veracity.methods.gamma.calibration.trust import check_thresholds
from veracity.methods.gamma.core import FORMS, Form
from veracity.perturb import resolve_ball
from veracity.text import redact_url

_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")

Mode = Literal["inline", "async"]
MODES: tuple[Mode, ...] = ("inline", "async")


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_origin(origin: str, open_access: bool) -> None:
    """A CORS origin is ``scheme://host[:port]``, or ``*`` on a gateway that asks for keys."""
    if origin == "*":
        if open_access:
            raise ConfigError("--cors-origin '*' is refused with --no-auth: any web page could "
                              "spend the upstream's key; name the origins")
        return
    if not _ORIGIN.fullmatch(origin):
        raise ConfigError(f"--cors-origin must be an origin such as https://app.example.com "
                          f"(scheme, host, optional port; no path), got '{origin}'")


def keys_from_env(name: str) -> tuple[str, ...]:
    """Comma-separated gateway keys from an environment variable (empty if unset)."""
    return tuple(k.strip() for k in os.environ.get(name, "").split(",") if k.strip())


@dataclass(frozen=True)
class GatewaySettings:
    """Everything ``veracity serve`` is configured with; keys are held here, never printed."""

    upstream: str | None = field(default=None, repr=False)
    """Base URL of an OpenAI-compatible server (``http://host:port/v1``); None: ``model`` in process.
    A user name and password in it are sent as HTTP Basic auth, in place of the key."""
    upstream_api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the upstream's key (read once, kept in memory)."""
    model: str = "llamacpp/default"
    """The in-process model served when there is no upstream."""
    model_options: dict[str, Any] = field(default_factory=dict)
    """Options of the in-process model's provider (``--model-option``), e.g. {"decode": "draft"}."""
    embedder: str = "st/default"
    embedder_options: dict[str, Any] = field(default_factory=dict)
    """Options of the embedder's provider (``--embedder-option``), e.g. {"backend": "onnx"}."""
    n: int = 3
    """Perturbed calls per answer."""
    ball: str = "ascii-control"
    seed: int = 0
    form: Form = "sin"
    temperature: float = 0.0
    """Temperature of the perturbed calls (the paper's 0)."""
    max_tokens: int = 256
    """Token budget of perturbed calls when the request sets none (else the request's)."""
    thresholds: tuple[float, float] | None = None
    """(low, high) verdict thresholds; None: the authors' buckets in ``form``."""
    calibration: Path | None = None
    """Calibration file (``veracity calibrate``): verdict thresholds and P(correct) from it."""
    force: bool = False
    """Use a calibration made for another model, embedder, form, ball or N (recorded)."""
    mode: Mode = "inline"
    max_concurrency: int = 32
    """Requests handled at once; more wait in the queue."""
    queue: int = 64
    """Requests allowed to wait (and, in async mode, scores allowed to wait); beyond: 429."""
    timeout: float = 60.0
    """Seconds for one upstream call (answer or perturbed) before a 504."""
    log: Path | None = field(default_factory=lambda: Path("veracity-traffic.sqlite"))
    """SQLite traffic log; None keeps nothing."""
    cache: Path | None = None
    """Generation / embedding cache file (None: the default cache)."""
    no_cache: bool = False
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    """Gateway keys clients must present (``Authorization: Bearer KEY``)."""
    no_auth: bool = False
    """Serve without keys; only allowed on a loopback host."""
    host: str = "127.0.0.1"
    port: int = 8000
    shutdown_grace: float = 30.0
    """Seconds in-flight requests and pending scores get to finish on shutdown."""
    retry_after: int = 1
    """Seconds a client is told to wait in a 429."""
    max_body: int = 1 << 20
    """Largest request body accepted, in bytes; beyond: 413, before the rest is read."""
    client_timeout: float = 30.0
    """Seconds a client gets to send a request's headers, and again its body; then 408 / closed."""
    max_connections: int = 1024
    """Client connections open at once; one more is answered 503 and closed."""
    cors_origins: tuple[str, ...] = ()
    """Web origins allowed to call the gateway from a browser (CORS); none by default."""
    score_retention: float = 7 * 86400.0
    """Seconds an async-mode score stays fetchable (kept in the traffic log across restarts)."""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError(f"--n must be at least 1, got {self.n}")
        resolve_ball(self.ball)
        if self.form not in FORMS:
            raise ConfigError(f"unknown gamma form '{self.form}'; known: {', '.join(FORMS)}")
        if self.mode not in MODES:
            raise ConfigError(f"--mode must be inline or async, got '{self.mode}'")
        if self.thresholds is not None:
            check_thresholds(self.thresholds)
            if self.calibration is not None:
                raise ConfigError("give --thresholds or --calibration, not both: a calibration sets "
                                  "the verdict thresholds")
        if self.force and self.calibration is None:
            raise ConfigError("--force only applies to --calibration FILE")
        for name in ("max_concurrency", "queue", "max_tokens"):
            if getattr(self, name) < (0 if name == "queue" else 1):
                raise ConfigError(f"--{name.replace('_', '-')} is too small: {getattr(self, name)}")
        if self.timeout <= 0 or self.shutdown_grace < 0 or self.temperature < 0:
            raise ConfigError("timeout must be positive, shutdown grace and temperature not negative")
        if self.upstream is not None and not self.upstream.startswith(("http://", "https://")):
            raise ConfigError(f"--upstream must start with http:// or https://, got "
                              f"'{redact_url(self.upstream)}'")
        if self.max_body < 1024 or self.max_connections < 1:
            raise ConfigError(f"--max-body must be at least 1024 bytes and --max-connections at least 1, "
                              f"got {self.max_body} and {self.max_connections}")
        if self.client_timeout <= 0 or self.score_retention <= 0:
            raise ConfigError("--client-timeout and --score-retention must be positive")
        for origin in self.cors_origins:
            check_origin(origin, self.no_auth)
        if self.no_auth and not is_loopback(self.host):
            raise ConfigError(f"--no-auth is only allowed on a loopback address, not '{self.host}'")
        if not self.no_auth and not self.api_keys:
            raise ConfigError(
                "no gateway keys: set a comma-separated list in $VERACITY_API_KEYS (or the variable "
                "named by --api-keys-env), or pass --no-auth on a loopback address"
            )
