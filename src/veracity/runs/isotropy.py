"""Isotropy runs: gamma's generations for a dataset, then the angles, into a run directory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from veracity.methods.gamma import GammaSettings, run_gamma
from veracity.methods.isotropy import DEFAULT_CONE, aggregate, isotropy_records
from veracity.runs.common import Context
from veracity.store import RunDir, check_run_target
from veracity.types import Item


@dataclass
class IsotropyOutcome:
    """Per-question records, aggregates, and the run directory if one was written."""

    records: list[dict[str, Any]]
    results: dict[str, Any]
    run: RunDir | None


def isotropy_run(
    items: Sequence[Item],
    model: str,
    embedder: str,
    settings: GammaSettings,
    ctx: Context,
    cone: float = DEFAULT_CONE,
    out: Path | None = None,
    dataset: str = "prompts",
) -> IsotropyOutcome:
    """Ask each question N+1 times (the same cached calls as a gamma run) and measure angles."""
    if out is not None:
        check_run_target(out)  # before any model call
    client = ctx.client(model)
    cached_embedder = ctx.embedder(embedder)
    paraphraser = ctx.client(settings.paraphraser) if settings.paraphraser else None
    gamma_records = run_gamma(items, client, cached_embedder, settings, paraphraser)
    records = isotropy_records(gamma_records, cached_embedder)
    results = {
        "method": "isotropy",
        "model": client.spec,
        "embedder": cached_embedder.spec,
        "dataset": dataset,
        "settings": settings.describe() | {"cone": cone},
        "aggregate": aggregate(records, cone),
    }
    run = None
    if out is not None:
        config = {
            "model": client.spec,
            "model_identity": client.backend.identity(),
            "embedder": cached_embedder.spec,
            "dataset": dataset,
            "n_items": len(items),
            "cone": cone,
            "settings": settings.describe() | {"sampling": asdict(settings.sampling)},
            "model_options": ctx.options_record(),
        }
        run = RunDir.create(out, "isotropy", config, ctx.started)
        run.write_samples(records)
        run.write_results(results)
        run.finish(ctx.stats())
    return IsotropyOutcome(records, results, run)
