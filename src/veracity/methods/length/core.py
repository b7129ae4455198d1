"""Answer length as a trust signal: the number of tokens of the greedy answer.

Length alone can rival far costlier signals when correctness labels favour short answers (a
reference found inside a short answer, a judge that penalises rambling), which is why every
benchmark table carries it. Counted with the model's own tokenizer where the backend reports
one (the tokens it generated); otherwise, and for recorded answers without a count, the
fallback counts words and punctuation marks (:data:`WORD_PATTERN`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from veracity.errors import ConfigError
from veracity.types import Generation, GenRequest, Sampling

WORD_PATTERN = re.compile(r"\w+|[^\w\s]")
"""The fallback tokenizer: runs of letters / digits, and each other visible character."""


def fallback_tokens(text: str) -> int:
    """Words and punctuation marks in ``text``.

    >>> fallback_tokens("Paris, of course.")
    5
    """
    return len(WORD_PATTERN.findall(text))


def answer_length(generation: Generation) -> tuple[int, str]:
    """(tokens, how they were counted) of one answer: its token log-probabilities' count, the
    backend's completion-token count, or the fallback.

    >>> answer_length(Generation("Paris, of course.", completion_tokens=4))
    (4, 'model')
    >>> answer_length(Generation("Paris, of course."))
    (5, 'words')
    """
    if generation.logprobs:
        return len(generation.logprobs), "model"
    if generation.completion_tokens > 0:
        return generation.completion_tokens, "model"
    return fallback_tokens(generation.text), "words"


@dataclass(frozen=True)
class LengthSettings:
    """How the greedy answer is asked for; recorded with the results."""

    max_tokens: int = 64

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError("the length baseline needs max_tokens >= 1")

    def describe(self) -> dict[str, object]:
        return {"max_tokens": self.max_tokens, "higher_is_better": False,
                "fallback": "words and punctuation marks"}


def greedy_request(question: str, settings: LengthSettings) -> GenRequest:
    """The greedy answer's request (the same call as every method's plain greedy answer)."""
    return GenRequest.user(question, Sampling(temperature=0.0, max_tokens=settings.max_tokens))
