"""Scripted responders for the fake backend (``FakeBackend(responder=...)``) that give the
log-probability baseline answers whose token probabilities are known by construction."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping

from veracity.types import Generation, GenRequest, TokenLogprob

_TOKEN = re.compile(r"\s*\S+")


def tokens_at(text: str, logprob: float, runner_up: float | None = None) -> tuple[TokenLogprob, ...]:
    """Every whitespace-separated word of ``text`` one token at ``logprob``; with
    ``runner_up``, one alternative at that log-probability beside it."""
    top = ((("<alt>", runner_up),) if runner_up is not None else ())
    return tuple(TokenLogprob(t, logprob, ((t, logprob), *top)) for t in _TOKEN.findall(text))


def scripted(script: Mapping[str, tuple[str, float]]) -> Callable[[GenRequest], Generation]:
    """Answers each question of ``script`` with its text, every token at its log-probability
    (and the rest of the mass on one alternative); any other question with "unknown" at
    log 0.5."""

    def reply(request: GenRequest) -> Generation:
        question = request.messages[-1].content
        text, logprob = script.get(question, ("unknown", math.log(0.5)))
        rest = math.log1p(-math.exp(logprob)) if logprob < 0 else None
        return Generation(text, logprobs=tokens_at(text, logprob, rest))

    return reply
