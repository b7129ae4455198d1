"""OpenAI-compatible HTTP backend (``openai/MODEL``): OpenAI, vLLM, llama.cpp server, Ollama.

Requests run concurrently on a bounded pool of daemon threads sharing one ``httpx.Client``;
each one is retried on rate limits, server errors, timeouts, connection failures and malformed
replies (a truncated or non-JSON body, no choice, an error object sent with status 200), and
fails at once on a bad request. The API key is read from an environment variable and kept only
in memory: it never appears in ``identity()``, ``repr`` or error messages.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import httpx

from veracity.backends.base import Capabilities, CutShort, Finished, Outcome
from veracity.backends.openai_wire import (  # noqa: F401  (also imported from here)
    DEFAULT_BASE_URL,
    PREFILL_MODES,
    RETRY_STATUSES,
    RequestShape,
    backend_identity,
    render_prompt,
    request_body,
    resolve_base_url,
)
from veracity.backends.pool import DaemonPool
from veracity.backends.reply import read_reply
from veracity.backends.templates import (  # noqa: F401  (the helpers' old home)
    ChatTemplate,
    compile_chat_template,
    load_chat_template,
    resolve_template,
)
from veracity.errors import (
    AccessError,
    BackendError,
    CapabilityError,
    ConfigError,
    PermanentError,
    RetryableError,
)
from veracity.jsontypes import JsonObject
from veracity.retry import call_with_retry, parse_retry_after
from veracity.types import GenRequest, Message

_LIMIT = 300  # characters of a server message kept in an error
T = TypeVar("T")


def _truncate(text: str, limit: int = _LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _server_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text
    return _server_message_of(data) or response.text


def _server_message_of(data: Any) -> str:
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str) and error:
            return error
        for field in ("message", "detail"):
            if data.get(field):
                return str(data[field])
    return ""


def _notify(done: queue.SimpleQueue[int], index: int, _: Future[Any]) -> None:
    done.put(index)


class HttpEndpoint:
    """One OpenAI-compatible server: a shared client, the key, retries and error mapping."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 5,
        max_connections: int = 16,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {timeout}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
        self.base_url = resolve_base_url(base_url)
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self._key = (os.environ.get(api_key_env) or None) if api_key_env else None
        self._sleep = sleep
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = httpx.Client(timeout=httpx.Timeout(timeout), limits=limits, transport=transport)

    def __repr__(self) -> str:
        return f"HttpEndpoint(base_url={self.base_url!r}, api_key_env={self.api_key_env!r})"

    def redact(self, text: str) -> str:
        """``text`` with the API key masked, should a server echo it back."""
        return text.replace(self._key, "[redacted]") if self._key else text

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST JSON with retries; the decoded JSON object, or a BackendError raised."""
        return self.post_read(path, body, lambda data: data)

    def post_read(self, path: str, body: dict[str, Any], read: Callable[[dict[str, Any]], T]) -> T:
        """POST JSON with retries and return ``read(reply)``; ``read`` raises RetryableError
        for a malformed reply, so it is retried like a server error."""
        url = self.base_url + path
        payload = json.dumps(body, ensure_ascii=True).encode("ascii")

        def attempt() -> T:
            data = self._attempt(url, payload)
            if data.get("error") and not data.get("choices") and not data.get("data"):
                message = _truncate(self.redact(_server_message_of(data) or json.dumps(data)))
                raise RetryableError(f"server at {url} sent an error with status 200: {message}")
            return read(data)

        return call_with_retry(
            attempt, max_retries=self.max_retries, what=f"server at {url} failed", sleep=self._sleep
        )

    def _attempt(self, url: str, payload: bytes) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        try:
            response = self._client.post(url, content=payload, headers=headers)
        except httpx.TimeoutException as exc:
            raise RetryableError(f"no answer within {self.timeout:g} s ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise RetryableError(f"{type(exc).__name__}: {self.redact(str(exc)) or 'no details'}") from None
        if response.status_code >= 400:
            raise self._error(url, response)
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            text = _truncate(self.redact(response.text))
            raise RetryableError(f"server at {url} did not answer with a JSON object: {text!r}")
        return data

    def malformed(self, data: dict[str, Any], what: str) -> RetryableError:
        """The error of a reply that is JSON but not what the protocol says."""
        shown = _truncate(self.redact(json.dumps(data, ensure_ascii=True)))
        return RetryableError(f"malformed reply from {self.base_url} ({what}): {shown}")

    def _error(self, url: str, response: httpx.Response) -> BackendError:
        status = response.status_code
        message = _truncate(self.redact(_server_message(response))) or response.reason_phrase
        text = f"HTTP {status} from {url}: {message}"
        if status in RETRY_STATUSES:
            header = response.headers.get("retry-after-ms")
            wait = float(header) / 1000 if header and header.replace(".", "", 1).isdigit() else None
            if wait is None:
                wait = parse_retry_after(response.headers.get("retry-after"))
            return RetryableError(text, retry_after=wait)
        if status in (401, 403):
            env = self.api_key_env
            hint = (f"the key in ${env} was rejected" if self._key
                    else f"no API key found: set ${env} (or pass api_key_env=...)")
            return AccessError(f"{text} ({hint})")
        if status == 404:
            return AccessError(f"{text} (check the model name and the base URL)")
        return PermanentError(text)

    def close(self) -> None:
        self._client.close()


class OpenAIBackend:
    """An OpenAI-compatible server reached over HTTP.

    ``prefill_mode`` says how an assistant prefill is continued: ``"none"`` (not supported),
    ``"continue"`` (a final assistant message with ``continue_final_message``, as vLLM and
    llama.cpp's server accept) or ``"completions"`` (the prompt rendered here from
    ``chat_template`` and sent to ``/completions``).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 16,
        timeout: float = 60.0,
        max_retries: int = 5,
        prefill_mode: str = "none",
        chat_template: str | None = None,
        extra_body: dict[str, Any] | None = None,
        bos_token: str = "",
        eos_token: str = "",
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not model:
            raise ConfigError("the openai backend needs a model name: openai/MODEL")
        if prefill_mode not in PREFILL_MODES:
            raise ConfigError(f"prefill_mode must be one of {', '.join(PREFILL_MODES)}, got '{prefill_mode}'")
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.model = model
        self.spec = f"openai/{model}"
        self.prefill_mode = prefill_mode
        self.extra_body = dict(extra_body or {})
        self.capabilities = Capabilities(
            prefill=prefill_mode != "none", seed=True, max_concurrency=max_concurrency,
            logprobs=True,  # asked per request; a server that sends none fails that request
        )
        template: ChatTemplate | None = None
        if prefill_mode == "completions":
            if not chat_template:
                raise ConfigError(
                    "prefill_mode='completions' needs chat_template= (a template file, a "
                    "tokenizer_config.json, or the template text) matching the served model"
                )
            template = resolve_template(chat_template)
        self.shape = RequestShape(model, prefill_mode, self.extra_body, template, bos_token, eos_token)
        self._http = HttpEndpoint(
            base_url, api_key_env, timeout, max_retries, max_concurrency, transport, sleep
        )
        self.base_url = self._http.base_url
        self._pool = DaemonPool(max_concurrency, "veracity-http")

    def __repr__(self) -> str:
        return (
            f"OpenAIBackend(spec={self.spec!r}, base_url={self.base_url!r}, "
            f"prefill_mode={self.prefill_mode!r})"
        )

    def identity(self) -> JsonObject:
        return backend_identity(self.base_url, self.shape)

    def render(self, messages: Sequence[Message], prefill: str = "") -> str:
        """The completions-mode prompt: chat template with the generation prompt, then the prefill."""
        return render_prompt(self.shape, messages, prefill)

    def payload(self, request: GenRequest) -> tuple[str, dict[str, Any]]:
        """The endpoint path and JSON body sent for one request."""
        return request_body(self.shape, request)

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(requests)
        for finished in self.stream(requests, threading.Event()):
            for index, outcome in finished:
                out[index] = outcome
        return [o if o is not None else BackendError("no outcome") for o in out]

    def stream(self, requests: Sequence[GenRequest], stop: threading.Event) -> Iterator[Finished]:
        """Outcomes in the order they finish, grouped by what finished together; see
        :class:`~veracity.backends.base.StreamingBackend`."""
        if self.prefill_mode == "none" and any(r.prefill for r in requests):
            raise CapabilityError(
                f"backend '{self.spec}' cannot continue an assistant prefill with prefill_mode='none'; "
                "use prefill_mode='continue' (vLLM, llama.cpp server) or 'completions' with a chat_template"
            )
        done: queue.SimpleQueue[int] = queue.SimpleQueue()
        futures: list[Future[Outcome]] = []
        for index, request in enumerate(requests):
            future = self._pool.submit(functools.partial(self._one, request))
            future.add_done_callback(functools.partial(_notify, done, index))
            futures.append(future)
        given, live, stopped = 0, len(futures), False
        handed: set[int] = set()
        try:
            while given < live:
                if stop.is_set() and not stopped:  # drop what has not started; in-flight ones come
                    stopped = True
                    for future in futures:
                        future.cancel()
                    live = sum(not f.cancelled() for f in futures)
                    continue
                try:
                    ready = [done.get(timeout=0.1)]  # a timeout, so Ctrl-C is seen at once
                except queue.Empty:
                    continue
                while not done.empty():
                    ready.append(done.get())
                ready = [i for i in ready if not futures[i].cancelled()]
                given += len(ready)
                handed.update(ready)
                if ready:
                    yield [(i, futures[i].result()) for i in ready]
        except KeyboardInterrupt:  # answers that arrived but were not handed over yet
            raise CutShort([(i, f.result()) for i, f in enumerate(futures) if i not in handed
                            and f.done() and not f.cancelled() and f.exception() is None]) from None
        finally:
            for future in futures:
                future.cancel()

    def _one(self, request: GenRequest) -> Outcome:
        from jinja2 import TemplateError

        try:
            path, body = self.payload(request)
        except TemplateError as exc:
            return PermanentError(f"{self.spec}: chat template failed: {exc}")
        chat = path == "/chat/completions"
        try:
            return self._http.post_read(
                path, body, lambda data: read_reply(data, chat, self._http.malformed,
                                                    request.logprobs is not None)
            )
        except PermanentError as exc:
            return type(exc)(f"{self.spec}: {exc}")  # keeps AccessError, EmptyReplyError
        except RetryableError as exc:
            return RetryableError(f"{self.spec}: {exc}", exc.retry_after)

    def close(self) -> None:
        self._pool.shutdown()
        self._http.close()
