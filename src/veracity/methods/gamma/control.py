"""Numeric null control: how much gamma numerical noise alone produces.

Each question's unperturbed prompt is answered N more times along compute paths that change
no input token: on a backend with compute variations (llama.cpp: the prompt decoded as one
sequence of a multi-sequence batch; transformers: other batch sizes and padding) once per
variation, on any other backend (a server) as N replicate calls of the identical request at temperature 0.
gamma_null is then scored from those answers around the same centre answer exactly as gamma
is scored from the ball's answers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from veracity.backends.base import ComputeVaried
from veracity.client import CachedEmbedder, CallStats, LLMClient
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.core import Form, score_answers
from veracity.methods.gamma.records import ControlSummary, GammaRecord
from veracity.stats import mean_stderr
from veracity.streaming import FloatColumn
from veracity.types import Generation, GenRequest, Sampling

CONTROLS = ("numeric",)
STAGE = "control: numeric"


@dataclass(frozen=True)
class ControlPath:
    """One compute path of the control: a backend's compute variation, or replicate k of the
    identical request (a backend without variations)."""

    replicate: int | None = None
    variation: Mapping[str, Any] | None = None
    """The backend's own description, handed back to ``ComputeVaried.varied``."""

    def to_json(self) -> JsonObject:
        """As recorded in the run's ``control.variations``."""
        if self.variation is not None:
            return {"kind": "compute", **self.variation}
        return {"kind": "replicate", "replicate": self.replicate}


def variations(client: LLMClient, n: int) -> list[ControlPath]:
    """The N compute paths of the control."""
    if n < 1:
        raise ConfigError(f"the numeric control needs at least one variation, got n={n}")
    backend = client.backend
    if isinstance(backend, ComputeVaried):
        return [ControlPath(variation=dict(v)) for v in backend.compute_variations(n)]
    return [ControlPath(replicate=k) for k in range(1, n + 1)]


def replicate_request(request: GenRequest, k: int) -> GenRequest:
    """The identical request as replicate k: a cache key of its own, the same payload.

    ``sample_index`` separates replicates in the cache; a backend adds it to the seed, so the
    seed is moved back by k and the server receives byte-for-byte the same request.
    """
    return replace(request, sampling=replace(request.sampling, seed=request.sampling.seed - k),
                   sample_index=request.sample_index + k)


def _merge(into: CallStats, other: CallStats) -> None:
    for name in ("requests", "cache_hits", "model_calls", "failed", "completion_tokens",
                 "model_seconds"):
        setattr(into, name, getattr(into, name) + getattr(other, name))
    for stage, count in other.by_stage.items():
        into.by_stage[stage] = into.by_stage.get(stage, 0) + count


def null_generations(
    prompts: Sequence[str], client: LLMClient, sampling: Sampling, paths: Sequence[ControlPath]
) -> list[list[Generation | Exception]]:
    """For each prompt, one outcome per compute path (outer list: prompts)."""
    requests = [GenRequest.user(p, sampling) for p in prompts]
    per_path: list[list[Generation | Exception]] = []
    for path in paths:
        if path.variation is None:
            asked = [replicate_request(r, int(path.replicate or 0)) for r in requests]
            per_path.append(list(client.generate_each(asked, stage=STAGE)))
            continue
        backend = client.backend
        assert isinstance(backend, ComputeVaried)
        varied = LLMClient(backend.varied(dict(path.variation)), client.cache, client.progress)
        try:
            per_path.append(list(varied.generate_each(requests, stage=STAGE)))
        finally:
            varied.close()
            _merge(client.stats, varied.stats)
    return [[outcomes[i] for outcomes in per_path] for i in range(len(prompts))]


def add_null_control(
    records: Sequence[GammaRecord],
    client: LLMClient,
    embedder: CachedEmbedder,
    sampling: Sampling,
    n: int,
    form: Form,
) -> tuple[list[GammaRecord], ControlSummary]:
    """Answer each record's prompt along N compute paths and score gamma_null around the
    record's answer: the records with ``gamma_null``, ``gamma_above_null`` and ``null_answers``
    set, and the run's ``control`` section.

    Items the model rejected are skipped.
    """
    paths = variations(client, n)
    out = null_control(records, client, embedder, sampling, paths, form)
    return out, summarise(out, paths)


def null_control(
    records: Sequence[GammaRecord],
    client: LLMClient,
    embedder: CachedEmbedder,
    sampling: Sampling,
    paths: Sequence[ControlPath],
    form: Form,
) -> list[GammaRecord]:
    """The records of :func:`add_null_control`, for one chunk of a run along its ``paths``."""
    out = [r.with_extra(gamma_null=None, gamma_above_null=None, null_answers=[]) for r in records]
    todo = [k for k, r in enumerate(out) if r.error is None or not r.error.no_answer]
    if not todo:
        return out
    outcomes = null_generations([out[k].prompt for k in todo], client, sampling, paths)
    texts = [[o.text.strip() if isinstance(o, Generation) else "" for o in row] for row in outcomes]
    values = score_answers([out[k].answer for k in todo], texts, embedder, form)
    for k, row, answers, value in zip(todo, outcomes, texts, values, strict=True):
        failed = next((str(o) for o in row if not isinstance(o, Generation)), None)
        record = out[k]
        if failed:
            out[k] = record.with_extra(null_answers=answers,
                                       control_error=f"model error: {failed}")
            continue
        above = None if value is None or record.gamma is None else bool(record.gamma > value)
        out[k] = record.with_extra(gamma_null=value, gamma_above_null=above, null_answers=answers)
    return out


def summarise(records: Sequence[GammaRecord], paths: Sequence[ControlPath]) -> ControlSummary:
    """Means of gamma and gamma_null over items that have both, and the share of items whose
    gamma exceeds the 95th percentile of the run's gamma_null."""
    running = RunningControl(paths)
    running.add(records)
    return running.result()


class RunningControl:
    """:func:`summarise` fed in any number of chunks, with the same digits.

    The 95th percentile of γ_null is over the whole run, so γ and γ_null of the items that
    have both are kept as two float columns (16 bytes an item); no record is kept.
    """

    def __init__(self, paths: Sequence[ControlPath]) -> None:
        self.compute_paths = list(paths)
        self.gamma = FloatColumn()
        self.null = FloatColumn()
        self.n_identical = 0

    def add(self, records: Iterable[GammaRecord]) -> None:
        """One chunk of records with the control's fields."""
        g: list[float] = []
        null: list[float] = []
        for r in records:
            if r.gamma is not None and r.gamma_null is not None:
                g.append(r.gamma)
                null.append(r.gamma_null)
                self.n_identical += all(a == r.answer for a in r.extra["null_answers"])
        self.gamma.extend(g)
        self.null.extend(null)

    def result(self) -> ControlSummary:
        """The run's ``control`` section."""
        g, null = self.gamma.array(), self.null.array()
        both = int(g.size)
        mean_g, se_g = mean_stderr(list(g))
        mean_null, se_null = mean_stderr(list(null))
        p95 = float(np.quantile(null, 0.95)) if both else math.nan
        return ControlSummary(
            n=len(self.compute_paths),
            variations=tuple(p.to_json() for p in self.compute_paths),
            n_scored=both,
            mean_gamma=mean_g,
            stderr_gamma=se_g,
            mean_gamma_null=mean_null,
            stderr_gamma_null=se_null,
            mean_gamma_minus_null=float((g - null).mean()) if both else math.nan,
            gamma_null_p95=p95,
            share_above_null_p95=float((g > p95).mean()) if both else math.nan,
            share_above_own_null=float((g > null).mean()) if both else math.nan,
            share_null_identical=self.n_identical / both if both else math.nan,
        )
