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
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from veracity.client import LLMClient
from veracity.correctness import Labelled, judge_verdicts
from veracity.errors import BackendError
from veracity.methods.fewl.core import Neighbours, select_neighbours
from veracity.methods.fewl.records import FigureThree, FigureTwo, ReferenceRating
from veracity.types import GenRequest, Sampling

FIGURE_TWO_NEIGHBOURS = 10


@dataclass
class _Tally:
    counts: list[int] = field(default_factory=lambda: [0, 0, 0])
    unrated: int = 0
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
               k: int = FIGURE_TWO_NEIGHBOURS) -> FigureTwo:
    """Per question, how many of its k nearest neighbours' gold answers the judge accepts."""
    nb = select_neighbours(vectors, k, near_duplicate)
    return figure_two_data(judge.spec, judged_neighbours(judge, questions, golds, 0, nb), k)


def judged_neighbours(judge: LLMClient, questions: Sequence[str], golds: Sequence[str],
                      first: int, nb: Neighbours) -> list[int | None]:
    """For questions first, first + 1, ... (whose neighbours ``nb`` holds), how many
    neighbours' gold answers the judge accepts; None where a verdict is missing. One batched
    judge call; ``questions`` and ``golds`` are indexed by question number."""
    rows = nb.index.shape[0]
    slots = [(i, int(j)) for i in range(rows)
             for j, ok in zip(nb.index[i], nb.mask[i], strict=True) if ok]
    verdicts = judge_verdicts([Labelled(questions[first + i], golds[j], (golds[first + i],))
                               for i, j in slots], judge) if slots else []
    correct: list[list[bool | None]] = [[] for _ in range(rows)]
    for (i, _), verdict in zip(slots, verdicts, strict=True):
        correct[i].append(verdict.correct)
    return [None if not row or any(v is None for v in row) else sum(bool(v) for v in row)
            for row in correct]


def figure_two_data(judge: str, counts: Sequence[int | None], k: int) -> FigureTwo:
    """Figure 2's results from every question's count of accepted neighbour answers."""
    judged = [c for c in counts if c is not None]
    return FigureTwo(k, judge, tuple(counts), tuple(count_histogram(counts, k)),
                     float(np.mean(judged)) if judged else None, len(judged),
                     sum(1 for c in counts if c is None))


def figure_three(judge: LLMClient, questions: Sequence[str], golds: Sequence[str],
                 references: Sequence[Sequence[str]], names: Sequence[str]) -> FigureThree:
    """Each reference answer rated 0 / 1 / 2; per reference slot the count of each rating."""
    ratings = ReferenceRatings(judge)
    ratings.add(questions, golds, references, names)
    return ratings.result()


class ReferenceRatings:
    """Figure 3's counts, added a chunk of questions at a time (one batched judge call each)."""

    def __init__(self, judge: LLMClient) -> None:
        self.judge = judge
        self.per: dict[str, _Tally] = {}

    def add(self, questions: Sequence[str], golds: Sequence[str],
            references: Sequence[Sequence[str]], names: Sequence[str]) -> None:
        """Rate the non-empty references of these questions."""
        slots = [(i, j) for i, row in enumerate(references) for j, text in enumerate(row)
                 if text.strip()]
        sampling = Sampling(temperature=0.0, max_tokens=8)
        requests = [GenRequest.user(RATING_PROMPT.format(question=questions[i], gold=golds[i],
                                                         answer=references[i][j]), sampling)
                    for i, j in slots]
        replies = self.judge.generate_each(requests, "fewl: figure 3 ratings") if requests else []
        for (_, j), reply in zip(slots, replies, strict=True):
            rating = None if isinstance(reply, BackendError) else parse_rating(reply.text)
            name = names[j] if j < len(names) else f"#{j}"
            entry = self.per.setdefault(name, _Tally())
            if rating is None:
                entry.unrated += 1
            else:
                entry.counts[rating] += 1

    def result(self) -> FigureThree:
        """Figure 3's results: counts, unrated and mean rating per reference slot."""
        per: dict[str, ReferenceRating] = {}
        for name, entry in self.per.items():
            zero, one, two = entry.counts
            n = zero + one + two
            per[name] = ReferenceRating((zero, one, two), entry.unrated,
                                        (one + 2 * two) / n if n else None)
        return FigureThree(self.judge.spec, per)
