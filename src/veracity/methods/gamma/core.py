"""Harmonic gamma (Kersting et al. 2024, Algorithm 1): stability of an answer under a ball.

y0 = f(x), y_i = f(x + p_i); v0 = E(y0), b = sum_i E(y_i); gamma = sin angle(v0, b).

Three forms: ``sin`` = sqrt(1 - cos^2) (the paper's definition), ``paper-code`` =
sqrt(1 - cos) (the authors' released code, in which the paper's Table 8 values and its 0.05
threshold are expressed), and ``magnitude`` = |v0 - b / N|, the length of the γ vector the
paper names as the alternative to its angle. The two angle forms are functions of the same
cosine, so a threshold converts exactly between them; ``magnitude`` also depends on the
embeddings' lengths and converts to neither.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from veracity.checks import MAX_N, check_count, check_number
from veracity.client import CachedEmbedder, LLMClient
from veracity.errors import BackendError, ConfigError, ErrorKind
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.paraphrase import PARAPHRASE, paraphrase_ball
from veracity.methods.gamma.records import GammaAggregate, GammaRecord, GivenCut
from veracity.methods.gamma.running import RunningGamma
from veracity.perturb import perturb
from veracity.records import RecordError
from veracity.text import lone_surrogate
from veracity.types import Generation, GenRequest, Item, Sampling

Form = Literal["sin", "paper-code", "magnitude"]
FORMS: tuple[Form, ...] = ("sin", "paper-code")
"""The angle forms: a threshold in one converts exactly into the other."""
ALL_FORMS: tuple[Form, ...] = (*FORMS, "magnitude")
_SNAP = 1e-12  # |cos| this close to 1 is exactly parallel: identical answers give gamma = 0
PAPER_THRESHOLD = 0.05
PAPER_THRESHOLD_FORM: Form = "paper-code"
"""Table 8's "certified trustworthy" γ < 0.05 is in the authors' sqrt(1 - cos) form."""


def _check_form(form: str, known: Sequence[str] = ALL_FORMS) -> None:
    if form not in known:
        raise ConfigError(f"unknown gamma form '{form}'; known: {', '.join(known)}")


def convert_gamma(value: float, source: Form, target: Form) -> float:
    """The same angle in another form (angles up to 90 degrees, cos >= 0, as γ thresholds are).

    sin = p * sqrt(2 - p^2) for p = sqrt(1 - cos); p = sqrt(1 - sqrt(1 - sin^2)).

    >>> round(convert_gamma(0.05, "paper-code", "sin"), 6)
    0.070666
    >>> round(convert_gamma(convert_gamma(0.3, "sin", "paper-code"), "paper-code", "sin"), 12)
    0.3
    """
    _check_form(source)
    _check_form(target)
    if source == target:
        return float(value)
    if "magnitude" in (source, target):
        raise ConfigError(
            f"a {source} threshold cannot be converted to the {target} form: the magnitude of the "
            "γ vector depends on the embeddings' lengths, not on the angle alone; give the "
            f"threshold in the {target} form")
    if not 0.0 <= value <= (math.sqrt(2.0) if source == "paper-code" else 1.0):
        raise ConfigError(f"γ = {value} is outside the {source} form's range")
    if source == "paper-code":
        cos = 1.0 - value**2
        if cos < 0:
            raise ConfigError(f"paper-code γ = {value} is an angle over 90 degrees, which has no "
                              "sin threshold")
        return math.sqrt(max(0.0, 1.0 - cos**2))
    cos = math.sqrt(max(0.0, 1.0 - value**2))
    return math.sqrt(1.0 - cos)


@dataclass(frozen=True)
class Threshold:
    """A γ threshold and the form it is written in."""

    value: float
    form: Form = PAPER_THRESHOLD_FORM

    def __post_init__(self) -> None:
        _check_form(self.form)
        check_number("threshold", self.value, 0.0, 2.0, low_open=True)

    @staticmethod
    def default(form: Form) -> Threshold:
        """The paper's 0.05 (paper-code) for the angle forms; 0.05 in its own form otherwise."""
        return Threshold(PAPER_THRESHOLD, PAPER_THRESHOLD_FORM if form in FORMS else form)

    def to(self, form: Form) -> float:
        """The threshold in ``form`` (a ConfigError when it cannot be converted)."""
        return convert_gamma(self.value, self.form, form)

    def describe(self, form: Form) -> JsonObject:
        """For results and run.json: the value applied in the run's ``form`` and as given."""
        return {"value": self.to(form), "form": form, "given": self.value,
                "given_form": self.form}


def gamma_batch(
    centres: npt.ArrayLike, perturbed: npt.ArrayLike, form: Form = "sin"
) -> npt.NDArray[np.float64]:
    """Gamma for m items at once: centres (m, d), perturbed (m, N, d) -> (m,).

    ``sin``: sqrt(1 - cos^2), the paper's definition. ``paper-code``: sqrt(1 - cos), what the
    authors' released code computes. ``magnitude``: |v0 - b / N|. Undefined (a zero vector)
    gives NaN.
    """
    _check_form(form)
    v0 = np.asarray(centres, dtype=np.float64)
    points = np.asarray(perturbed, dtype=np.float64)
    b = points.sum(axis=1)
    norms = np.linalg.norm(v0, axis=1) * np.linalg.norm(b, axis=1)
    if form == "magnitude":
        distance = np.linalg.norm(v0 - b / points.shape[1], axis=1)
        # N identical copies of v0 average back to v0 only up to rounding
        same = np.all(points == v0[:, None, :], axis=(1, 2))
        return np.where(norms > 0, np.where(same, 0.0, distance), np.nan)
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


LENGTH = "length"
"""The finish reason of an answer cut at max_tokens."""

EMBEDDING = "embedding"
"""The white-box ball (:mod:`veracity.methods.gamma.whitebox.core`): needs a backend with input embeddings."""


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
    """``sin`` (paper), ``paper-code`` (authors' code, sqrt(1 - cos)) or ``magnitude``."""
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=64))
    """Decoding for every call; the paper uses temperature 0."""
    threshold: float = PAPER_THRESHOLD
    """gamma below this counts as "certified trustworthy" in the aggregates ..."""
    threshold_form: Form | None = None
    """... written in this form and converted to ``form`` (None: the paper's paper-code for
    the angle forms, ``form`` itself for magnitude)."""
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
        _check_form(self.form)
        self.cut.to(self.form)  # a threshold that cannot be converted fails here
        check_number("radius", self.radius, 0.0)

    @property
    def cut(self) -> Threshold:
        """The threshold as given, with its form."""
        form = self.threshold_form or Threshold.default(self.form).form
        return Threshold(self.threshold, form)

    @property
    def applied_threshold(self) -> float:
        """The threshold in the run's form: what γ values are compared with."""
        return self.cut.to(self.form)

    def describe(self) -> JsonObject:
        extra: JsonObject = {"paraphraser": self.paraphraser} if self.ball == PARAPHRASE else {}
        if self.ball == EMBEDDING:
            extra = {"radius": self.radius, "shape": self.shape, "scope": self.scope}
        if self.control is not None:
            extra["control"] = self.control
        out: JsonObject = {
            "n": self.n,
            "ball": self.ball,
            "seed": self.seed,
            "form": self.form,
            "threshold": self.applied_threshold,
            "threshold_given": {"value": self.threshold, "form": self.cut.form},
            "temperature": self.sampling.temperature,
            "max_tokens": self.sampling.max_tokens,
        }
        return out | extra


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
) -> list[GammaRecord]:
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
    generations = generate_balls([item.question for item in items], balls, client,
                                 settings.sampling)
    texts = [g.text.strip() if isinstance(g, Generation) else "" for g in generations]
    stride = settings.n + 1
    groups = [generations[i * stride : (i + 1) * stride] for i in range(len(items))]
    failures = [next((g for g in group if isinstance(g, BackendError)), None) for group in groups]
    # an item the model rejected is not scored (its answer, if any, is kept); the others go on
    answers = [texts[i * stride] for i in range(len(items))]
    perturbed = [texts[i * stride + 1 : (i + 1) * stride] for i in range(len(items))]
    gammas = score_answers(answers, perturbed, embedder, settings.form)
    gammas = [None if failed else g for g, failed in zip(gammas, failures, strict=True)]
    cosines = perturbed_cosines(answers, perturbed, embedder)
    records = []
    for item, ball, answer, others, value, failed, group, cos in zip(
        items, balls, answers, perturbed, gammas, failures, groups, cosines, strict=True
    ):
        record = gamma_record(item, answer, ball, others, value, settings, client.spec,
                              embedder.spec)
        centre = group[0]
        records.append(replace(
            record,
            error=record.error if failed is None
            else RecordError(failed.kind, f"{failed.kind.label}: {failed}"),
            replaced_chars=sum(g.replaced_chars for g in group if isinstance(g, Generation)),
            perturbed_cosines=tuple(cos),
            # a cut answer's γ is measured on prefixes: said in the record and counted
            extra={"finish_reason": centre.finish_reason if isinstance(centre, Generation)
                   else None,
                   "perturbed_truncated": sum(isinstance(g, Generation)
                                              and g.finish_reason == LENGTH for g in group[1:])},
        ))
    return records


def generate_balls(
    questions: Sequence[str], balls: Sequence[Sequence[str]], client: LLMClient, sampling: Sampling,
) -> list[Generation | BackendError]:
    """Each question's answer followed by its perturbed prompts' answers, in one flat list.

    A backend that verifies drafts (``decode=draft``) gets the centre answers first, then each
    perturbed prompt with its centre answer as the draft; others get everything in one stage.
    """
    if client.identity().get("decode") != "draft":
        requests = []
        for question, ball in zip(questions, balls, strict=True):
            requests.append(GenRequest.user(question, sampling))
            requests.extend(GenRequest.user(p, sampling) for p in ball)
        return client.generate_each(requests, stage="gamma: answers")
    centres = client.generate_each([GenRequest.user(q, sampling) for q in questions],
                                   stage="gamma: answers")
    drafts = [c.text if isinstance(c, Generation) else "" for c in centres]
    perturbed = client.generate_each(
        [GenRequest.user(p, sampling, draft=draft)
         for ball, draft in zip(balls, drafts, strict=True) for p in ball],
        stage="gamma: perturbed answers (drafted)")
    out: list[Generation | BackendError] = []
    start = 0
    for centre, ball in zip(centres, balls, strict=True):
        out.append(centre)
        out.extend(perturbed[start : start + len(ball)])
        start += len(ball)
    return out


def gamma_record(
    item: Item,
    answer: str,
    perturbed_prompts: Sequence[str],
    perturbed_answers: Sequence[str],
    value: float | None,
    settings: GammaSettings,
    model: str,
    embedder: str,
) -> GammaRecord:
    """The per-item record written to samples.jsonl and printed by ``--json``."""
    return GammaRecord(
        id=item.id,
        prompt=item.question,
        answer=answer,
        gamma=value,
        form=settings.form,
        n=len(perturbed_answers),
        ball=settings.ball,
        seed=settings.seed,
        model=model,
        embedder=embedder,
        perturbed_prompts=tuple(perturbed_prompts),
        perturbed_answers=tuple(perturbed_answers),
        references=tuple(item.references),
        metadata=dict(item.metadata),
        error=None if value is not None
        else RecordError(ErrorKind.UNDEFINED, "empty answer: gamma is undefined"),
    )


def recorded_record(row: Mapping[str, Any], value: float | None,
                    cosines: Sequence[float | None], settings: GammaSettings, model: str,
                    embedder: str) -> GammaRecord:
    """The record of one recorded generation (a checked line of a recorded file)."""
    record = gamma_record(
        Item(str(row["id"]), str(row["prompt"])), row["answer"],
        row.get("perturbed_prompts", []), row["perturbed_answers"], value, settings,
        str(row.get("model", model)), embedder,
    )
    record = replace(record, ball=row.get("ball", "recorded"), perturbed_cosines=tuple(cosines))
    published = {k: row[k] for k in ("published_gamma", "source") if row.get(k) is not None}
    return record.with_extra(**published) if published else record


def aggregate(records: Sequence[GammaRecord], threshold: float | Threshold = 0.05,
              form: Form | None = None) -> GammaAggregate:
    """Mean +- standard error, median, share below the threshold, histogram.

    A :class:`Threshold` is converted to ``form`` (the records' form) and named in the result;
    a plain number is taken as already in that form.
    """
    given = None
    if isinstance(threshold, Threshold):
        form = form or _records_form(records)
        given = GivenCut(threshold.value, threshold.form)
        threshold = threshold.to(form)
    running = RunningGamma(float(threshold))
    running.add(records)  # the streamed runs add chunk by chunk: the same digits
    return replace(running.result(), threshold_form=form, threshold_given=given)


def _records_form(records: Sequence[GammaRecord]) -> Form:
    """The one γ form of a run's records (sin when they do not say)."""
    forms = {r.form or "sin" for r in records}
    if len(forms) > 1:
        raise ConfigError(f"records mix γ forms {sorted(forms)}: a threshold cannot apply to all")
    form = forms.pop() if forms else "sin"
    _check_form(form)
    return form  # type: ignore[return-value]
