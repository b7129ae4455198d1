"""Scripted responders for the fake backend that give semantic entropy known samples: the
answers of each question in sample order, each with a known mean token log-probability; and a
judge that calls two answers the same when their first words match."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from veracity.methods.semantic_entropy.entail import JUDGE_PROMPT
from veracity.types import Generation, GenRequest, TokenLogprob

_TOKEN = re.compile(r"\s*\S+")
_JUDGED = re.compile(re.escape(JUDGE_PROMPT.split("{a}")[0].split("{question}")[1]) +
                     r"(.*)\n\nSecond answer: (.*)\n\nReply", re.DOTALL)


def samples(script: Mapping[str, Sequence[tuple[str, float]]]) -> Callable[[GenRequest], Generation]:
    """Sample k (``sample_index`` k >= 1) of a question is ``script[question][k - 1]``: its
    text, every token at the given log-probability; the greedy answer (index 0) is the first."""

    def reply(request: GenRequest) -> Generation:
        answers = script[request.messages[-1].content]
        text, logprob = answers[max(request.sample_index - 1, 0) % len(answers)]
        return Generation(text, logprobs=tuple(TokenLogprob(t, logprob)
                                               for t in _TOKEN.findall(text)))

    return reply


def first_word_judge(request: GenRequest) -> str:
    """Answers the semantic-entropy judge prompt: YES when both answers start with the same
    word (any case), else NO."""
    found = _JUDGED.search(request.messages[-1].content)
    if found is None:
        return "I cannot tell."
    a, b = (text.split()[0].lower() if text.split() else "" for text in found.groups())
    return "YES" if a == b else "NO"
