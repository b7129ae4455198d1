"""The embedded default as an upstream: an in-process model answering OpenAI chat requests."""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio

from veracity.backends.base import Backend, Outcome
from veracity.errors import BackendError, ConfigError, PermanentError
from veracity.jsontypes import JsonObject
from veracity.registry import load_model
from veracity.serve.upstream import Stream, UpstreamError
from veracity.serve.wire import ChatCompletion, ChatRequest, ModelList
from veracity.types import Generation, GenRequest, Message, Sampling

ROLES = ("system", "user", "assistant")


class LockedBackend:
    """A backend that runs one batch at a time (in-process models are not thread-safe)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.spec = backend.spec
        self.capabilities = backend.capabilities
        self._lock = threading.Lock()

    def identity(self) -> JsonObject:
        return self.backend.identity()

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        with self._lock:
            return self.backend.generate(requests)

    def close(self) -> None:
        """The owner (LocalUpstream) closes the wrapped backend."""


def chat_request(body: ChatRequest, default_max_tokens: int) -> GenRequest:
    """The GenRequest an OpenAI chat body asks for (text messages only)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ConfigError("'messages' must be a non-empty list")
    turns = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ConfigError(f"messages[{i}] must have a role in {', '.join(ROLES)} and text content")
        turns.append(Message(m["role"], m["content"]))
    return GenRequest(tuple(turns), request_sampling(body, default_max_tokens, temperature=0.0))


def request_sampling(body: ChatRequest, default_max_tokens: int, temperature: float) -> Sampling:
    """Sampling named in a chat body; ``temperature`` when it names none."""
    def number(name: str, default: float) -> float:
        value = body.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"'{name}' must be a number, got {value!r}")
        return float(value)

    max_tokens = number("max_completion_tokens", number("max_tokens", default_max_tokens))
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list | tuple):
        stop = tuple(str(s) for s in stop)
    else:
        raise ConfigError(f"'stop' must be a string or a list of strings, got {stop!r}")
    return Sampling(temperature=number("temperature", temperature), top_p=number("top_p", 1.0),
                    max_tokens=max(1, int(max_tokens)), seed=int(number("seed", 0)), stop=stop)


class LocalUpstream:
    """Serves one in-process model (default: the bundled SmolLM2) under its spec as model id."""

    overlaps_answer = False  # one model behind one lock: the perturbed batch would only queue

    def __init__(self, spec: str, default_max_tokens: int,
                 options: dict[str, Any] | None = None) -> None:
        self.name = spec
        self.spec = spec
        self.options = dict(options or {})
        self.default_max_tokens = default_max_tokens
        self._backend: LockedBackend | None = None

    async def start(self) -> None:
        backend = await anyio.to_thread.run_sync(
            functools.partial(load_model, self.spec, **self.options))
        self._backend = LockedBackend(backend)

    @property
    def backend(self) -> LockedBackend:
        if self._backend is None:
            raise RuntimeError("local model not loaded")
        return self._backend

    async def _generate(self, body: ChatRequest) -> tuple[str, Generation]:
        model = body.get("model")
        if model != self.spec:
            raise UpstreamError(404, f"model {model!r} is not served here; this gateway serves "
                                f"'{self.spec}'", "http_404", "invalid_request_error", "model_not_found")
        try:
            request = chat_request(body, self.default_max_tokens)
        except ConfigError as exc:
            raise UpstreamError(400, str(exc), "http_400", "invalid_request_error") from None
        [outcome] = await anyio.to_thread.run_sync(self.backend.generate, [request])
        if isinstance(outcome, PermanentError):
            raise UpstreamError(400, str(outcome), "http_400", "invalid_request_error")
        if isinstance(outcome, BackendError):
            raise UpstreamError(500, str(outcome), "http_500")
        return f"chatcmpl-{uuid.uuid4().hex}", outcome

    async def chat(self, body: ChatRequest) -> ChatCompletion:
        ident, out = await self._generate(body)
        return {
            "id": ident, "object": "chat.completion", "created": int(time.time()), "model": self.spec,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": out.text},
                         "finish_reason": out.finish_reason}],
            "usage": {"prompt_tokens": out.prompt_tokens, "completion_tokens": out.completion_tokens,
                      "total_tokens": out.prompt_tokens + out.completion_tokens},
        }

    async def stream(self, body: ChatRequest) -> Stream:
        """The whole answer is generated first, then sent as OpenAI chunks."""
        ident, out = await self._generate(body)
        return Stream(self._events(ident, out))

    async def _events(self, ident: str, out: Generation) -> AsyncIterator[bytes]:
        base = {"id": ident, "object": "chat.completion.chunk", "created": int(time.time()),
                "model": self.spec}
        deltas: list[tuple[dict[str, Any], str | None]] = [
            ({"role": "assistant", "content": ""}, None), ({"content": out.text}, None),
            ({}, out.finish_reason)]
        for delta, finish in deltas:
            chunk = base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def models(self) -> ModelList:
        return {"object": "list",
                "data": [{"id": self.spec, "object": "model", "created": 0, "owned_by": "veracity"}]}

    def scoring_key(self, model: str) -> tuple[str, dict[str, Any]]:
        return self.backend.spec, self.backend.identity()

    async def perturbed(self, model: str, requests: Sequence[GenRequest]) -> list[Outcome]:
        """One batch on the in-process model."""
        return await anyio.to_thread.run_sync(self.backend.generate, list(requests))

    async def aclose(self) -> None:
        if self._backend is not None:
            self._backend.backend.close()
