"""Frozen value types shared by every layer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from veracity.errors import ConfigError

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    """One chat turn."""

    role: Role
    content: str


@dataclass(frozen=True)
class Sampling:
    """Decoding parameters; temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    repeat_penalty: float = 1.0
    max_tokens: int = 128
    seed: int = 0
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        finite = all(isinstance(v, int | float) and math.isfinite(v)
                     for v in (self.temperature, self.top_p, self.repeat_penalty))
        if not finite or self.temperature < 0 or not 0 <= self.top_p <= 1 or self.top_k < 0 \
                or self.repeat_penalty < 0 or self.max_tokens < 0:
            raise ConfigError(
                f"sampling: temperature, top-p (<= 1), top-k, repeat penalty and max tokens must "
                f"be finite and >= 0, got temperature={self.temperature}, top_p={self.top_p}, "
                f"top_k={self.top_k}, repeat_penalty={self.repeat_penalty}, "
                f"max_tokens={self.max_tokens}")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class GenRequest:
    """One generation: chat messages, an optional assistant prefill to continue, sampling.

    ``sample_index`` distinguishes repeated samples of the same prompt (e.g. J diverse
    reference answers at temperature > 0); it is part of the cache key and the seed.
    """

    messages: tuple[Message, ...]
    sampling: Sampling = Sampling()
    prefill: str = ""
    sample_index: int = 0
    logprobs: int | None = None
    """Token log-probabilities wanted with the answer: None = none; k >= 0 = each generated
    token's own log-probability and the k most likely alternatives at its position. Part of
    the cache key only when set; needs a backend with the ``logprobs`` capability."""
    draft: str = ""
    """An answer this one is expected to resemble (γ's centre answer, a given answer to score):
    a backend decoding with ``decode=draft`` verifies it instead of generating token by token;
    others ignore it. Part of the cache key only for such backends."""

    @staticmethod
    def user(prompt: str, sampling: Sampling = Sampling(), **kw: Any) -> GenRequest:
        return GenRequest(messages=(Message("user", prompt),), sampling=sampling, **kw)


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its text, its natural-log probability, and the most likely
    alternatives at its position (token text, log-probability; the chosen one may be among
    them), as many as the request asked for."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()

    @staticmethod
    def from_json(value: Any) -> TokenLogprob:
        token, logprob, top = value
        return TokenLogprob(str(token), float(logprob),
                            tuple((str(t), float(lp)) for t, lp in top))

    def to_json(self) -> list[Any]:
        """Compact ``[token, logprob, [[alt, logprob], ...]]`` (cached with the generation)."""
        return [self.token, self.logprob, [[t, lp] for t, lp in self.top]]


@dataclass(frozen=True)
class Generation:
    """The text a backend produced for one request (without the prefill)."""

    text: str
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    replaced_chars: int = 0
    """Invalid characters in the model's text (lone UTF-16 surrogates) replaced by U+FFFD."""
    logprobs: tuple[TokenLogprob, ...] | None = None
    """Each generated token with its log-probability, when the request asked for them."""


@dataclass(frozen=True)
class Item:
    """A free-form question, with optional reference answers and metadata."""

    id: str
    question: str
    references: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class MCItem:
    """A multiple-choice item with a misleading opening (DB-MMLU)."""

    id: str
    subject: str
    question: str
    options: tuple[str, ...]
    answer: str
    misleading_start: str = ""
