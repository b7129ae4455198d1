"""Gamma runs: live (model + embedder) or from recorded generations, into a run directory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from veracity.data.jsonl import read_objects
from veracity.errors import DataError
from veracity.methods.gamma import (
    EMBEDDING,
    Form,
    GammaSettings,
    aggregate,
    gamma_record,
    run_gamma,
    score_answers,
)
from veracity.methods.whitebox import Scope, Shape, whitebox_gamma
from veracity.runs.common import Context
from veracity.store import RunDir
from veracity.types import Item


@dataclass
class GammaOutcome:
    """Per-item records, aggregates, and the run directory if one was written."""

    records: list[dict[str, Any]]
    results: dict[str, Any]
    run: RunDir | None


def _results(
    records: Sequence[dict[str, Any]], settings: GammaSettings, model: str, embedder: str,
    dataset: str,
) -> dict[str, Any]:
    return {
        "method": "gamma",
        "model": model,
        "embedder": embedder,
        "dataset": dataset,
        "settings": settings.describe(),
        "aggregate": aggregate(records, settings.threshold),
    }


def _save(
    out: Path | None, config: dict[str, Any], records: list[dict[str, Any]],
    results: dict[str, Any], ctx: Context,
) -> RunDir | None:
    if out is None:
        return None
    run = RunDir.create(out, "gamma", config, ctx.started)
    run.write_samples(records)
    run.write_results(results)
    run.finish(ctx.stats())
    return run


def gamma_run(
    items: Sequence[Item],
    model: str,
    embedder: str,
    settings: GammaSettings,
    ctx: Context,
    out: Path | None = None,
    dataset: str = "prompts",
) -> GammaOutcome:
    """Score items with gamma on a model; all generations go through the cache."""
    client = ctx.client(model)
    cached_embedder = ctx.embedder(embedder)
    if settings.ball == EMBEDDING:
        records = whitebox_gamma(
            items, client, cached_embedder, n=settings.n, radius=settings.radius,
            seed=settings.seed, form=settings.form, shape=cast(Shape, settings.shape),
            scope=cast(Scope, settings.scope), sampling=settings.sampling,
        )
    else:
        paraphraser = ctx.client(settings.paraphraser) if settings.paraphraser else None
        records = run_gamma(items, client, cached_embedder, settings, paraphraser)
    results = _results(records, settings, client.spec, cached_embedder.spec, dataset)
    config = {
        "model": client.spec,
        "model_identity": client.backend.identity(),
        "embedder": cached_embedder.spec,
        "dataset": dataset,
        "n_items": len(items),
        "settings": settings.describe() | {"sampling": asdict(settings.sampling)},
        "model_options": ctx.options_record(),
    }
    return GammaOutcome(records, results, _save(out, config, records, results, ctx))


def read_recorded(path: Path) -> list[dict[str, Any]]:
    """Recorded generations: JSONL with prompt, answer, perturbed_answers per line."""
    rows = []
    for number, row in read_objects(path, "recorded file"):
        where = f"{path}, line {number}"
        for name in ("prompt", "answer", "perturbed_answers"):
            if name not in row:
                raise DataError(f"{where}: missing field '{name}'")
        perturbed = row["perturbed_answers"]
        if not isinstance(perturbed, list) or not perturbed:
            raise DataError(f"{where}: 'perturbed_answers' must be a non-empty list")
        if not all(isinstance(a, str) for a in [row["answer"], *perturbed]):
            raise DataError(f"{where}: answers must be strings")
        row.setdefault("id", f"line-{number}")
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no records")
    return rows


def recorded_run(
    path: Path,
    embedder: str,
    ctx: Context,
    form: Form = "sin",
    threshold: float = 0.05,
    out: Path | None = None,
) -> GammaOutcome:
    """Score recorded generations with no model at all."""
    rows = read_recorded(path)
    cached_embedder = ctx.embedder(embedder)
    values = score_answers(
        [r["answer"] for r in rows], [r["perturbed_answers"] for r in rows], cached_embedder, form
    )
    settings = GammaSettings(form=form, threshold=threshold, ball=str(rows[0].get("ball", "recorded")))
    model = str(rows[0].get("model", "recorded"))
    records = []
    for row, value in zip(rows, values, strict=True):
        item = Item(str(row["id"]), str(row["prompt"]))
        record = gamma_record(
            item, row["answer"], row.get("perturbed_prompts", []), row["perturbed_answers"],
            value, settings, str(row.get("model", model)), cached_embedder.spec,
        )
        record["ball"] = row.get("ball", "recorded")
        records.append(record)
    results = _results(records, settings, model, cached_embedder.spec, f"recorded:{path.name}")
    sizes = sorted({len(r["perturbed_answers"]) for r in rows})
    described = {  # what the file says, not generation settings it never used
        "n": sizes[0] if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}",
        "ball": settings.ball, "form": form, "threshold": threshold, "recorded": True,
    }
    results["settings"] = described
    config = {"recorded": str(path), "embedder": cached_embedder.spec, "model": model,
              "dataset": f"recorded:{path.name}", "settings": described,
              "model_options": ctx.options_record()}
    return GammaOutcome(records, results, _save(out, config, records, results, ctx))
