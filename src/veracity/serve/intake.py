"""What a chat request must be before the gateway reads it: JSON by its content type, and a body
bounded in size and in time.

A browser sends a ``text/plain``, form-encoded or type-less POST to any site without asking it
first (no CORS preflight), so only ``application/json`` is read: a web page cannot make the
gateway spend the upstream's key. The body is read as it arrives and refused at the first byte
past the limit (or at once when its declared length is too large), never held whole first.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from starlette.requests import Request

from veracity.data.jsonl import load_json
from veracity.errors import DataError

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""How a lone surrogate gets into JSON: UTF-8 text cannot hold one, an escape can."""


class Refused(Exception):
    """A request refused before its body was read: answered ``status``, counted under ``kind``."""

    def __init__(self, status: int, message: str, code: str, kind: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.kind = kind


def media_problem(content_type: str | None) -> str | None:
    """Why a ``Content-Type`` is not JSON the gateway reads (None: it is)."""
    if not content_type or not content_type.strip():
        return ("send the request body as JSON with 'Content-Type: application/json' "
                "(a request without a content type is refused)")
    media, *params = content_type.split(";")
    if media.strip().lower() != "application/json":
        return ("send the request body as JSON with 'Content-Type: application/json', "
                f"not '{media.strip()[:80]}'")
    for param in params:
        name, _, value = param.partition("=")
        name, value = name.strip().lower(), value.strip().strip('"').lower()
        if not name:
            continue
        if name != "charset" or value not in ("utf-8", "utf8"):
            return f"the JSON body must be UTF-8: 'Content-Type: application/json' takes only " \
                   f"'charset=utf-8', not '{param.strip()[:80]}'"
    return None


def too_large(limit: int) -> Refused:
    return Refused(413, f"the request body is larger than the gateway accepts ({limit} bytes, --max-body)",
                   "request_too_large", "too_large")


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The whole body, at most ``limit`` bytes, sent within ``timeout`` seconds; a Refused
    otherwise (starlette's ClientDisconnect when the client hangs up first)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        declared = declared.strip()
        if not (declared.isascii() and declared.isdigit()):
            raise Refused(400, "invalid Content-Length header", "invalid_request", "bad_length")
        if int(declared) > limit:
            raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):  # the gateway runs on asyncio; anyio's scope costs more
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:  # a chunked body declares no length
                    raise too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise Refused(408, f"the request body did not arrive within {timeout:g} s (--client-timeout)",
                      "request_timeout", "body_timeout") from None
    return b"".join(chunks)


def parse_body(text: str) -> Any:
    """The request body as strict JSON (no NaN, no 1e999, bounded nesting, no lone surrogate:
    not text), a DataError naming the field otherwise. The search for a lone surrogate walks
    every string, so it runs only when the text holds an escape that can make one."""
    try:
        return load_json(text, "the request body", surrogates=_SURROGATE_ESCAPE.search(text) is None)
    except DataError as exc:  # the reader's advice is for files
        raise DataError(str(exc).removesuffix("; fix the file")) from None
