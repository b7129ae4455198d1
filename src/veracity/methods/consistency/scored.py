"""Questions scored into consistency records, and the typed summary (results.json) of a run."""

from __future__ import annotations

from collections.abc import Sequence

from veracity.methods.consistency.core import ConsistencySettings, consistency_scores
from veracity.methods.consistency.records import ConsistencyRecord, ConsistencySummary
from veracity.methods.consistency.running import ScoreFigures
from veracity.runs.common import Context
from veracity.types import Item


def consistency_records(items: Sequence[Item], model: str, embedder: str,
                        settings: ConsistencySettings, ctx: Context) -> list[ConsistencyRecord]:
    """Score these questions (greedy answer, M samples, embeddings) into records."""
    found = consistency_scores([i.question for i in items], ctx.client(model),
                               ctx.embedder(embedder), settings)
    return [
        ConsistencyRecord(
            id=item.id, prompt=item.question, answer=score.greedy, score=score.score,
            samples=score.samples, cosines=score.cosines, m=settings.m,
            temperature=settings.temperature, seed=settings.seed, model=model, embedder=embedder,
            references=item.references,
            error=None if score.score is not None else "empty greedy answer: nothing to compare")
        for item, score in zip(items, found, strict=True)
    ]


def results_of(model: str, embedder: str, dataset: str, settings: ConsistencySettings,
               figures: ScoreFigures) -> ConsistencySummary:
    """The typed summary (results.json) of a run with these running figures."""
    return ConsistencySummary(model, embedder, dataset, settings.describe(),
                              figures.n_items, figures.n_scored, figures.n_unscored,
                              figures.mean_score, figures.stderr, figures.histogram)
