"""The HTTP server around the gateway app: uvicorn, with limits on what a client may hold.

uvicorn closes idle keep-alive connections, but a connection that sends its headers byte by
byte (or nothing at all) stays open for as long as the client likes. The protocol here gives
every request ``--client-timeout`` seconds to complete its headers, answers 408 and closes
past it, and refuses connections beyond ``--max-connections`` with a 503. (The body's own
deadline and size limit are the app's: :mod:`veracity.serve.intake`.)
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

from veracity.errors import ConfigError
from veracity.serve.settings import GatewaySettings

Counter = Callable[[str], None]
"""Called with the kind of a refused client: ``header_timeout``, ``connection_cap``."""


def _raw_error(status: int, reason: str, message: str, code: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": code}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


def guarded_protocol(settings: GatewaySettings, refused: Counter) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a header deadline and a connection cap."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError as exc:  # uvicorn[standard] brings httptools
        raise ConfigError(f"veracity serve needs httptools: pip install 'veracity[serve]' ({exc})") from None
    timeout, cap = settings.client_timeout, settings.max_connections
    late = _raw_error(408, "Request Timeout", f"the request headers did not arrive within {timeout:g} s "
                      "(--client-timeout)", "request_timeout")
    full = _raw_error(503, "Service Unavailable", "the gateway has too many open connections: retry later",
                      "too_many_connections")

    class Guarded(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > cap:
                refused("connection_cap")
                transport.write(full)
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:  # a connection's first request runs from its opening
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(timeout, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                refused("header_timeout")
                self.transport.write(late)
                self.transport.close()

    return Guarded


def server_config(app: Any, settings: GatewaySettings, log_level: str = "info") -> uvicorn.Config:
    """uvicorn's configuration for the gateway ``app`` (from :func:`~veracity.serve.app.create_app`)."""
    metrics = app.state.gateway.metrics
    return uvicorn.Config(app, http=guarded_protocol(settings, metrics.count_client_error),
                          log_level=log_level, access_log=False, lifespan="on",
                          timeout_graceful_shutdown=int(settings.shutdown_grace) or None)


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def run(app: Any, settings: GatewaySettings, sock: socket.socket) -> None:
    """Serve until SIGTERM or Ctrl-C; SIGTERM drains and then ends the process with status 0.

    uvicorn handles the signal (drains in-flight requests, runs the app's shutdown), then
    raises it again under the handler that was there before: ours, which exits with 0, where
    the default one would end the process with -15 (taken for a crash by supervisors).
    """
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        uvicorn.Server(server_config(app, settings)).run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
