"""Harmonic gamma as an inspect_ai scorer: any task's answers get a stability score.

The scorer re-asks the task's own model (through inspect's model API, so caching, retries and
concurrency are inspect's) the sample's last user turn with N perturbations, embeds the
sample's answer and the perturbed answers, and scores gamma exactly as ``veracity gamma``
does (:func:`veracity.methods.gamma.core.gamma_from_embeddings`, the same ball and seed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import anyio
from inspect_ai.model import ChatMessage, ChatMessageAssistant, ChatMessageUser, GenerateConfig, get_model
from inspect_ai.scorer import Metric, SampleScore, Score, Scorer, Target, metric, scorer, value_to_float
from inspect_ai.solver import TaskState
from inspect_ai.util import collect

from veracity.checks import MAX_N
from veracity.embed.base import Embedder
from veracity.errors import ConfigError, VeracityError
from veracity.methods.gamma.calibration.trust import check_thresholds, default_thresholds, verdict
from veracity.methods.gamma.core import FORMS, Form, check_prompt, gamma_from_embeddings
from veracity.perturb import perturb, resolve_ball
from veracity.registry import load_embedder
from veracity.stats import auroc


@dataclass(frozen=True)
class Prompt:
    """The turns before the scored answer: the context and the user prompt that was answered."""

    context: list[ChatMessage]
    text: str


def answered_prompt(messages: list[ChatMessage]) -> Prompt:
    """The last user turn before the final answer, and what came before it; a VeracityError
    when it is not plain text (an image, a tool result)."""
    turns = list(messages)
    while turns and isinstance(turns[-1], ChatMessageAssistant):
        turns.pop()
    if not turns or not isinstance(turns[-1], ChatMessageUser):
        raise ConfigError("the answer does not follow a user turn: nothing to perturb")
    last = turns[-1]
    if not isinstance(last.content, str) and any(c.type != "text" for c in last.content):
        raise ConfigError("the user turn is not plain text: only text prompts can be perturbed")
    check_prompt(last.text, "the sample's user turn")
    return Prompt(turns[:-1], last.text)


def correctness(state: TaskState, name: str | None) -> float | None:
    """The task's own correctness score of this sample (an earlier scorer), if any: the
    scorer called ``name``, or the first earlier score with a numeric reading."""
    scores = state.scores or {}
    if name is not None:
        chosen = scores.get(name)
        candidates = [] if chosen is None else [chosen]
    else:
        candidates = list(scores.values())
    to_float = value_to_float()
    for score in candidates:
        if isinstance(score.value, str | int | float | bool):
            value = to_float(score.value)
            if not math.isnan(value):
                return value
    return None


@metric
def gamma_mean() -> Metric:
    """Mean gamma of the scored answers (unscored ones left out)."""

    def compute(scores: list[SampleScore]) -> float:
        values = _gammas(scores)
        return sum(values) / len(values) if values else math.nan

    return compute


@metric
def share_below_threshold() -> Metric:
    """Share of scored answers whose gamma is below the scorer's threshold (the paper's
    "certified trustworthy" at 0.05)."""

    def compute(scores: list[SampleScore]) -> float:
        below = [bool(s.score.metadata["below_threshold"]) for s in scores
                 if s.score.metadata and s.score.metadata.get("below_threshold") is not None]
        return sum(below) / len(below) if below else math.nan

    return compute


@metric
def gamma_auroc() -> Metric:
    """AUROC of gamma against the task's own correctness: P(gamma of an incorrect answer >
    gamma of a correct one), ties 1/2; NaN without both kinds of answers or without a target."""

    def compute(scores: list[SampleScore]) -> float:
        pairs = [(float(s.score.as_float()), float(s.score.metadata["correct"])) for s in scores
                 if s.score.metadata and s.score.metadata.get("correct") is not None
                 and not math.isnan(s.score.as_float())]
        if not pairs:
            return math.nan
        return auroc([g for g, _ in pairs], [c < 0.5 for _, c in pairs])

    return compute


def _gammas(scores: list[SampleScore]) -> list[float]:
    values = []
    for s in scores:
        value = s.score.value
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            values.append(float(value))
    return values


class _Embedding:
    """The embedder, loaded once on first use (off the event loop: loading a model blocks)."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self._embedder: Embedder | None = None
        self._lock = anyio.Lock()

    async def vectors(self, texts: list[str]) -> Any:
        async with self._lock:
            if self._embedder is None:
                self._embedder = await anyio.to_thread.run_sync(load_embedder, self.spec)
        embedder = self._embedder
        return await anyio.to_thread.run_sync(embedder.embed, texts)


@scorer(metrics=[gamma_mean(), share_below_threshold(), gamma_auroc()])
def gamma_scorer(
    n: int = 10,
    ball: str = "ascii-control",
    embedder: str = "st/default",
    threshold: float = 0.05,
    form: str = "sin",
    seed: int = 0,
    temperature: float | None = 0.0,
    max_tokens: int | None = None,
    thresholds: tuple[float, float] | None = None,
    correctness_scorer: str | None = None,
) -> Scorer:
    """Gamma of each sample's answer from ``n`` perturbed re-asks of the task's model.

    Args:
        n: perturbed prompts per answer (the paper's 10).
        ball: perturbation family (:mod:`veracity.perturb`), seeded with ``seed`` as in
            ``veracity gamma``.
        embedder: veracity embedder spec (``st/default``, ``hash/256``, ...).
        threshold: gamma below this counts towards ``share_below_threshold``.
        form: ``sin`` (the paper) or ``paper-code`` (the authors' code).
        seed: seed of the ball and of the perturbed calls.
        temperature: of the perturbed calls (the paper's 0); None: the task's own.
        max_tokens: of the perturbed calls; None: the task's own.
        thresholds: (low, high) of the verdict; default: the authors' 0.1 / 0.2 in ``form``.
        correctness_scorer: name of the task's scorer whose value is correctness (for
            ``gamma_auroc``); default: the first earlier scorer with a numeric value.
    """
    if not 1 <= n <= MAX_N:
        raise ConfigError(f"n must be between 1 and {MAX_N}, got {n}")
    resolve_ball(ball)
    if form not in FORMS:
        raise ConfigError(f"unknown gamma form '{form}'; known: {', '.join(FORMS)}")
    if not 0.0 < threshold <= 2.0:
        raise ConfigError(f"threshold must be in (0, 2], got {threshold}")
    gamma_form: Form = "sin" if form == "sin" else "paper-code"
    buckets = check_thresholds(thresholds) if thresholds is not None else default_thresholds(gamma_form)
    embedding = _Embedding(embedder)
    config = GenerateConfig(temperature=temperature, max_tokens=max_tokens, seed=seed)

    async def score(state: TaskState, target: Target) -> Score:
        answer = state.output.completion.strip()
        settings: dict[str, Any] = {"form": form, "n": n, "ball": ball, "seed": seed,
                                    "embedder": embedder, "threshold": threshold,
                                    "thresholds": list(buckets)}
        correct = correctness(state, correctness_scorer) if target.text else None
        try:
            prompt = answered_prompt(state.messages)
        except VeracityError as exc:
            return Score.unscored(reason="error", answer=answer, explanation=f"unscored: {exc}",
                                  metadata=settings | {"verdict": "unscored", "correct": correct})
        ball_prompts = perturb(prompt.text, n, ball, seed)
        model = get_model()
        outputs = await collect(*(model.generate([*prompt.context, ChatMessageUser(content=p)],
                                                 config=config) for p in ball_prompts))
        perturbed = [o.completion.strip() for o in outputs]
        meta = settings | {"perturbed_prompts": ball_prompts, "perturbed_answers": perturbed,
                           "correct": correct}
        value = math.nan
        if answer:
            vectors = await embedding.vectors([answer, *perturbed])
            value = gamma_from_embeddings(vectors[0], vectors[1:], gamma_form)
        if math.isnan(value):
            return Score.unscored(reason="error", answer=answer,
                                  explanation="unscored: gamma is undefined for an empty answer",
                                  metadata=meta | {"verdict": "unscored", "below_threshold": None})
        judged = verdict(value, buckets)
        return Score(value=value, answer=answer,
                     explanation=f"{judged} (gamma {value:.4f}, {form}; verdict thresholds "
                                 f"{buckets[0]:.3f} / {buckets[1]:.3f})",
                     metadata=meta | {"verdict": judged, "gamma": value,
                                      "below_threshold": value < threshold})

    return score
