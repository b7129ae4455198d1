"""Real-time trust score: gamma of one answer from very few perturbed calls, and a verdict.

With ``n = 1`` a score costs one perturbed generation (two when the answer is not given) and
one embedding batch. The verdict buckets gamma with two thresholds ``(low, high)``:
below ``low`` "trustworthy", below ``high`` "uncertain", otherwise "untrustworthy";
"unscored" when gamma is undefined (an empty answer).

The authors' released tester uses the buckets 0.1 / 0.2 for *its* form of gamma,
sqrt(1 - cos) (``paper-code``). The default thresholds are those buckets expressed in the
chosen form: (0.1, 0.2) for ``paper-code``, (0.141, 0.280) for ``sin`` (same cosines).
Small N makes gamma noisy: treat the verdict as a triage signal, and use N = 10 to measure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from veracity.client import CachedEmbedder, LLMClient
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.calibration.core import Curve
from veracity.methods.gamma.core import FORMS, Form, check_prompt, score_answers
from veracity.methods.gamma.paraphrase import PARAPHRASE, paraphrase_ball
from veracity.perturb import perturb
from veracity.types import GenRequest, Message, Sampling

Verdict = Literal["trustworthy", "uncertain", "untrustworthy", "unscored"]
AUTHORS_THRESHOLDS = (0.1, 0.2)
"""The authors' tester buckets, for the ``paper-code`` form sqrt(1 - cos)."""
AUTHORS_SOURCE = "authors' 0.1 / 0.2 buckets"


def convert_threshold(value: float, source: Form, target: Form) -> float:
    """The same cosine expressed in another gamma form (assumes cos >= 0).

    >>> round(convert_threshold(0.1, "paper-code", "sin"), 4)
    0.1411
    """
    for form in (source, target):
        if form not in FORMS:
            raise ConfigError(f"unknown gamma form '{form}'; known: {', '.join(FORMS)}")
    if source == target:
        return value
    if source == "paper-code":
        cos = 1.0 - value**2
        return math.sqrt(max(0.0, 1.0 - cos**2))
    cos = math.sqrt(max(0.0, 1.0 - value**2))
    return math.sqrt(1.0 - cos)


def default_thresholds(form: Form) -> tuple[float, float]:
    """The authors' 0.1 / 0.2 buckets expressed in ``form``."""
    low, high = AUTHORS_THRESHOLDS
    return convert_threshold(low, "paper-code", form), convert_threshold(high, "paper-code", form)


def check_thresholds(thresholds: Sequence[float]) -> tuple[float, float]:
    if len(thresholds) != 2:
        raise ConfigError(f"thresholds must be two numbers (low, high), got {list(thresholds)}")
    low, high = float(thresholds[0]), float(thresholds[1])
    if not 0.0 <= low <= high:
        raise ConfigError(f"thresholds must satisfy 0 <= low <= high, got ({low}, {high})")
    return low, high


def verdict(gamma: float | None, thresholds: Sequence[float]) -> Verdict:
    """The bucket of a gamma value: [0, low) trustworthy, [low, high) uncertain, else not."""
    low, high = check_thresholds(thresholds)
    if gamma is None or math.isnan(gamma):
        return "unscored"
    if gamma < low:
        return "trustworthy"
    if gamma < high:
        return "uncertain"
    return "untrustworthy"


@dataclass(frozen=True)
class TrustSettings:
    """How a trust score is measured."""

    n: int = 1
    """Perturbed prompts; each costs one generation."""
    ball: str = "ascii-control"
    seed: int = 0
    form: Form = "sin"
    thresholds: tuple[float, float] | None = None
    """(low, high); None: the authors' 0.1 / 0.2 buckets converted to ``form``."""
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=64))

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError(f"trust needs at least one perturbed prompt, got n={self.n}")
        if self.form not in FORMS:
            raise ConfigError(f"unknown gamma form '{self.form}'; known: {', '.join(FORMS)}")
        if self.thresholds is not None:
            check_thresholds(self.thresholds)

    def resolved_thresholds(self) -> tuple[float, float]:
        if self.thresholds is None:
            return default_thresholds(self.form)
        return check_thresholds(self.thresholds)


@dataclass(frozen=True)
class TrustScore:
    """Gamma of one answer, its verdict, and the evidence behind it: what :func:`score_trust`
    returns and what the gateway attaches to every answer it serves."""

    gamma: float | None
    verdict: Verdict
    thresholds: tuple[float, float] | None
    """(low, high); None when none applies (the gateway's calibration refused the model)."""
    form: Form
    prompt: str
    answer: str
    answer_reused: bool
    """True when the caller's answer was scored instead of a fresh generation."""
    perturbed_prompts: tuple[str, ...]
    perturbed_answers: tuple[str, ...]
    model: str
    embedder: str
    n: int
    ball: str
    seconds: float
    """Wall time of this score (cached generations make it shorter)."""
    model_calls: int
    """Generations actually sent to the model (cache misses)."""
    p_correct: float | None = None
    """P(correct) from the calibration curve (None without a calibration, or unscored)."""
    p_correct_band: tuple[float, float] | None = None
    """The calibration's 95% bootstrap band at this gamma."""
    calibration: dict[str, Any] | None = None
    """Which calibration gave p_correct and the thresholds (and whether it was forced)."""
    seed: int = 0
    """Seed of the ball."""
    threshold_source: str | None = None
    """Where the thresholds came from (given, the authors' buckets, a calibration)."""
    error: str | None = None
    """Why there is no gamma (None when scored)."""
    error_kind: str | None = None
    """What kind of failure: ``undefined`` (an empty answer), or the gateway's ``scoring``,
    ``calibration``, ``queue_full``, ..."""
    id: str | None = None
    """The gateway's score id (None for a library score)."""
    sampling: Mapping[str, Any] = field(default_factory=dict)
    """The gateway's sampling of the answer and of the perturbed calls."""
    timings: Mapping[str, float] = field(default_factory=dict)
    """The gateway's milliseconds per stage."""
    tokens: Mapping[str, int] = field(default_factory=dict)
    """The gateway's tokens spent on scoring: ``prompt`` and ``completion`` of the perturbed
    calls actually sent (cached answers cost none)."""
    decision: str = "answer"
    """What a policy decided: ``answer``, ``abstain`` or ``escalate`` (always ``answer``
    without one; :mod:`veracity.decisions.policy`)."""
    decision_reason: str | None = None
    escalated: TrustScore | None = None
    """With ``escalate``: the stronger model's own answer and its score (its decision is
    ``answer`` or the policy's fallback)."""

    def to_dict(self) -> JsonObject:
        """The library's fields (the gateway's shape is ``veracity.serve.scoring.score_json``)."""
        return {k: v for k, v in asdict(self).items() if k in _LIBRARY_FIELDS}


_LIBRARY_FIELDS = frozenset(
    ("gamma", "verdict", "thresholds", "form", "prompt", "answer", "answer_reused",
     "perturbed_prompts", "perturbed_answers", "model", "embedder", "n", "ball", "seconds",
     "model_calls", "p_correct", "p_correct_band", "calibration", "decision", "decision_reason",
     "escalated"))


UNDEFINED = "gamma is undefined for this answer"


def score_trust(
    prompt: str,
    client: LLMClient,
    embedder: CachedEmbedder,
    answer: str | None = None,
    settings: TrustSettings = TrustSettings(),
    paraphraser: LLMClient | None = None,
    context: Sequence[Message] = (),
    curve: Curve | None = None,
    calibration: dict[str, Any] | None = None,
) -> TrustScore:
    """Score ``answer`` (or the model's own answer) to ``prompt``: one batch of generations.

    ``context`` holds the turns before the prompt (a system message, earlier exchanges); they
    are sent unchanged with every perturbed prompt. With a calibration ``curve`` the score
    carries P(correct) and the verdict uses the curve's thresholds; ``calibration`` describes
    where the curve came from.
    """
    check_prompt(prompt, "trust")
    began = time.perf_counter()
    clients = [client] if paraphraser in (None, client) else [client, paraphraser]
    calls_before = sum(c.stats.model_calls for c in clients if c is not None)
    if settings.ball == PARAPHRASE:
        ball = paraphrase_ball([prompt], paraphraser or client, settings.n, settings.seed)[0]
    else:
        ball = perturb(prompt, settings.n, settings.ball, settings.seed)
    turns = tuple(context)
    own = GenRequest((*turns, Message("user", prompt)), settings.sampling)
    draft = answer or ""
    if answer is None and client.identity().get("decode") == "draft":
        # the model's own answer first: it is the draft its perturbed answers are checked against
        draft = client.generate([own], stage="trust")[0].text
    requests = [GenRequest((*turns, Message("user", p)), settings.sampling, draft=draft)
                for p in ball]
    if answer is None and not draft:
        requests.insert(0, own)
    texts = [g.text.strip() for g in client.generate(requests, stage="trust")]
    centre = answer.strip() if answer is not None else (draft.strip() if draft else texts.pop(0))
    value = score_answers([centre], [texts], embedder, settings.form)[0]
    thresholds = settings.resolved_thresholds() if curve is None else curve.verdict_thresholds()
    calls_after = sum(c.stats.model_calls for c in clients if c is not None)
    return TrustScore(
        gamma=value,
        verdict=verdict(value, thresholds),
        thresholds=thresholds,
        form=settings.form,
        prompt=prompt,
        answer=centre,
        answer_reused=answer is not None,
        perturbed_prompts=tuple(ball),
        perturbed_answers=tuple(texts),
        model=client.spec,
        embedder=embedder.spec,
        n=settings.n,
        ball=settings.ball,
        seconds=time.perf_counter() - began,
        model_calls=calls_after - calls_before,
        p_correct=None if curve is None else curve.p_correct(value),
        p_correct_band=None if curve is None else curve.band(value),
        calibration=calibration,
        seed=settings.seed,
        threshold_source=("calibration" if curve is not None else "given"
                          if settings.thresholds is not None else AUTHORS_SOURCE),
        error=None if value is not None else UNDEFINED,
        error_kind=None if value is not None else "undefined",
    )
