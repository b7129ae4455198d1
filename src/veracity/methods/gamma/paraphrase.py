"""The ``paraphrase`` ball: a model rewrites each question N times (sampled, seeded, cached).

Unlike the pure balls of :mod:`veracity.perturb` it needs an LLM, so gamma plans it as its
own stage: one batch with N requests per question (temperature > 0, ``sample_index`` = ball
point), replies parsed leniently; a point whose reply is unusable (empty, the question
itself, or not a question) is asked again with a fresh ``sample_index``, at most
``attempts`` times in all. The paraphraser must follow instructions: the bundled
SmolLM2-135M mostly answers the question instead, so name a stronger model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from veracity.backends.fake import babble, digest, last_user, stable
from veracity.client import LLMClient
from veracity.errors import ConfigError, DataError
from veracity.types import GenRequest, Sampling

PARAPHRASE = "paraphrase"
INSTRUCTION = (
    "Rewrite the question below in different words, keeping exactly the same meaning. "
    "Reply with the rewritten question only.\n\nQuestion: {question}"
)
_LABEL = re.compile(
    r"^(?:\*\*|__)?(?:rewritten question|rewritten|paraphrased question|paraphrase|rephrased"
    r"|rephrased question|question|new question|answer)\s*(?:\*\*|__)?\s*:\s*(?:\*\*|__)?\s*",
    re.IGNORECASE,
)
_BULLET = re.compile(r"^(?:\d+[.)]|[-*•])\s+")
_QUOTES = "\"'“”‘’`"


def paraphrase_sampling(seed: int = 0, max_tokens: int = 96) -> Sampling:
    """Sampled decoding: each ball point must differ, and the seed makes it reproducible."""
    return Sampling(temperature=0.8, top_p=0.95, max_tokens=max_tokens, seed=seed)


def _normal(text: str) -> str:
    return re.sub(r"\W+", " ", text).strip().lower()


def parse_paraphrase(reply: str, question: str) -> str | None:
    """The rewritten question in a reply, or None when there is none.

    Skips chatty preambles ("Sure! Here is ...:"), drops labels, list markers, quotes and
    markdown emphasis. A reply that only repeats the question is not a paraphrase, and
    neither is one without a question mark when the question has one (usually an answer).
    """
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    for line in lines:
        if line.endswith(":"):
            continue  # a preamble announcing the paraphrase on the next line
        text = _BULLET.sub("", line)
        text = _LABEL.sub("", text).strip()
        text = text.strip("*_ ").strip(_QUOTES).strip()
        if not text:
            continue
        if _normal(text) == _normal(question) or not _normal(text):
            return None
        if "?" in question and "?" not in text:
            return None
        return text
    return None


def paraphrase_ball(
    questions: Sequence[str],
    client: LLMClient,
    n: int,
    seed: int = 0,
    attempts: int = 3,
    max_tokens: int = 96,
) -> list[list[str]]:
    """N paraphrases of each question, from one batched (cached) stage plus small retries.

    Raises DataError naming the question when a point is still unusable after ``attempts``.
    """
    if n < 1:
        raise ConfigError(f"the ball needs at least one point, got n={n}")
    if attempts < 1:
        raise ConfigError(f"paraphrase attempts must be >= 1, got {attempts}")
    sampling = paraphrase_sampling(seed, max_tokens)
    found: list[list[str | None]] = [[None] * n for _ in questions]
    last: dict[tuple[int, int], str] = {}
    missing = [(q, i) for q in range(len(questions)) for i in range(n)]
    for attempt in range(attempts):
        if not missing:
            break
        requests = [
            GenRequest.user(
                INSTRUCTION.format(question=questions[q]), sampling, sample_index=i + attempt * n
            )
            for q, i in missing
        ]
        stage = "paraphrase" if attempt == 0 else f"paraphrase: retry {attempt}"
        replies = client.generate(requests, stage=stage)
        for (q, i), reply in zip(missing, replies, strict=True):
            last[q, i] = reply.text
            found[q][i] = parse_paraphrase(reply.text, questions[q])
        missing = [(q, i) for q, i in missing if found[q][i] is None]
    if missing:
        q, i = missing[0]
        raise DataError(
            f"paraphraser {client.spec} gave no usable paraphrase of question {q + 1} "
            f"({questions[q][:60]!r}), ball point {i + 1}, in {attempts} attempts "
            f"({len(missing)} points unusable in all); last reply: {last[q, i][:80]!r}. "
            "A paraphraser must follow instructions: name a stronger model (--paraphraser SPEC)"
        )
    return [[p for p in points if p is not None] for points in found]


_PARAPHRASE_ASKED = re.compile(r"Rewrite the question below.*\n\nQuestion: (.*)$", re.DOTALL)


def fake_paraphraser(request: GenRequest) -> str:
    """Answers paraphrase requests in assorted chatty formats (always empty for
    ``sample_index`` 1, so callers must retry), and any other prompt like ``stable``."""
    asked = _PARAPHRASE_ASKED.search(last_user(request))
    if asked is None:
        return stable(request)
    if request.sample_index == 1:
        return ""
    question = asked.group(1).strip()
    variant = digest(f"{question}#{request.sample_index}#{request.sampling.seed}") % 3
    opener = babble(f"{question}#{request.sample_index}#{request.sampling.seed}", 2)
    if variant == 0:
        return f'Sure! Here is the question in other words:\n"{opener}, {question}"'
    if variant == 1:
        return f"1. Put differently ({opener}): {question}"
    return f"**Rephrased:** {opener} - {question.lower()}"
