"""Reading the text out of an OpenAI-compatible completion reply.

A reply that breaks the protocol (no choice, a choice without a message, a text of the wrong
type) is a server fault: :class:`RetryableError`, retried like a 5xx. A well-formed reply with
no text to score (``content: null``, a refusal, only non-text parts) is
:class:`EmptyReplyError`: never cached, never scored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from veracity.errors import EmptyReplyError, PermanentError, RetryableError
from veracity.types import Generation, TokenLogprob

Malformed = Callable[[dict[str, Any], str], RetryableError]
"""Builds the (redacted) error of a malformed reply from the reply and what is wrong."""


def _count(usage: Any, name: str) -> int:
    value = usage.get(name) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and value >= 0 else 0


def _parts_text(parts: list[Any]) -> str | None:
    """The text of a list of content parts (``[{"type": "text", "text": ...}]``), or None
    when no part holds text."""
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
             and p.get("type", "text") in ("text", "output_text")]
    return "".join(texts) if texts else None


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("not a number")
    return min(float(value), 0.0)


def _chat_logprobs(found: Any) -> tuple[TokenLogprob, ...]:
    """``choice.logprobs.content`` of a chat reply: [{token, logprob, top_logprobs}, ...]."""
    content = found.get("content") if isinstance(found, dict) else None
    if not isinstance(content, list):
        raise ValueError("no logprobs.content list")
    return tuple(
        TokenLogprob(str(t["token"]), _number(t["logprob"]),
                     tuple((str(a["token"]), _number(a["logprob"]))
                           for a in t.get("top_logprobs") or ()))
        for t in content)


def _completion_logprobs(found: Any) -> tuple[TokenLogprob, ...]:
    """``choice.logprobs`` of a legacy completions reply: parallel lists ``tokens``,
    ``token_logprobs`` and ``top_logprobs`` (one {token: logprob} object per token)."""
    if not isinstance(found, dict):
        raise ValueError("logprobs is not an object")
    tokens, values = found.get("tokens"), found.get("token_logprobs")
    tops = found.get("top_logprobs") or [None] * len(tokens or ())
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values):
        raise ValueError("tokens and token_logprobs are not lists of one length")
    out = []
    for token, value, top in zip(tokens, values, tops, strict=True):
        alternatives = sorted(((str(k), _number(v)) for k, v in (top or {}).items()),
                              key=lambda kv: -kv[1])
        out.append(TokenLogprob(str(token), _number(value), tuple(alternatives)))
    return tuple(out)


def read_logprobs(choice: dict[str, Any], chat: bool) -> tuple[TokenLogprob, ...]:
    """The token log-probabilities of a reply's choice; a PermanentError (never cached) when a
    server that was asked for them sent none or sent them malformed."""
    found = choice.get("logprobs")
    if found is None:
        raise PermanentError("the server returned no token log-probabilities although they were "
                             "requested (logprobs / top_logprobs): it does not support them")
    try:
        return _chat_logprobs(found) if chat else _completion_logprobs(found)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PermanentError(f"the server's token log-probabilities are malformed: {exc}") from None


def read_reply(data: dict[str, Any], chat: bool, malformed: Malformed,
               logprobs: bool = False) -> Generation:
    """The Generation in ``data``, a ``/chat/completions`` (``chat``) or ``/completions`` reply;
    with ``logprobs``, its tokens' log-probabilities too."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise malformed(data, "no choices")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise malformed(data, "the choice is not an object")
    refusal = None
    if chat:
        message = choice.get("message")
        if not isinstance(message, dict):
            raise malformed(data, "the choice has no message")
        content = message.get("content")
        refusal = message.get("refusal")
    else:
        content = choice.get("text")
    if isinstance(content, list):
        content = _parts_text(content)
        if content is None:
            raise EmptyReplyError("the reply has no text part")
    if content is None:
        if isinstance(refusal, str) and refusal:
            raise EmptyReplyError(f"the model refused: {refusal[:200]}")
        raise EmptyReplyError("the reply has no text (content null)")
    if not isinstance(content, str):
        raise malformed(data, f"the text is a {type(content).__name__}, not a string")
    finish = choice.get("finish_reason")
    usage = data.get("usage")
    return Generation(
        text=content,
        finish_reason=finish if isinstance(finish, str) and finish else "stop",
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        logprobs=read_logprobs(choice, chat) if logprobs else None,
    )
