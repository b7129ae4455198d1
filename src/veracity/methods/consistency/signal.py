"""Self-consistency for ``veracity benchmark``: M = K − 1 answers sampled per question, scored
by their agreement with the shared greedy answer (or the recorded samples of a score-only run)."""

from __future__ import annotations

import math

from veracity.method import Signal, SignalRequest, SignalUnavailable
from veracity.methods.consistency.core import ConsistencySettings, consistency_scores, cosines
from veracity.runs.common import Context


def signal(ctx: Context, request: SignalRequest) -> list[Signal]:
    """UQLM's normalised cosine of the samples to the greedy answer; higher = more trustworthy."""
    answers = [a.text.strip() if a is not None else "" for a in request.answers]
    embedder = ctx.embedder(request.embedder)
    if request.samples is not None:
        values: list[float | None] = []
        for answer, group in zip(answers, request.samples, strict=True):
            if not answer or not group:
                values.append(None)
                continue
            vectors = embedder.embed([answer, *group])
            value = float((cosines(vectors[0], vectors[1:]).mean() + 1.0) / 2.0)
            values.append(None if math.isnan(value) else value)
        m = max((len(g) for g in request.samples), default=0)
    else:
        m = request.budget - 1
        if m < 1:
            raise SignalUnavailable("self-consistency needs a budget of at least 2 calls")
        if request.model is None:
            raise SignalUnavailable("no model and no recorded samples")
        settings = ConsistencySettings(m, request.temperature, request.sampling.max_tokens,
                                       request.seed)
        scores = consistency_scores([item.question for item in request.items],
                                    ctx.client(request.model), embedder, settings, answers)
        values = [s.score if a is not None else None
                  for s, a in zip(scores, request.answers, strict=True)]
    return [Signal("consistency", tuple(values), higher_is_better=True, baseline=True,
                   settings={"m": m, "temperature": request.temperature, "seed": request.seed})]
