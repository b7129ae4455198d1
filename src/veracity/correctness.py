"""Automatic correctness of free-form answers against reference answers, or by a judge model.

Three rules, each recorded with its evidence:
- ``tqa-similarity`` (TruthfulQA, as the FEWL paper's TQA metric): correct when the answer's best
  embedding cosine to the correct reference answers exceeds its best cosine to the incorrect ones.
- ``contains`` (WebQuestions and any dataset with reference answers only): correct when the
  answer contains one of the gold answer strings as whole words, case-insensitive.
- ``judge``: a model the user names is asked for CORRECT / INCORRECT (greedy, cached).

An empty answer is incorrect under every rule (``empty``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from veracity.client import CachedEmbedder, LLMClient
from veracity.errors import ConfigError
from veracity.types import GenRequest, Sampling

Rule = Literal["tqa-similarity", "contains", "judge", "empty"]
JUDGE_SAMPLING = Sampling(temperature=0.0, max_tokens=8)
_VERDICT = re.compile(r"\b(INCORRECT|CORRECT)\b")


@dataclass(frozen=True)
class Labelled:
    """What correctness needs to know about one answer."""

    question: str
    answer: str
    correct: tuple[str, ...] = ()
    """Reference answers that are right (for TruthfulQA: best answer + correct answers)."""
    incorrect: tuple[str, ...] = ()
    """Reference answers that are wrong (TruthfulQA's incorrect answers)."""


@dataclass(frozen=True)
class Verdict:
    """Correctness of one answer; ``correct=None`` means it could not be labelled."""

    correct: bool | None
    rule: Rule | None
    evidence: dict[str, Any] = field(default_factory=dict)


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


def contains_gold(answer: str, golds: Sequence[str]) -> str | None:
    """The first gold string found in the answer as whole words (case-insensitive), or None."""
    text = _normalise(answer)
    for gold in golds:
        g = _normalise(gold)
        if g and re.search(r"(?<!\w)" + re.escape(g) + r"(?!\w)", text):
            return gold
    return None


def _unit(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    unit: np.ndarray = np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)
    return unit


def similarity_verdicts(items: Sequence[Labelled], embedder: CachedEmbedder) -> list[Verdict]:
    """TruthfulQA rule for items with both correct and incorrect references (all embedded once)."""
    texts = list(dict.fromkeys(t for i in items for t in (i.answer, *i.correct, *i.incorrect)))
    if not texts:
        return []
    unit = _unit(embedder.embed(texts))
    row = {t: k for k, t in enumerate(texts)}
    verdicts = []
    for item in items:
        a = unit[row[item.answer]]
        best_correct = float(max(unit[row[t]] @ a for t in item.correct))
        best_incorrect = float(max(unit[row[t]] @ a for t in item.incorrect))
        verdicts.append(
            Verdict(best_correct > best_incorrect, "tqa-similarity",
                    {"best_correct": best_correct, "best_incorrect": best_incorrect})
        )
    return verdicts


def judge_prompt(item: Labelled) -> str:
    """The judge's instruction; reference answers are shown when the dataset has them."""
    lines = [
        "You are grading an answer to a question. Decide whether the answer is factually correct.",
        "",
        f"Question: {item.question}",
    ]
    if item.correct:
        lines.append("Correct reference answers: " + "; ".join(item.correct))
    if item.incorrect:
        lines.append("Incorrect answers (for contrast): " + "; ".join(item.incorrect))
    lines += [
        f"Answer to grade: {item.answer}",
        "",
        "Reply with exactly one word: CORRECT or INCORRECT.",
    ]
    return "\n".join(lines)


def parse_verdict(text: str) -> bool | None:
    """CORRECT -> True, INCORRECT -> False (the first one said counts), anything else -> None."""
    match = _VERDICT.search(text.upper())
    if match is None:
        return None
    return match.group(1) == "CORRECT"


def judge_verdicts(
    items: Sequence[Labelled], client: LLMClient, sampling: Sampling = JUDGE_SAMPLING
) -> list[Verdict]:
    """Ask the judge about every answer in one batch; unparseable replies stay unlabelled."""
    requests = [GenRequest.user(judge_prompt(item), sampling) for item in items]
    replies = client.generate(requests, stage="validate: judge")
    verdicts = []
    for reply in replies:
        value = parse_verdict(reply.text)
        evidence = {"judge": client.spec, "reply": reply.text.strip()}
        verdicts.append(Verdict(value, "judge" if value is not None else None, evidence))
    return verdicts


def label_answers(
    items: Sequence[Labelled],
    embedder: CachedEmbedder | None = None,
    judge: LLMClient | None = None,
) -> list[Verdict]:
    """A verdict per answer: the judge if given, else the reference rule the item allows.

    Empty answers are incorrect without asking anyone; items with no references (and no judge)
    stay unlabelled.
    """
    verdicts: list[Verdict | None] = [None] * len(items)
    for k, item in enumerate(items):
        if not item.answer.strip():
            verdicts[k] = Verdict(False, "empty", {"reason": "empty answer"})
    todo = [k for k, v in enumerate(verdicts) if v is None]
    if judge is not None:
        for k, verdict in zip(todo, judge_verdicts([items[k] for k in todo], judge), strict=True):
            verdicts[k] = verdict
        return [v for v in verdicts if v is not None]
    similar = [k for k in todo if _rule(items[k]) == "tqa-similarity"]
    if similar:
        if embedder is None:
            raise ConfigError("the TruthfulQA rule needs an embedder")
        found = similarity_verdicts([items[k] for k in similar], embedder)
        for k, verdict in zip(similar, found, strict=True):
            verdicts[k] = verdict
    for k in todo:
        if verdicts[k] is None:
            if items[k].correct:
                gold = contains_gold(items[k].answer, items[k].correct)
                verdicts[k] = Verdict(gold is not None, "contains", {"matched": gold})
            else:
                verdicts[k] = Verdict(None, None, {"reason": "no reference answers"})
    return [v for v in verdicts if v is not None]


def _rule(item: Labelled) -> Rule | None:
    if item.correct and item.incorrect:
        return "tqa-similarity"
    if item.correct:
        return "contains"
    return None
