"""Isotropy runs: gamma's generations for a dataset, then the angles, into a run directory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from veracity.jsontypes import JsonObject
from veracity.methods.gamma.core import GammaSettings, measure_gamma
from veracity.methods.gamma.isotropy.core import (
    DEFAULT_CONE,
    IsotropyResults,
    aggregate,
    isotropy_records,
)
from veracity.methods.gamma.isotropy.records import IsotropyRecord
from veracity.runs.common import Context
from veracity.runs.driver import check_target, save_summary
from veracity.runs.result import RunResult
from veracity.types import Item


@dataclass(frozen=True)
class IsotropyRunConfig:
    """run.json's ``config`` of an isotropy run."""

    model: str
    model_identity: JsonObject
    embedder: str
    dataset: str
    n_items: int
    cone: float
    settings: GammaSettings
    model_options: JsonObject

    def to_json(self) -> JsonObject:
        return {"model": self.model, "model_identity": self.model_identity,
                "embedder": self.embedder, "dataset": self.dataset, "n_items": self.n_items,
                "cone": self.cone,
                "settings": self.settings.describe() | {"sampling": asdict(self.settings.sampling)},
                "model_options": self.model_options}


def run_isotropy(
    items: Sequence[Item],
    model: str,
    embedder: str,
    settings: GammaSettings,
    ctx: Context,
    cone: float = DEFAULT_CONE,
    out: Path | None = None,
    dataset: str = "prompts",
) -> RunResult[IsotropyRecord, IsotropyResults]:
    """Ask each question N+1 times (the same cached calls as a gamma run) and measure angles."""
    check_target(out)  # before any model call
    client = ctx.client(model)
    cached_embedder = ctx.embedder(embedder)
    paraphraser = ctx.client(settings.paraphraser) if settings.paraphraser else None
    gamma_records = measure_gamma(items, client, cached_embedder, settings, paraphraser)
    records = isotropy_records(gamma_records, cached_embedder)
    results = IsotropyResults(client.spec, cached_embedder.spec, dataset, settings,
                              aggregate(records, cone))
    config = IsotropyRunConfig(client.spec, client.backend.identity(), cached_embedder.spec,
                               dataset, len(items), cone, settings, ctx.options_record())
    return save_summary(out, "isotropy", config, records, results, ctx.started, ctx.stats())
