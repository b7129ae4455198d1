"""The paper's Figures 2 and 3 from a judge model, on labelled questions.

- Figure 2: each question paired with the gold answers of its ten nearest neighbour questions;
  a judge says whether each mismatched answer answers the question. The distribution of how
  many are judged correct per question shows why the laziness penalty may treat neighbours'
  answers as wrong for the question.
- Figure 3: each reference answer rated 0 (wrong), 1 (partly right) or 2 (right) by the judge;
  the distribution per reference.

The judge sees the question's own gold answer as the reference (our choice: the paper does not
give its judging prompt); prompts are our own wording.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from veracity.client import LLMClient
from veracity.correctness import Labelled, judge_verdicts
from veracity.errors import BackendError
from veracity.methods.fewl.core import select_neighbours
from veracity.types import GenRequest, Sampling

FIGURE_TWO_NEIGHBOURS = 10
RATING_PROMPT = (
    "You are rating an answer to a question against a reference answer.\n\n"
    "Question: {question}\n"
    "Reference answer: {gold}\n"
    "Answer to rate: {answer}\n\n"
    "Reply with one digit: 2 if the answer is right, 1 if it is partly right or right but "
    "incomplete, 0 if it is wrong or does not answer the question."
)
_DIGIT = re.compile(r"(?<!\d)([012])(?!\d)")


def parse_rating(text: str) -> int | None:
    """The first lone digit 0, 1 or 2 in a judge's reply; None when there is none."""
    found = _DIGIT.search(text)
    return None if found is None else int(found.group(1))


def count_histogram(counts: Sequence[int | None], top: int) -> list[int]:
    """How many questions have 0, 1, ..., top judged-correct answers (None left out).

    >>> count_histogram([0, 2, 2, None, 1], 3)
    [1, 1, 2, 0]
    """
    out = [0] * (top + 1)
    for c in counts:
        if c is not None:
            out[c] += 1
    return out


def figure_two(judge: LLMClient, questions: Sequence[str], golds: Sequence[str],
               vectors: npt.ArrayLike, near_duplicate: float,
               k: int = FIGURE_TWO_NEIGHBOURS) -> dict[str, Any]:
    """Per question, how many of its k nearest neighbours' gold answers the judge accepts."""
    nb = select_neighbours(vectors, k, near_duplicate)
    slots = [(i, int(j)) for i in range(len(questions))
             for j, ok in zip(nb.index[i], nb.mask[i], strict=True) if ok]
    verdicts = judge_verdicts([Labelled(questions[i], golds[j], (golds[i],)) for i, j in slots],
                              judge) if slots else []
    correct: list[list[bool | None]] = [[] for _ in questions]
    for (i, _), verdict in zip(slots, verdicts, strict=True):
        correct[i].append(verdict.correct)
    counts = [None if not row or any(v is None for v in row) else sum(bool(v) for v in row)
              for row in correct]
    judged = [c for c in counts if c is not None]
    return {"k": k, "judge": judge.spec, "per_question": counts,
            "histogram": count_histogram(counts, k),
            "mean_correct": float(np.mean(judged)) if judged else None,
            "n_questions": len(judged),
            "unjudged": sum(1 for c in counts if c is None)}


def figure_three(judge: LLMClient, questions: Sequence[str], golds: Sequence[str],
                 references: Sequence[Sequence[str]], names: Sequence[str]) -> dict[str, Any]:
    """Each reference answer rated 0 / 1 / 2; per reference slot the count of each rating."""
    slots = [(i, j) for i, row in enumerate(references) for j, text in enumerate(row)
             if text.strip()]
    sampling = Sampling(temperature=0.0, max_tokens=8)
    requests = [GenRequest.user(RATING_PROMPT.format(question=questions[i], gold=golds[i],
                                                     answer=references[i][j]), sampling)
                for i, j in slots]
    replies = judge.generate_each(requests, "fewl: figure 3 ratings") if requests else []
    per: dict[str, dict[str, Any]] = {}
    for (_, j), reply in zip(slots, replies, strict=True):
        rating = None if isinstance(reply, BackendError) else parse_rating(reply.text)
        name = names[j] if j < len(names) else f"#{j}"
        entry = per.setdefault(name, {"counts": [0, 0, 0], "unrated": 0})
        if rating is None:
            entry["unrated"] += 1
        else:
            entry["counts"][rating] += 1
    for entry in per.values():
        n = sum(entry["counts"])
        entry["mean"] = (entry["counts"][1] + 2 * entry["counts"][2]) / n if n else None
    return {"judge": judge.spec, "references": per}
