"""Where answers come from: an OpenAI-compatible server, over one pooled aiohttp session.

The upstream's key lives only in this object: it is sent in the ``Authorization`` header
and masked in any message the server echoes back. A user name and password in the URL are
taken out of it and sent as HTTP Basic auth instead of the key (the URL names this upstream
alone; the key's variable may be set for others). Errors say "the upstream", never its URL.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import aiohttp
import httpx

from veracity.backends.base import Outcome
from veracity.backends.openai_wire import (
    RETRY_STATUSES,
    RequestShape,
    backend_identity,
    request_body,
    resolve_base_url,
)
from veracity.backends.reply import read_reply
from veracity.errors import BackendError, ConfigError, PermanentError, RetryableError
from veracity.serve.wire import ChatCompletion, ChatRequest, ModelList
from veracity.text import redact_url, replace_surrogates
from veracity.types import GenRequest

_LIMIT = 300  # characters of an upstream message kept in an error
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)
"""What a call can raise when the upstream is unreachable, slow or hangs up."""
RETRY_PAUSE = 0.2
"""Seconds before a perturbed call that hit a server fault is tried again (once)."""


class UpstreamError(Exception):
    """The upstream failed; ``status`` is what the gateway answers, ``kind`` labels the metric."""

    def __init__(self, status: int, message: str, kind: str, error_type: str = "upstream_error",
                 code: str | None = None, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.error_type = error_type
        self.code = code
        self.retry_after = retry_after
        """The upstream's ``Retry-After`` (a 429 or 503), passed on to the client."""


@dataclass
class Stream:
    """An upstream response whose status is known and whose body is still arriving."""

    chunks: AsyncIterator[bytes]
    response: aiohttp.ClientResponse | None = None

    async def aclose(self) -> None:
        if self.response is not None:
            self.response.release()  # back to the pool when read to its end, else closed


@dataclass(frozen=True)
class Answered:
    """A whole reply to a POST, read: what the error and reply readers need of it."""

    status_code: int
    content: bytes
    reason_phrase: str
    retry_after: str | None = None

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return parsed(self.content)


class Upstream(Protocol):
    """What the gateway needs from whatever produces answers."""

    name: str
    overlaps_answer: bool
    """True when the perturbed calls may go out while the answer is being generated (a
    server taking concurrent requests); False when they must wait for it (one local model)."""

    async def start(self) -> None: ...

    async def chat(self, body: ChatRequest) -> ChatCompletion: ...

    async def stream(self, body: ChatRequest) -> Stream: ...

    async def models(self) -> ModelList: ...

    def scoring_key(self, model: str) -> tuple[str, dict[str, Any]]:
        """(spec, identity) of the backend ``model``'s perturbed prompts go to: the cache key
        the project's client uses for the same model, and what a calibration is made for."""
        ...

    async def perturbed(self, model: str, requests: Sequence[GenRequest]) -> list[Outcome]:
        """Outcomes of the perturbed prompts, all sent at once (not cached here)."""
        ...

    async def aclose(self) -> None: ...


_RETRY_AFTER = re.compile(r"[0-9]{1,9}|[A-Za-z]{3}, [0-9]{2} [A-Za-z]{3} [0-9]{4} [0-9:]{8} GMT")


def retry_after(value: str | None) -> str | None:
    """An upstream's Retry-After when it is well formed (seconds or an HTTP date), else None."""
    value = (value or "").strip()
    return value if _RETRY_AFTER.fullmatch(value) else None


def split_credentials(url: str) -> tuple[str, str | None]:
    """(``url`` without user info, the ``Authorization`` header its user info asks for)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise ConfigError(f"--upstream is not a valid URL ({redact_url(url)}): {exc}") from None
    if not parsed.userinfo:
        return url, None
    pair = f"{parsed.username}:{parsed.password}".encode()
    return str(parsed.copy_with(username=None, password=None)), f"Basic {base64.b64encode(pair).decode()}"


def repaired(value: Any) -> Any:
    """A parsed reply with lone UTF-16 surrogates (which JSON's escapes can carry, and which no
    UTF-8 response, file or database accepts) replaced by U+FFFD, as the project's client does."""
    if isinstance(value, str):
        return replace_surrogates(value)
    if isinstance(value, dict):
        return {repaired(k): repaired(v) for k, v in value.items()}
    if isinstance(value, list):
        return [repaired(v) for v in value]
    return value


def parsed(content: bytes) -> Any:
    """JSON ``content`` (a ValueError if it is not), repaired when it holds ``\\u`` escapes."""
    data = json.loads(content)
    return repaired(data) if b"\\u" in content else data


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _LIMIT else text[: _LIMIT - 3] + "..."


class HttpUpstream:
    """An OpenAI-compatible server: vLLM, llama.cpp server, Ollama, OpenAI."""

    overlaps_answer = True

    def __init__(self, base_url: str, api_key_env: str, timeout: float, max_connections: int) -> None:
        plain, basic = split_credentials(base_url)
        self.base_url = plain.rstrip("/")
        self.name = self.base_url
        self.api_key_env = api_key_env
        self.timeout = timeout
        self._key = os.environ.get(api_key_env) or None if api_key_env else None
        self._auth = basic or (f"Bearer {self._key}" if self._key else None)
        self._secrets = [s for s in (self._key, basic and basic.split(" ", 1)[1],
                                     httpx.URL(base_url).password) if s]
        parsed = httpx.URL(self.base_url)
        self._netloc, self._host = parsed.netloc.decode("ascii"), parsed.host or self.base_url
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"HttpUpstream(base_url={self.base_url!r}, api_key_env={self.api_key_env!r})"

    async def start(self) -> None:
        # aiohttp alone, for every call: httpx's own pool walks every connection on each
        # request, and its request and response objects, URL parsing, auth and redirect
        # handling cost over a third of the gateway's CPU under load (an API call needs none)
        headers = {"Authorization": self._auth} if self._auth else {}
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=5,
                                           ssl=httpx.create_ssl_context()),  # httpx's trust store
            headers={**headers, "Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(sock_connect=self.timeout, sock_read=self.timeout,
                                          connect=self.timeout))

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("upstream not started")
        return self._session

    async def _post(self, url: str, body: Mapping[str, object]) -> Answered:
        """POST a JSON body and read the whole reply."""
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        async with self.session.post(url, data=content.encode(), allow_redirects=False) as response:
            return await _answered(response)

    async def chat(self, body: ChatRequest) -> ChatCompletion:
        url = f"{self.base_url}/chat/completions"
        try:
            response = await self._post(url, body)
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(url, exc) from None
        if response.status_code >= 400:
            raise self._status_error(url, response)
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise UpstreamError(502, "the upstream did not answer with a JSON object: "
                                f"{_short(self.redact(response.text))!r}", "bad_reply")
        if data.get("error") and not data.get("choices"):  # an error sent with status 200
            failure = self._status_error(url, response)
            raise UpstreamError(502, failure.message.replace("HTTP 200", "HTTP 200 with an error"),
                                "error_reply", failure.error_type, failure.code)
        return cast(ChatCompletion, data)  # its fields are checked where they are read

    async def stream(self, body: ChatRequest) -> Stream:
        url = f"{self.base_url}/chat/completions"
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        try:
            response = await self.session.post(url, data=content.encode(), allow_redirects=False)
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(url, exc) from None
        if response.status >= 400:
            try:
                answered = await _answered(response)
            except TRANSPORT_ERRORS as exc:
                raise self._transport_error(url, exc) from None
            finally:
                response.release()
            raise self._status_error(url, answered)
        return Stream(self._chunks(url, response), response)

    async def _chunks(self, url: str, response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.content.iter_any():
                yield chunk
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(url, exc) from None
        finally:
            response.release()

    async def models(self) -> ModelList:
        url = f"{self.base_url}/models"
        try:
            async with self.session.get(url, allow_redirects=False) as got:
                response = await _answered(got)
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(url, exc) from None
        if response.status_code >= 400:
            raise self._status_error(url, response)
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise UpstreamError(502, "the upstream did not answer with a JSON object", "bad_reply")
        return cast(ModelList, data)

    def scoring_key(self, model: str) -> tuple[str, dict[str, Any]]:
        """The project's ``openai/{model}`` at this base URL: the same identity, so the same
        cache entries, as ``veracity gamma --model openai/{model} --base-url ...``."""
        return f"openai/{model}", backend_identity(resolve_base_url(self.base_url), RequestShape(model))

    async def perturbed(self, model: str, requests: Sequence[GenRequest]) -> list[Outcome]:
        shape = RequestShape(model)
        return list(await asyncio.gather(*(self._generate(shape, r) for r in requests)))

    async def _generate(self, shape: RequestShape, request: GenRequest) -> Outcome:
        """One perturbed answer; a server fault or timeout is tried once more."""
        path, body = request_body(shape, request)
        url = self.base_url + path
        for attempt in range(2):
            try:
                response = await self._post(url, body)
            except TRANSPORT_ERRORS as exc:
                failure = self._transport_error(url, exc)
            else:
                if response.status_code < 400:
                    return self._reply(url, response)
                failure = self._status_error(url, response)
                if response.status_code not in RETRY_STATUSES:
                    return PermanentError(failure.message)
            if attempt == 0:
                await asyncio.sleep(RETRY_PAUSE)
        return RetryableError(failure.message)

    def _reply(self, url: str, response: Answered) -> Outcome:
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict) or (data.get("error") and not data.get("choices")):
            shown = _short(self.redact(response.text))
            return PermanentError(f"the upstream did not answer with a chat completion: {shown!r}")

        def malformed(data: dict[str, Any], what: str) -> RetryableError:
            shown = _short(self.redact(json.dumps(data, ensure_ascii=True)))
            return RetryableError(f"malformed reply from the upstream ({what}): {shown}")

        try:
            return read_reply(data, True, malformed)
        except BackendError as exc:
            return exc

    def _transport_error(self, url: str, cause: Exception) -> UpstreamError:
        if isinstance(cause, asyncio.TimeoutError):
            return UpstreamError(504, f"the upstream gave no answer within {self.timeout:g} s",
                                 "timeout", "timeout", "upstream_timeout")
        detail = self.redact(str(cause)) or "connection closed without an answer"
        for where in (url, self.base_url, self._netloc, self._host):
            detail = detail.replace(where, "the upstream")
        return UpstreamError(502, f"the upstream failed: {type(cause).__name__}: {_short(detail)}",
                             "connection", code="upstream_unreachable")

    def _status_error(self, url: str, response: Answered) -> UpstreamError:
        error_type, code, message = "upstream_error", None, response.text
        try:
            data = json.loads(response.content)
        except ValueError:
            data = None
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            message = str(error.get("message") or message)
            error_type = str(error.get("type") or error_type)
            code = None if error.get("code") is None else str(error["code"])
        elif isinstance(error, str):
            message = error
        status = response.status_code
        shown = _short(self.redact(message)) or response.reason_phrase
        text = f"the upstream answered HTTP {status}: {shown}"
        wait = response.retry_after if status in (429, 503) else None
        return UpstreamError(status, text, f"http_{status}", error_type, code, retry_after(wait))

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


async def _answered(response: aiohttp.ClientResponse) -> Answered:
    """A reply read to its end."""
    return Answered(response.status, await response.read(), response.reason or "",
                    response.headers.get("Retry-After"))
