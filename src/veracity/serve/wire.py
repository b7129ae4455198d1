"""The OpenAI chat completion bodies at the gateway's edge, typed for the fields the gateway
reads or adds; every other field passes between client and upstream unread.

A request is checked (:func:`veracity.serve.app.check_body`) before it is read as a
:class:`ChatRequest`: its model a non-empty string, its messages a non-empty list, ``stream`` a
bool. What comes back from an upstream is not checked as a whole: the fields the gateway reads
are tested where they are read.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict


class ChatRequest(TypedDict, total=False):
    """A chat completion request as the gateway reads it."""

    model: Required[str]
    messages: Required[list[object]]
    """Only text messages can be scored (:meth:`veracity.serve.scoring.Exchange.split`)."""
    stream: bool
    logprobs: bool
    temperature: object
    top_p: object
    max_tokens: object
    max_completion_tokens: object
    seed: object
    stop: object
    """The sampling fields: numbers (a string or a list of strings for ``stop``) when the
    client sent them as the API says; checked where they are read."""


class ChatCompletion(TypedDict, total=False):
    """A chat completion as the upstream returned it, and the ``veracity`` object the gateway
    adds."""

    id: object
    object: object
    created: object
    model: object
    choices: list[Any]
    """The upstream's choices, each read with a check of its shape."""
    usage: object
    error: object
    veracity: dict[str, Any]
    """The score (or the mark of a request not scored, or a pending score's address)."""


class ModelList(TypedDict, total=False):
    """``GET /v1/models`` as an upstream answers it."""

    object: str
    data: list[Any]
