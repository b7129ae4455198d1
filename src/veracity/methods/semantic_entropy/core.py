"""Semantic entropy (Kuhn et al. 2023; Farquhar et al., Nature 2024): the entropy of the
meanings among M answers sampled at temperature T.

Answers are clustered greedily: each answer, in sample order, is compared with one member
(the first) of each cluster so far and joins the first cluster whose member it means the same
as (for NLI: each entails the other); else it starts a new cluster. Over clusters c of the M
answers (design §3.4):

- discrete SE          −Σ_c (|c|/M) log(|c|/M)
- likelihood-weighted  p(c) ∝ Σ_{s∈c} exp(mean log p(s)), normalised over the clusters;
                       SE = −Σ_c p(c) log p(c)

Natural logs; 0 = every answer means the same, log M = all differ. Larger = less trustworthy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from veracity.errors import ConfigError, DataError
from veracity.types import GenRequest, Sampling

FORMS = ("auto", "discrete", "likelihood")
"""Which entropy a record's score holds: ``auto`` = likelihood where log-probabilities exist."""


def discrete_entropy(clusters: Sequence[int]) -> float:
    """−Σ_c (|c|/M) log(|c|/M) over the cluster ids of M answers.

    >>> import math
    >>> discrete_entropy([0, 0, 0, 0])
    0.0
    >>> round(discrete_entropy([0, 0, 1, 2]), 6) == round(1.5 * math.log(2), 6)
    True
    """
    if not clusters:
        raise DataError("semantic entropy needs at least one answer")
    _, counts = np.unique(np.asarray(clusters), return_counts=True)
    p = counts / counts.sum()
    return float(max(0.0, -(p * np.log(p)).sum()))


def likelihood_entropy(clusters: Sequence[int], mean_logprobs: Sequence[float]) -> float:
    """−Σ_c p(c) log p(c) with p(c) ∝ Σ_{s∈c} exp(mean log p(s)).

    >>> import math
    >>> round(likelihood_entropy([0, 1], [math.log(0.5), math.log(0.5)]), 6) == round(math.log(2), 6)
    True
    """
    if len(clusters) != len(mean_logprobs) or not clusters:
        raise DataError("one mean log-probability per clustered answer is needed")
    values = np.asarray(mean_logprobs, dtype=np.float64)
    if np.isnan(values).any():
        raise DataError("mean log-probabilities must be numbers")
    weights = np.exp(values - values.max()) if np.isfinite(values.max()) else np.ones_like(values)
    ids = np.asarray(clusters)
    mass = np.array([weights[ids == c].sum() for c in np.unique(ids)])
    p = mass / mass.sum()
    p = p[p > 0]
    return float(max(0.0, -(p * np.log(p)).sum()))


Same = Callable[[Sequence[tuple[str, str, str]]], list[bool]]
"""Decides, for a batch of (question, answer a, answer b), whether a and b mean the same."""


def cluster_batches(questions: Sequence[str], answers: Sequence[Sequence[str]],
                    same: Same) -> list[list[int]]:
    """Greedy clustering of each question's answers, one batched ``same`` call per round:
    round j compares answer j of every question with the first member of each of its
    clusters (identical texts join without asking). Cluster ids count from 0 in order of
    appearance."""
    if len(questions) != len(answers):
        raise DataError("one list of answers per question is needed")
    ids: list[list[int]] = [[] for _ in answers]
    heads: list[list[int]] = [[] for _ in answers]  # index of each cluster's first member
    for j in range(max((len(a) for a in answers), default=0)):
        asked: list[tuple[int, int, tuple[str, str, str]]] = []
        for q, texts in enumerate(answers):
            if j >= len(texts):
                continue
            if j == 0:
                ids[q].append(0)
                heads[q].append(0)
                continue
            exact = next((c for c, h in enumerate(heads[q]) if texts[h] == texts[j]), None)
            if exact is not None:
                ids[q].append(exact)
                continue
            ids[q].append(-1)
            asked += [(q, c, (questions[q], texts[h], texts[j]))
                      for c, h in enumerate(heads[q])]
        verdicts = same([a for _, _, a in asked]) if asked else []
        if len(verdicts) != len(asked):
            raise DataError("the entailment check returned a wrong number of verdicts")
        joined: dict[int, int] = {}
        for (q, c, _), verdict in zip(asked, verdicts, strict=True):
            if verdict and q not in joined:
                joined[q] = c
        for q, texts in enumerate(answers):
            if j < len(texts) and ids[q][j] == -1:
                if q in joined:
                    ids[q][j] = joined[q]
                else:
                    ids[q][j] = len(heads[q])
                    heads[q].append(j)
    return ids


@dataclass(frozen=True)
class SemanticEntropySettings:
    """How answers are sampled and clustered; every field is recorded with the results."""

    m: int = 10
    temperature: float = 1.0
    max_tokens: int = 64
    seed: int = 0
    entailment: str = ""
    """An NLI pair scorer (``nli/PATH``, ``cross-encoder/PATH``, ``hf/PATH`` of a
    sequence-classification model) or a judge model spec; empty = the embedder."""
    threshold: float = 0.5
    """NLI: P(entailment) at or above which one answer entails the other."""
    cosine: float = 0.9
    """Embedder clustering: cosine at or above which two answers mean the same."""
    form: str = "auto"

    def __post_init__(self) -> None:
        if self.m < 2:
            raise ConfigError("semantic entropy needs at least two samples (M >= 2)")
        if self.temperature <= 0:
            raise ConfigError("semantic entropy samples at temperature > 0")
        if self.max_tokens < 1:
            raise ConfigError("max_tokens must be >= 1")
        if not 0 < self.threshold <= 1 or not -1 <= self.cosine <= 1:
            raise ConfigError("the entailment threshold is in (0, 1], the cosine in [-1, 1]")
        if self.form not in FORMS:
            raise ConfigError(f"form: choose one of {', '.join(FORMS)}")

    def sample_request(self, question: str, index: int, logprobs: bool) -> GenRequest:
        """Sample ``index`` (1..M) of a question; with its tokens' log-probabilities for the
        likelihood form."""
        return GenRequest.user(
            question, Sampling(temperature=self.temperature, max_tokens=self.max_tokens,
                               seed=self.seed),
            sample_index=index, logprobs=0 if logprobs else None)

    def describe(self) -> dict[str, object]:
        return {"m": self.m, "temperature": self.temperature, "max_tokens": self.max_tokens,
                "seed": self.seed, "entailment": self.entailment or "embedder",
                "threshold": self.threshold, "cosine": self.cosine, "form": self.form,
                "higher_is_better": False}
