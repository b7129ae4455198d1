"""P(True) (Kadavath et al. 2022, "Language Models (Mostly) Know What They Know"): the model
is shown a question with its own answer and asked whether the answer is true; the score is
the probability it gives "True" as the next token.

From the reply's token log-probabilities: at the first reply position whose alternatives
include "True" or "False" (any case, spaces ignored), P(True) and P(False) are the summed
probabilities of those spellings, and the score is P(True) / (P(True) + P(False)), the
probability of "True" between the two options offered (the raw P(True) is recorded too).
Where the backend returns no log-probabilities, or neither word is among the alternatives,
the reply is read as a verdict: 1 for True, 0 for False, unscored otherwise. Larger = more
trustworthy.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from veracity.errors import ConfigError, DataError
from veracity.paths import user_path
from veracity.types import GenRequest, Sampling, TokenLogprob

DEFAULT_PROMPT = (
    "Below is a question and an answer that was proposed for it.\n\n"
    "Question: {question}\n"
    "Proposed answer: {answer}\n\n"
    "Is the proposed answer true? Reply with one word: True or False."
)
"""Our wording; a user's prompt file replaces it and must hold {question} and {answer}."""

_WORD = re.compile(r"\b(true|false)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    """P(True) of one reply and where it came from."""

    score: float | None
    """P(True) / (P(True) + P(False)), or 1 / 0 from a parsed verdict; None = neither."""
    source: str
    """``logprobs``, ``verdict`` or ``none``."""
    p_true: float | None = None
    """The raw summed probability of the "True" spellings (logprobs only)."""
    p_false: float | None = None
    position: int | None = None
    """The reply token the probabilities were read at (from 0)."""


def option_mass(token: TokenLogprob) -> tuple[float, float]:
    """(P(True), P(False)) at one position: the probabilities of the distinct spellings of
    each word among the chosen token and its alternatives.

    >>> option_mass(TokenLogprob(" True", math.log(0.6),
    ...                          ((" True", math.log(0.6)), ("True", math.log(0.1)),
    ...                           (" False", math.log(0.2)))))
    (0.7, 0.2)
    """
    seen: dict[str, float] = dict(token.top)
    seen.setdefault(token.token, token.logprob)
    mass = {"true": 0.0, "false": 0.0}
    for text, logprob in seen.items():
        word = text.strip().lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    return round(mass["true"], 12), round(mass["false"], 12)


def read_verdict(text: str, tokens: Sequence[TokenLogprob] | None) -> Verdict:
    """P(True) of a reply: from its tokens' alternatives where they name True or False, else
    the first True / False word of its text.

    >>> read_verdict("False.", None)
    Verdict(score=0.0, source='verdict', p_true=None, p_false=None, position=None)
    """
    for k, token in enumerate(tokens or ()):
        p_true, p_false = option_mass(token)
        if p_true + p_false > 0:
            return Verdict(p_true / (p_true + p_false), "logprobs", p_true, p_false, k)
    found = _WORD.search(text)
    if found is None:
        return Verdict(None, "none")
    return Verdict(1.0 if found.group(1).lower() == "true" else 0.0, "verdict")


def load_prompt(path: Path | str | None) -> tuple[str, str]:
    """(template, how it is recorded): the built-in one, or a user's file with {question}
    and {answer}."""
    if path is None:
        return DEFAULT_PROMPT, "built-in"
    file = user_path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"P(True) prompt file {file}: cannot read it ({exc})") from None
    missing = [p for p in ("{question}", "{answer}") if p not in text]
    if missing:
        raise ConfigError(f"P(True) prompt file {file} must contain {' and '.join(missing)}")
    return text, f"{file.name} (sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]})"


def fill(template: str, question: str, answer: str) -> str:
    """The template with the question and answer put in (other braces left alone)."""
    return template.replace("{question}", question).replace("{answer}", answer)


@dataclass(frozen=True)
class PTrueSettings:
    """How the answer is generated and judged; recorded with the results."""

    max_tokens: int = 64
    """Of the greedy answer."""
    top_k: int = 20
    """Alternatives asked for at each reply token (OpenAI allows up to 20)."""
    verdict_tokens: int = 4
    """Tokens of the reply to the True / False question."""
    prompt: str = DEFAULT_PROMPT
    prompt_source: str = "built-in"

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or self.verdict_tokens < 1:
            raise ConfigError("max_tokens and verdict_tokens must be >= 1")
        if not 1 <= self.top_k <= 20:
            raise ConfigError("top_k: 1 to 20 alternatives per token")
        if "{question}" not in self.prompt or "{answer}" not in self.prompt:
            raise DataError("the P(True) prompt must contain {question} and {answer}")

    def judge_request(self, question: str, answer: str, logprobs: bool) -> GenRequest:
        """The True / False question about one answer (greedy)."""
        return GenRequest.user(fill(self.prompt, question, answer),
                               Sampling(temperature=0.0, max_tokens=self.verdict_tokens),
                               logprobs=self.top_k if logprobs else None)

    def describe(self) -> dict[str, object]:
        return {"max_tokens": self.max_tokens, "top_k": self.top_k,
                "verdict_tokens": self.verdict_tokens, "prompt": self.prompt_source,
                "higher_is_better": True}
