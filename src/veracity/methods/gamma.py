"""Harmonic gamma (Kersting et al. 2024, Algorithm 1): stability of an answer under a ball.

y0 = f(x), y_i = f(x + p_i); v0 = E(y0), b = sum_i E(y_i); gamma = sin angle(v0, b).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from veracity.checks import MAX_N, check_count, check_number
from veracity.client import CachedEmbedder, LLMClient
from veracity.errors import BackendError, ConfigError, ErrorKind
from veracity.methods.paraphrase import PARAPHRASE, paraphrase_ball
from veracity.perturb import perturb
from veracity.stats import histogram, mean_stderr
from veracity.text import lone_surrogate
from veracity.types import Generation, GenRequest, Item, Sampling

Form = Literal["sin", "paper-code"]
FORMS: tuple[Form, ...] = ("sin", "paper-code")
_SNAP = 1e-12  # |cos| this close to 1 is exactly parallel: identical answers give gamma = 0


def gamma_batch(
    centres: npt.ArrayLike, perturbed: npt.ArrayLike, form: Form = "sin"
) -> npt.NDArray[np.float64]:
    """Gamma for m items at once: centres (m, d), perturbed (m, N, d) -> (m,).

    ``sin``: sqrt(1 - cos^2), the paper's definition. ``paper-code``: sqrt(1 - cos), what the
    authors' released code computes. Undefined (a zero vector) gives NaN.
    """
    if form not in FORMS:
        raise ConfigError(f"unknown gamma form '{form}'; known: {', '.join(FORMS)}")
    v0 = np.asarray(centres, dtype=np.float64)
    b = np.asarray(perturbed, dtype=np.float64).sum(axis=1)
    norms = np.linalg.norm(v0, axis=1) * np.linalg.norm(b, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.einsum("md,md->m", v0, b) / norms
    cos = np.clip(cos, -1.0, 1.0)
    cos = np.where(np.abs(1.0 - np.abs(cos)) < _SNAP, np.sign(cos), cos)
    gamma = np.sqrt(1.0 - cos**2) if form == "sin" else np.sqrt(1.0 - cos)
    return np.where(norms > 0, gamma, np.nan)


def gamma_from_embeddings(
    centre: npt.ArrayLike, perturbed: npt.ArrayLike, form: Form = "sin"
) -> float:
    """Gamma of one answer: centre (d,), perturbed (N, d)."""
    c = np.asarray(centre, dtype=np.float64)[None, :]
    p = np.asarray(perturbed, dtype=np.float64)[None, :, :]
    return float(gamma_batch(c, p, form)[0])


EMBEDDING = "embedding"
"""The white-box ball (:mod:`veracity.methods.whitebox`): needs a backend with input embeddings."""


@dataclass(frozen=True)
class GammaSettings:
    """How gamma is measured; every field is recorded with the results."""

    n: int = 10
    """Number of perturbed prompts (ball points)."""
    ball: str = "ascii-control"
    """Perturbation family, see :mod:`veracity.perturb`."""
    seed: int = 0
    """Seed of the ball."""
    form: Form = "sin"
    """``sin`` (paper) or ``paper-code`` (authors' code, sqrt(1 - cos))."""
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=64))
    """Decoding for every call; the paper uses temperature 0."""
    threshold: float = 0.05
    """gamma below this counts as "certified trustworthy" in the aggregates."""
    paraphraser: str | None = None
    """Model spec that writes the ``paraphrase`` ball (None: the model under test)."""
    radius: float = 1.0
    """``embedding`` ball only: L2 distance of each perturbed token embedding."""
    shape: str = "sphere"
    """``embedding`` ball only: ``sphere`` or ``simplex``."""
    scope: str = "question"
    """``embedding`` ball only: perturb the ``question`` tokens or ``all`` prompt tokens."""
    allow_large_n: bool = False
    """Allow more than MAX_N perturbed prompts per question (each is a model call)."""
    control: str | None = None
    """``numeric``: also answer each question along N compute paths and score gamma_null."""

    def __post_init__(self) -> None:
        check_count("n", self.n, MAX_N, self.allow_large_n)
        check_number("threshold", self.threshold, 0.0, 2.0, low_open=True)
        check_number("radius", self.radius, 0.0)

    def describe(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"paraphraser": self.paraphraser} if self.ball == PARAPHRASE else {}
        if self.ball == EMBEDDING:
            extra = {"radius": self.radius, "shape": self.shape, "scope": self.scope}
        if self.control is not None:
            extra["control"] = self.control
        return {
            "n": self.n,
            "ball": self.ball,
            "seed": self.seed,
            "form": self.form,
            "threshold": self.threshold,
            "temperature": self.sampling.temperature,
            "max_tokens": self.sampling.max_tokens,
        } | extra


def check_prompt(prompt: str, where: str) -> None:
    """A prompt must be non-empty text: no lone surrogate (a command-line argument with bytes
    that are not UTF-8 arrives as one), which no model or file could take."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError(f"empty prompt ({where}): nothing to ask the model")
    bad = lone_surrogate(prompt)
    if bad is not None:
        code = ord(prompt[bad])
        what = (f"the byte 0x{code - 0xDC00:02x}, which is not UTF-8" if 0xDC80 <= code <= 0xDCFF
                else f"a lone UTF-16 surrogate (\\u{code:04x})")
        raise ConfigError(f"{where}: character {bad + 1} is {what}; give the prompt as UTF-8 text")


def score_answers(
    answers: Sequence[str],
    perturbed_answers: Sequence[Sequence[str]],
    embedder: CachedEmbedder,
    form: Form = "sin",
) -> list[float | None]:
    """Gamma of each answer from its perturbed answers; None where the answer is empty."""
    n_points = {len(p) for p in perturbed_answers}
    if len(n_points) > 1 or 0 in n_points:
        # ragged balls: score one by one
        return [
            _one(a, p, embedder, form) for a, p in zip(answers, perturbed_answers, strict=True)
        ]
    texts = list(answers) + [t for group in perturbed_answers for t in group]
    vectors = embedder.embed(texts)
    m = len(answers)
    if m == 0:
        return []
    centres = vectors[:m]
    perturbed = vectors[m:].reshape(m, n_points.pop(), -1)
    values = gamma_batch(centres, perturbed, form)
    return [
        None if not a.strip() or math.isnan(g) else float(g)
        for a, g in zip(answers, values, strict=True)
    ]


def perturbed_cosines(
    answers: Sequence[str], perturbed_answers: Sequence[Sequence[str]], embedder: CachedEmbedder
) -> list[list[float | None]]:
    """Cosine of each perturbed answer to its original answer (None where either is empty).

    The embeddings are the ones gamma used: the embedder holds them in memory, so this costs
    no second embedding call.
    """
    out: list[list[float | None]] = []
    for answer, perturbed in zip(answers, perturbed_answers, strict=True):
        if not answer.strip() or not perturbed:
            out.append([None] * len(perturbed))
            continue
        vectors = np.asarray(embedder.embed([answer, *perturbed]), dtype=np.float64)
        norms = np.linalg.norm(vectors, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = np.clip(vectors[1:] @ vectors[0] / (norms[1:] * norms[0]), -1.0, 1.0)
        out.append([None if not text.strip() or math.isnan(c) else float(c)
                    for text, c in zip(perturbed, cos, strict=True)])
    return out


def _one(answer: str, perturbed: Sequence[str], embedder: CachedEmbedder, form: Form) -> float | None:
    if not answer.strip() or not perturbed:
        return None
    vectors = embedder.embed([answer, *perturbed])
    value = gamma_from_embeddings(vectors[0], vectors[1:], form)
    return None if math.isnan(value) else value


def measure_gamma(
    items: Sequence[Item],
    client: LLMClient,
    embedder: CachedEmbedder,
    settings: GammaSettings = GammaSettings(),
    paraphraser: LLMClient | None = None,
) -> list[dict[str, Any]]:
    """Ask every question N+1 times in one batch, embed, and score; one record per item.

    The ``paraphrase`` ball is written first, in its own stage, by ``paraphraser`` (default:
    the model under test).
    """
    for item in items:
        check_prompt(item.question, f"item {item.id}")
    if settings.ball == PARAPHRASE:
        questions = [item.question for item in items]
        balls = paraphrase_ball(questions, paraphraser or client, settings.n, settings.seed)
    else:
        balls = [perturb(item.question, settings.n, settings.ball, settings.seed) for item in items]
    requests = []
    for item, ball in zip(items, balls, strict=True):
        requests.append(GenRequest.user(item.question, settings.sampling))
        requests.extend(GenRequest.user(p, settings.sampling) for p in ball)
    generations = client.generate_each(requests, stage="gamma: answers")
    texts = [g.text.strip() if isinstance(g, Generation) else "" for g in generations]
    stride = settings.n + 1
    groups = [generations[i * stride : (i + 1) * stride] for i in range(len(items))]
    failures = [next((g for g in group if isinstance(g, BackendError)), None) for group in groups]
    # an item the model rejected is not scored (its answer, if any, is kept); the others go on
    answers = [texts[i * stride] for i in range(len(items))]
    perturbed = [texts[i * stride + 1 : (i + 1) * stride] for i in range(len(items))]
    gammas = score_answers(answers, perturbed, embedder, settings.form)
    gammas = [None if failed else g for g, failed in zip(gammas, failures, strict=True)]
    records = []
    for item, ball, answer, others, value, failed, group in zip(
        items, balls, answers, perturbed, gammas, failures, groups, strict=True
    ):
        record = gamma_record(item, answer, ball, others, value, settings, client.spec,
                              embedder.spec)
        if failed:
            record["error"] = f"{failed.kind.label}: {failed}"
            record["error_kind"] = failed.kind.value
        record["replaced_chars"] = sum(g.replaced_chars for g in group if isinstance(g, Generation))
        records.append(record)
    for record, cosines in zip(records, perturbed_cosines(answers, perturbed, embedder), strict=True):
        record["perturbed_cosines"] = cosines
    return records


def gamma_record(
    item: Item,
    answer: str,
    perturbed_prompts: Sequence[str],
    perturbed_answers: Sequence[str],
    value: float | None,
    settings: GammaSettings,
    model: str,
    embedder: str,
) -> dict[str, Any]:
    """The per-item record written to samples.jsonl and printed by ``--json``."""
    return {
        "id": item.id,
        "prompt": item.question,
        "answer": answer,
        "gamma": value,
        "form": settings.form,
        "n": len(perturbed_answers),
        "ball": settings.ball,
        "seed": settings.seed,
        "model": model,
        "embedder": embedder,
        "perturbed_prompts": list(perturbed_prompts),
        "perturbed_answers": list(perturbed_answers),
        "references": list(item.references),
        "metadata": dict(item.metadata),
        "error": None if value is not None else "empty answer: gamma is undefined",
        "error_kind": None if value is not None else ErrorKind.UNDEFINED.value,
    }


def aggregate(records: Sequence[dict[str, Any]], threshold: float = 0.05) -> dict[str, Any]:
    """Mean +- standard error, median, share below the threshold, histogram."""
    values = [r["gamma"] for r in records if r.get("gamma") is not None]
    mean, se = mean_stderr(values)
    arr = np.asarray(values, dtype=np.float64)
    return {
        "n_items": len(records),
        "n_scored": len(values),
        "n_unscored": len(records) - len(values),
        "mean": mean,
        "stderr": se,
        "median": float(np.median(arr)) if arr.size else math.nan,
        "threshold": threshold,
        "share_below_threshold": float((arr < threshold).mean()) if arr.size else math.nan,
        "histogram": histogram(values, bins=20, upper=max(1.0, float(arr.max()) if arr.size else 1.0)),
    }
