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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from veracity.client import CachedEmbedder, LLMClient
from veracity.errors import ConfigError
from veracity.methods.gamma.calibration import Curve
from veracity.methods.gamma.core import FORMS, Form, check_prompt, score_answers
from veracity.methods.gamma.paraphrase import PARAPHRASE, paraphrase_ball
from veracity.perturb import perturb
from veracity.types import GenRequest, Message, Sampling

Verdict = Literal["trustworthy", "uncertain", "untrustworthy", "unscored"]
AUTHORS_THRESHOLDS = (0.1, 0.2)
"""The authors' tester buckets, for the ``paper-code`` form sqrt(1 - cos)."""


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
    """Gamma of one answer, its verdict, and the evidence behind it."""

    gamma: float | None
    verdict: Verdict
    thresholds: tuple[float, float]
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    )
