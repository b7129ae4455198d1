"""Semantic entropy for ``veracity benchmark``: M = K − 1 answers sampled per question beside
the shared greedy answer, clustered by meaning (or the recorded samples of a score-only run)."""

from __future__ import annotations

from veracity.method import Signal, SignalRequest, SignalUnavailable
from veracity.methods.semantic_entropy.core import SemanticEntropySettings
from veracity.methods.semantic_entropy.entail import entailment
from veracity.methods.semantic_entropy.run import Sampled, score_greedy, score_samples
from veracity.runs.common import Context
from veracity.types import Generation


def signal(ctx: Context, request: SignalRequest) -> list[Signal]:
    """Entropy over meaning clusters (discrete form; the likelihood form too where recorded
    samples come with log-probabilities); higher = less trustworthy."""
    if request.samples is not None:
        m = max((len(g) for g in request.samples), default=0)
        if m < 2:
            raise SignalUnavailable("semantic entropy needs at least 2 recorded samples")
        settings = _settings(request, m)
        same, described = entailment(settings, request.embedder, ctx)
        answers = [a.text.strip() if a is not None else "" for a in request.answers]
        records = score_samples(list(request.items), answers,
                                [[Sampled(t) for t in g if t.strip()] for g in request.samples],
                                settings, same, described, request.model or "recorded")
    else:
        if request.budget < 3:
            raise SignalUnavailable("semantic entropy needs a budget of at least 3 calls "
                                    "(2 samples)")
        if request.model is None:
            raise SignalUnavailable("no model and no recorded samples")
        settings = _settings(request, request.budget - 1)
        greedy = [a if a is not None else Generation("") for a in request.answers]
        records = score_greedy(list(request.items), greedy, settings, ctx, request.model,
                               request.embedder)
    ok = [a is not None and bool(a.text.strip()) for a in request.answers]
    recorded: dict[str, object] = {"m": settings.m, "temperature": settings.temperature,
                               "entailment": settings.entailment
                               or f"embedder cosine >= {settings.cosine}"}
    out = [Signal("semantic-entropy", tuple(r.discrete if good else None
                                            for r, good in zip(records, ok, strict=True)),
                  higher_is_better=False, baseline=True, settings={**recorded, "form": "discrete"})]
    if all(r.likelihood is not None for r, good in zip(records, ok, strict=True)
           if good and r.discrete is not None):
        out.append(Signal("semantic-entropy.likelihood",
                          tuple(r.likelihood if good else None
                                for r, good in zip(records, ok, strict=True)),
                          higher_is_better=False, baseline=True,
                          settings={**recorded, "form": "likelihood"}))
    return out


def _settings(request: SignalRequest, m: int) -> SemanticEntropySettings:
    """The discrete form on plain samples: the very requests self-consistency sends, so both
    sampling methods are judged on the same M draws (each is still charged for them)."""
    return SemanticEntropySettings(m=m, temperature=request.temperature,
                                   max_tokens=request.sampling.max_tokens, seed=request.seed,
                                   entailment=request.entailment or "", form="discrete")
