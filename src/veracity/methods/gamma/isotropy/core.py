"""Isotropy check: is the ball centred on the original, in prompt and in answer space?

Gamma assumes the ball points scatter evenly around the question, so the mean of the
perturbed answers' embeddings points where the original answer does when the model is
stable. Per question this module measures, in degrees:

- ``answer_angle``: between the original answer's embedding and the mean of the perturbed
  answers' embeddings (for cos >= 0 this is arcsin of the sin-form gamma);
- ``prompt_angle_mean`` / ``prompt_angle_std``: the mean and (population) spread of the
  angles between each perturbed prompt's embedding and the original prompt's;
- ``prompt_centroid_angle``: between the original prompt's embedding and the mean of the
  perturbed prompts' embeddings; well below ``prompt_angle_mean`` means isotropic.

The paper (100 TruthfulQA questions, N = 10) reports these under 11 degrees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from veracity.client import CachedEmbedder
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.isotropy.records import IsotropyRecord
from veracity.methods.gamma.records import GammaRecord
from veracity.records import json_object, number
from veracity.stats import Histogram, histogram, mean_stderr

Vectors = npt.NDArray[np.float64]
DEFAULT_CONE = 11.0


def angles_deg(a: npt.ArrayLike, b: npt.ArrayLike) -> Vectors:
    """Row-wise angles in degrees between (m, d) arrays; NaN where a row is zero."""
    x = np.atleast_2d(np.asarray(a, dtype=np.float64))
    y = np.atleast_2d(np.asarray(b, dtype=np.float64))
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.clip(np.einsum("md,md->m", x, y) / norms, -1.0, 1.0)
    return np.where(norms > 0, np.degrees(np.arccos(cos)), np.nan)


def centroid_angle(centre: npt.ArrayLike, points: npt.ArrayLike) -> float:
    """Degrees between ``centre`` (d,) and the mean of ``points`` (N, d)."""
    mean = np.asarray(points, dtype=np.float64).mean(axis=0)
    return float(angles_deg(centre, mean)[0])


class Spread(NamedTuple):
    """Angles of the points around the centre, in degrees."""

    mean: float
    std: float
    angles: list[float]


def spread(centre: npt.ArrayLike, points: npt.ArrayLike) -> Spread:
    """Mean and population standard deviation of each point's angle to ``centre``."""
    pts = np.atleast_2d(np.asarray(points, dtype=np.float64))
    c = np.broadcast_to(np.asarray(centre, dtype=np.float64), pts.shape)
    values = angles_deg(c, pts)
    return Spread(float(values.mean()), float(values.std()), [float(v) for v in values])


def share_within(angles: Sequence[float | None], cone: float) -> float:
    """Share of the defined angles that are at most ``cone`` degrees; NaN if none is."""
    arr = np.array([a for a in angles if a is not None and not math.isnan(a)], dtype=np.float64)
    return float((arr <= cone).mean()) if arr.size else math.nan


def _defined(value: float) -> float | None:
    return None if math.isnan(value) else value


def isotropy_record(
    gamma_record: GammaRecord, prompt_vectors: npt.ArrayLike, answer_vectors: npt.ArrayLike
) -> IsotropyRecord:
    """Angles of one question from its gamma record and the embeddings of
    [prompt, *perturbed_prompts] and [answer, *perturbed_answers]."""
    p = np.asarray(prompt_vectors, dtype=np.float64)
    a = np.asarray(answer_vectors, dtype=np.float64)
    prompt_spread = spread(p[0], p[1:])
    answer_angle = centroid_angle(a[0], a[1:]) if gamma_record.answer.strip() else math.nan
    g = gamma_record
    return IsotropyRecord(
        id=g.id,
        prompt=g.prompt,
        answer=g.answer,
        answer_angle=_defined(answer_angle),
        answer_point_angles=tuple(_defined(v) for v in angles_deg(
            np.broadcast_to(a[0], a[1:].shape), a[1:])),
        prompt_angle_mean=_defined(prompt_spread.mean),
        prompt_angle_std=_defined(prompt_spread.std),
        prompt_centroid_angle=_defined(centroid_angle(p[0], p[1:])),
        prompt_angles=tuple(_defined(v) for v in prompt_spread.angles),
        gamma=g.gamma, n=g.n, ball=g.ball, seed=g.seed, form=g.form, model=g.model,
        embedder=g.embedder, perturbed_prompts=g.perturbed_prompts,
        perturbed_answers=g.perturbed_answers,
        error=None if g.error is None else g.error.message,
    )


def isotropy_records(
    gamma_records: Sequence[GammaRecord], embedder: CachedEmbedder
) -> list[IsotropyRecord]:
    """Embed every question's prompts and answers (one batch) and measure its angles."""
    texts: list[str] = []
    for r in gamma_records:
        texts += [r.prompt, *r.perturbed_prompts, r.answer, *r.perturbed_answers]
    vectors = embedder.embed(texts) if texts else np.zeros((0, 0))
    out, at = [], 0
    for r in gamma_records:
        k = 1 + len(r.perturbed_prompts)
        m = 1 + len(r.perturbed_answers)
        out.append(isotropy_record(r, vectors[at : at + k], vectors[at + k : at + k + m]))
        at += k + m
    return out


@dataclass(frozen=True)
class AngleStats:
    """One angle (degrees) over the questions: its distribution and the share within the cone."""

    n: int
    mean: float | None
    """NaN (None once read back) when no question has the angle; so are the figures below."""
    stderr: float | None
    median: float | None
    max: float | None
    share_within_cone: float | None
    histogram: Histogram

    @classmethod
    def from_json(cls, data: Any) -> AngleStats:
        found = json_object(data, "angle statistics")
        return cls(int(found["n"]), number(found["mean"]), number(found["stderr"]),
                   number(found["median"]), number(found["max"]),
                   number(found["share_within_cone"]),
                   Histogram.from_json(json_object(found["histogram"], "histogram")))

    def to_json(self) -> JsonObject:
        return {"n": self.n, "mean": self.mean, "stderr": self.stderr, "median": self.median,
                "max": self.max, "share_within_cone": self.share_within_cone,
                "histogram": self.histogram.to_json()}


ANGLES = ("answer_angle", "prompt_angle_mean", "prompt_angle_std", "prompt_centroid_angle")
"""The angles of an isotropy record that are aggregated, in results.json's order."""


@dataclass(frozen=True)
class IsotropyAggregate:
    """Distribution of each angle over a run's questions, with the cone it is judged by."""

    n_items: int
    cone: float
    answer_angle: AngleStats
    prompt_angle_mean: AngleStats
    prompt_angle_std: AngleStats
    prompt_centroid_angle: AngleStats

    @classmethod
    def from_json(cls, data: Any) -> IsotropyAggregate:
        """The aggregate as results.json holds it."""
        found = json_object(data, "isotropy aggregate")
        angles = [AngleStats.from_json(found[name]) for name in ANGLES]
        return cls(int(found["n_items"]), found["cone"], *angles)

    def angle(self, name: str) -> AngleStats:
        """The statistics of one of :data:`ANGLES`."""
        found: AngleStats = getattr(self, name)
        return found

    def to_json(self) -> JsonObject:
        return {"n_items": self.n_items, "cone": self.cone,
                **{name: self.angle(name).to_json() for name in ANGLES}}


def _stats(values: Sequence[float | None], cone: float) -> AngleStats:
    arr = np.array([v for v in values if v is not None], dtype=np.float64)
    mean, se = mean_stderr(list(arr))
    return AngleStats(
        n=int(arr.size),
        mean=mean,
        stderr=se,
        median=float(np.median(arr)) if arr.size else math.nan,
        max=float(arr.max()) if arr.size else math.nan,
        share_within_cone=share_within(list(arr), cone),
        histogram=histogram(list(arr), bins=36, upper=180.0),
    )


def aggregate(records: Sequence[IsotropyRecord], cone: float = DEFAULT_CONE) -> IsotropyAggregate:
    """Distribution of each angle over the questions, and the share within the cone."""
    return IsotropyAggregate(
        n_items=len(records),
        cone=cone,
        answer_angle=_stats([r.answer_angle for r in records], cone),
        prompt_angle_mean=_stats([r.prompt_angle_mean for r in records], cone),
        prompt_angle_std=_stats([r.prompt_angle_std for r in records], cone),
        prompt_centroid_angle=_stats([r.prompt_centroid_angle for r in records], cone),
    )


@dataclass(frozen=True)
class IsotropyResults:
    """An isotropy run's results.json: the setup and the angles' aggregate."""

    model: str
    embedder: str
    dataset: str
    settings: GammaSettings
    aggregate: IsotropyAggregate

    def to_json(self) -> JsonObject:
        return {"method": "isotropy", "model": self.model, "embedder": self.embedder,
                "dataset": self.dataset,
                "settings": self.settings.describe() | {"cone": self.aggregate.cone},
                "aggregate": self.aggregate.to_json()}
