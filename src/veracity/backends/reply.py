"""Reading the text out of an OpenAI-compatible completion reply.

A reply that breaks the protocol (no choice, a choice without a message, a text of the wrong
type) is a server fault: :class:`RetryableError`, retried like a 5xx. A well-formed reply with
no text to score (``content: null``, a refusal, only non-text parts) is
:class:`EmptyReplyError`: never cached, never scored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from veracity.errors import EmptyReplyError, RetryableError
from veracity.types import Generation

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


def read_reply(data: dict[str, Any], chat: bool, malformed: Malformed) -> Generation:
    """The Generation in ``data``, a ``/chat/completions`` (``chat``) or ``/completions`` reply."""
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
    )
