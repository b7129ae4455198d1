"""What an OpenAI-compatible server is sent, as pure functions: its base URL, the request
body of one generation, and the cache identity of a backend shaped so.

Below every client of such a server: the project's threaded backend
(:mod:`veracity.backends.openai`), its endpoint pool (:mod:`veracity.backends.endpoints`) and
the gateway's async upstream (:mod:`veracity.serve.upstream`), which send the same bodies and
so share cache entries.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from veracity.backends.templates import ChatTemplate
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.types import GenRequest, Message

DEFAULT_BASE_URL = "https://api.openai.com/v1"
PREFILL_MODES = ("none", "continue", "completions")
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def resolve_base_url(base_url: str | None) -> str:
    """The explicit URL, else ``$OPENAI_BASE_URL``, else the public OpenAI API."""
    url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"base URL must start with http:// or https://, got '{url}'")
    return url


@dataclass(frozen=True)
class RequestShape:
    """How requests for one model are written.

    ``prefill_mode``: how an assistant prefill is continued: ``"none"`` (sent as a final
    assistant message all the same; backends refuse it earlier), ``"continue"`` (with
    ``continue_final_message``, as vLLM and llama.cpp's server accept) or ``"completions"``
    (the prompt rendered from ``template`` and sent to ``/completions``).
    """

    model: str
    prefill_mode: str = "none"
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    template: ChatTemplate | None = None
    bos_token: str = ""
    eos_token: str = ""


def render_prompt(shape: RequestShape, messages: Sequence[Message], prefill: str = "") -> str:
    """The completions-mode prompt: the chat template with the generation prompt, then the prefill."""
    if shape.template is None:
        raise ConfigError("render() needs prefill_mode='completions' and a chat_template")
    specials = {"bos_token": shape.bos_token, "eos_token": shape.eos_token}
    return str(shape.template.render(messages, **specials)) + prefill


def request_body(shape: RequestShape, request: GenRequest) -> tuple[str, dict[str, Any]]:
    """The endpoint path and JSON body sent for one request."""
    s = request.sampling
    body: dict[str, Any] = {
        "model": shape.model,
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
    path = "/chat/completions"
    if shape.prefill_mode == "completions":
        path = "/completions"
        body["prompt"] = render_prompt(shape, request.messages, request.prefill)
        if request.logprobs is not None:  # the legacy API: an int, the alternatives wanted
            body["logprobs"] = request.logprobs
    else:
        if request.logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = request.logprobs
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        if request.prefill:
            messages.append({"role": "assistant", "content": request.prefill})
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        body["messages"] = messages
    body.update(shape.extra_body)
    return path, body


def backend_identity(base_url: str, shape: RequestShape) -> JsonObject:
    """The cache identity of ``openai/{model}`` at ``base_url`` (resolved): what changes the
    answers besides the request itself."""
    out: JsonObject = {"base_url": base_url, "prefill_mode": shape.prefill_mode}
    if shape.template is not None:  # the template shapes every prompt in this mode
        out["chat_template"] = shape.template.sha
    if shape.extra_body:
        out["extra_body"] = dict(shape.extra_body)
    return out
