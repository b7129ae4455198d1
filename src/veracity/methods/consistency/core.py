"""Sampling self-consistency baseline: how close M sampled answers stay to the greedy one.

As UQLM's cosine scorer (``cosine_sim``, "normalized cosine similarity"): the mean cosine of
the greedy answer's embedding to the embeddings of M answers sampled at temperature > 0 from
the same, unperturbed prompt, mapped to [0, 1] by (cos + 1) / 2. Higher = more confident; to
flag incorrect answers use 1 - score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from veracity.client import CachedEmbedder, LLMClient
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.types import GenRequest, Sampling


@dataclass(frozen=True)
class ConsistencySettings:
    """How the baseline samples; every field is recorded with the results."""

    m: int = 5
    """Sampled answers per prompt (sample_index 1..M, so each gets its own seed)."""
    temperature: float = 0.7
    """Sampling temperature; must be > 0 or every sample is the greedy answer."""
    max_tokens: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        if self.m < 1:
            raise ConfigError("the consistency baseline needs at least one sample (M >= 1)")
        if self.temperature <= 0:
            raise ConfigError("the consistency baseline samples at temperature > 0")

    @property
    def sampling(self) -> Sampling:
        return Sampling(temperature=self.temperature, max_tokens=self.max_tokens, seed=self.seed)

    def describe(self) -> JsonObject:
        return {"scorer": "cosine (UQLM normalized cosine similarity)", "m": self.m,
                "temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed}


def cosines(centre: npt.ArrayLike, samples: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Cosine of centre (d,) to each sample (M, d), in [-1, 1]; a zero vector has cosine 0."""
    c = np.asarray(centre, dtype=np.float64)
    s = np.atleast_2d(np.asarray(samples, dtype=np.float64))
    norms = np.linalg.norm(s, axis=1) * np.linalg.norm(c)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(norms > 0, (s @ c) / norms, 0.0)
    return np.asarray(np.clip(cos, -1.0, 1.0), dtype=np.float64)


def normalized_cosine(centre: npt.ArrayLike, samples: npt.ArrayLike) -> float:
    """(mean cosine of centre (d,) to each sample (M, d) + 1) / 2; a zero vector has cosine 0."""
    return float((cosines(centre, samples).mean() + 1.0) / 2.0)


def sample_requests(prompts: Sequence[str], settings: ConsistencySettings) -> list[GenRequest]:
    """M sampled requests per prompt, prompt-major."""
    return [
        GenRequest.user(prompt, settings.sampling, sample_index=i)
        for prompt in prompts
        for i in range(1, settings.m + 1)
    ]


@dataclass(frozen=True)
class ConsistencyScore:
    """The baseline for one prompt: score in [0, 1] (None for an empty greedy answer)."""

    score: float | None
    greedy: str
    samples: tuple[str, ...]
    cosines: tuple[float, ...] = ()
    """Cosine of each sample to the greedy answer (empty when unscored)."""


def consistency_scores(
    prompts: Sequence[str],
    client: LLMClient,
    embedder: CachedEmbedder,
    settings: ConsistencySettings = ConsistencySettings(),
    greedy: Sequence[str] | None = None,
) -> list[ConsistencyScore]:
    """Score every prompt; pass ``greedy`` to reuse answers already generated at temperature 0."""
    if greedy is None:
        plain = Sampling(temperature=0.0, max_tokens=settings.max_tokens)
        replies = client.generate([GenRequest.user(p, plain) for p in prompts],
                                  stage="baseline: greedy")
        greedy = [g.text.strip() for g in replies]
    if len(greedy) != len(prompts):
        raise ConfigError("one greedy answer per prompt is needed")
    replies = client.generate(sample_requests(prompts, settings), stage="baseline: samples")
    texts = [g.text.strip() for g in replies]
    groups = [tuple(texts[k * settings.m : (k + 1) * settings.m]) for k in range(len(prompts))]
    vectors = embedder.embed([*greedy, *texts]) if prompts else np.zeros((0, 0))
    n = len(prompts)
    out = []
    for k, (answer, group) in enumerate(zip(greedy, groups, strict=True)):
        value: float | None = None
        each: tuple[float, ...] = ()
        if answer.strip():
            found = cosines(vectors[k], vectors[n + k * settings.m : n + (k + 1) * settings.m])
            value = float((found.mean() + 1.0) / 2.0)
            value, each = (None, ()) if math.isnan(value) else (value, tuple(map(float, found)))
        out.append(ConsistencyScore(value, answer, group, each))
    return out
