"""Responders for tests/test_fake_identity.py, importable by a second Python process."""

from __future__ import annotations

import functools
from collections.abc import Callable

from veracity.types import GenRequest


def shout(request: GenRequest) -> str:
    """The question in capitals; a set literal makes a frozenset constant, whose order
    changes with the hash seed."""
    text = request.messages[-1].content
    return text.upper() if text[-1:] in {"?", "!", "."} else text


def whisper(request: GenRequest) -> str:
    return request.messages[-1].content.lower()


def saying(word: str) -> Callable[[GenRequest], str]:
    """A closure: the same code for every word, a different answer."""

    def reply(request: GenRequest) -> str:
        return f"{word}: {request.messages[-1].content}"

    return reply


def repeat(request: GenRequest, times: int) -> str:
    return " ".join([request.messages[-1].content] * times)


twice = functools.partial(repeat, times=2)
thrice = functools.partial(repeat, times=3)


class Prefixer:
    """A responder that is a bound method: ``self`` is part of what it answers."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def answer(self, request: GenRequest) -> str:
        return self.prefix + request.messages[-1].content
