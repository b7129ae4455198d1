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
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from veracity.backends.base import Capabilities, Finished, Outcome
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
from veracity.retry import call_with_retry, parse_retry_after
from veracity.types import GenRequest, Message

if TYPE_CHECKING:
    from veracity.backends.endpoints import PooledOpenAIBackend

DEFAULT_BASE_URL = "https://api.openai.com/v1"
PREFILL_MODES = ("none", "continue", "completions")
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_LIMIT = 300  # characters of a server message kept in an error
T = TypeVar("T")


def _truncate(text: str, limit: int = _LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def resolve_base_url(base_url: str | None) -> str:
    """The explicit URL, else ``$OPENAI_BASE_URL``, else the public OpenAI API."""
    url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"base URL must start with http:// or https://, got '{url}'")
    return url


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
            prefill=prefill_mode != "none", seed=True, max_concurrency=max_concurrency
        )
        self._template: ChatTemplate | None = None
        self._template_sha = ""
        if prefill_mode == "completions":
            if not chat_template:
                raise ConfigError(
                    "prefill_mode='completions' needs chat_template= (a template file, a "
                    "tokenizer_config.json, or the template text) matching the served model"
                )
            self._template = resolve_template(chat_template)
            self._template_sha = self._template.sha
        self._specials = {"bos_token": bos_token, "eos_token": eos_token}
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

    def identity(self) -> dict[str, Any]:
        out: dict[str, Any] = {"base_url": self.base_url, "prefill_mode": self.prefill_mode}
        if self._template_sha:  # the template shapes every prompt in this mode
            out["chat_template"] = self._template_sha
        if self.extra_body:
            out["extra_body"] = self.extra_body
        return out

    def render(self, messages: Sequence[Message], prefill: str = "") -> str:
        """The completions-mode prompt: chat template with the generation prompt, then the prefill."""
        if self._template is None:
            raise ConfigError("render() needs prefill_mode='completions' and a chat_template")
        return str(self._template.render(messages, **self._specials)) + prefill

    def payload(self, request: GenRequest) -> tuple[str, dict[str, Any]]:
        """The endpoint path and JSON body sent for one request."""
        s = request.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "temperature": max(s.temperature, 0.0),
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "seed": s.seed + request.sample_index,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if s.top_k:
            body["top_k"] = s.top_k
        if s.repeat_penalty != 1.0:
            # llama.cpp's server reads repeat_penalty, vLLM repetition_penalty; each ignores the other
            body["repeat_penalty"] = s.repeat_penalty
            body["repetition_penalty"] = s.repeat_penalty
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        path = "/chat/completions"
        if self.prefill_mode == "completions":
            path = "/completions"
            body["prompt"] = self.render(request.messages, request.prefill)
        elif request.prefill:
            messages.append({"role": "assistant", "content": request.prefill})
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        if path == "/chat/completions":
            body["messages"] = messages
        body.update(self.extra_body)
        return path, body

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
                if ready:
                    yield [(i, futures[i].result()) for i in ready]
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
                path, body, lambda data: read_reply(data, chat, self._http.malformed)
            )
        except PermanentError as exc:
            return type(exc)(f"{self.spec}: {exc}")  # keeps AccessError, EmptyReplyError
        except RetryableError as exc:
            return RetryableError(f"{self.spec}: {exc}", exc.retry_after)

    def close(self) -> None:
        self._pool.shutdown()
        self._http.close()


def load(
    name: str, base_url: str | Sequence[str] | None = None, **options: Any
) -> OpenAIBackend | PooledOpenAIBackend:
    """Registry factory for ``openai/MODEL``; ``options`` are OpenAIBackend's (api_key_env,
    max_concurrency, timeout, max_retries, prefill_mode, chat_template, extra_body, ...).

    Several base URLs make an endpoint pool (``veracity.backends.endpoints``)."""
    if not isinstance(base_url, str | None):
        urls = list(base_url)
        if len(urls) > 1:
            from veracity.backends.endpoints import PooledOpenAIBackend

            return PooledOpenAIBackend(name, urls, **options)
        base_url = urls[0] if urls else None
    return OpenAIBackend(name, base_url=base_url, **options)
