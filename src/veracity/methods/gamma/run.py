"""Gamma runs: live (model + embedder) or from recorded generations, into a run directory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from veracity.data.qa import domain_of
from veracity.errors import ConfigError
from veracity.methods.gamma.calibration.core import Calibration
from veracity.methods.gamma.calibration.run import apply_calibration, run_key
from veracity.methods.gamma.control import CONTROLS, add_null_control
from veracity.methods.gamma.core import (
    EMBEDDING,
    Form,
    GammaSettings,
    aggregate,
    measure_gamma,
    perturbed_cosines,
    recorded_record,
    score_answers,
)
from veracity.methods.gamma.recorded import read_recorded
from veracity.methods.gamma.records import GammaRecord
from veracity.methods.gamma.whitebox import Scope, Shape, whitebox_gamma
from veracity.runs.common import Context
from veracity.runs.result import RunResult, save_run
from veracity.store import check_run_target
from veracity.types import Item


def _results(
    records: Sequence[GammaRecord], settings: GammaSettings, model: str, embedder: str,
    dataset: str, domain: str | None = None,
) -> dict[str, Any]:
    return {
        "method": "gamma",
        "model": model,
        "embedder": embedder,
        "dataset": dataset,
        "domain": domain or domain_of(dataset),
        "settings": settings.describe(),
        "aggregate": aggregate(records, settings.cut, settings.form),
    }


def _calibrate(records: list[GammaRecord], results: dict[str, Any],
               calibration: Calibration | None, force: bool) -> list[GammaRecord]:
    """The records with P(correct) and calibrated verdicts; what was used into the results."""
    if calibration is None:
        return records
    curve, choice = calibration.select(run_key(results), force)
    results["calibration"] = choice | {"thresholds": curve.thresholds, "curve": curve.to_dict()}
    return apply_calibration(records, curve)


def _save(
    out: Path | None, config: dict[str, Any], records: list[GammaRecord],
    results: dict[str, Any], ctx: Context,
) -> RunResult[GammaRecord]:
    return save_run(out, "gamma", config, records, results, ctx.started, ctx.stats())


def run_gamma(
    items: Sequence[Item],
    model: str,
    embedder: str,
    settings: GammaSettings,
    ctx: Context,
    out: Path | None = None,
    dataset: str = "prompts",
    calibration: Calibration | None = None,
    force: bool = False,
    domain: str | None = None,
) -> RunResult[GammaRecord]:
    """Score items with gamma on a model; all generations go through the cache.

    ``domain`` names the corpus in comparisons across runs (Table 8's columns; default: the
    dataset's kind, e.g. Web QA, or its file name).

    With ``settings.control`` the numeric null control runs after gamma, on the same answers.
    With ``calibration`` every record gets P(correct) and a calibrated verdict; a calibration
    made for another setup is refused before any model call unless ``force``.
    """
    if settings.control is not None and settings.control not in CONTROLS:
        raise ConfigError(f"unknown control '{settings.control}'; known: {', '.join(CONTROLS)}")
    if out is not None:  # chunk by chunk, in bounded memory
        from veracity.methods.gamma.run_stream import stream_gamma

        return stream_gamma(items, model, embedder, settings, ctx, out, dataset, domain,
                            calibration=calibration, force=force)
    return gamma_in_memory(items, model, embedder, settings, ctx, out, dataset, calibration,
                           force, domain)


def gamma_in_memory(
    items: Sequence[Item], model: str, embedder: str, settings: GammaSettings, ctx: Context,
    out: Path | None = None, dataset: str = "prompts", calibration: Calibration | None = None,
    force: bool = False, domain: str | None = None,
) -> RunResult[GammaRecord]:
    """:func:`run_gamma` with the whole run in memory (no run directory, or to compare)."""
    if out is not None:
        check_run_target(out)  # before any model call
    client = ctx.client(model)
    cached_embedder = ctx.embedder(embedder)
    if calibration is not None:  # refuse a mismatch before any model call
        calibration.select({"model": client.spec, "embedder": cached_embedder.spec,
                            "form": settings.form, "ball": settings.ball, "n": settings.n}, force)
    if settings.ball == EMBEDDING:
        records = whitebox_gamma(
            items, client, cached_embedder, n=settings.n, radius=settings.radius,
            seed=settings.seed, form=settings.form, shape=cast(Shape, settings.shape),
            scope=cast(Scope, settings.scope), sampling=settings.sampling,
        )
    else:
        paraphraser = ctx.client(settings.paraphraser) if settings.paraphraser else None
        records = measure_gamma(items, client, cached_embedder, settings, paraphraser)
    control = None
    if settings.control is not None:
        records, control = add_null_control(records, client, cached_embedder, settings.sampling,
                                   settings.n, settings.form)
    results = _results(records, settings, client.spec, cached_embedder.spec, dataset, domain)
    if control is not None:
        results["control"] = control
    records = _calibrate(records, results, calibration, force)
    config = {
        "model": client.spec,
        "model_identity": client.backend.identity(),
        "embedder": cached_embedder.spec,
        "dataset": dataset,
        "domain": results["domain"],
        "n_items": len(items),
        "settings": settings.describe() | {"sampling": asdict(settings.sampling)},
        "model_options": ctx.options_record(),
    }
    if control is not None:
        config["control"] = {"kind": control["kind"], "n": control["n"],
                             "variations": control["variations"]}
    if calibration is not None:
        config["calibration"] = {k: v for k, v in results["calibration"].items() if k != "curve"}
    return _save(out, config, records, results, ctx)


def run_gamma_recorded(
    path: Path,
    embedder: str,
    ctx: Context,
    form: Form = "sin",
    threshold: float = 0.05,
    out: Path | None = None,
    calibration: Calibration | None = None,
    force: bool = False,
    threshold_form: Form | None = None,
) -> RunResult[GammaRecord]:
    """Score recorded generations with no model at all; ``threshold`` is in ``threshold_form``
    (default: the paper's paper-code for the angle forms)."""
    if out is not None:  # read as a stream, in bounded memory
        from veracity.methods.gamma.run_stream import stream_gamma_recorded

        return stream_gamma_recorded(path, embedder, ctx, form, threshold, out, threshold_form,
                                     calibration=calibration, force=force)
    return gamma_recorded_in_memory(path, embedder, ctx, form, threshold, out, calibration,
                                    force, threshold_form)


def gamma_recorded_in_memory(
    path: Path, embedder: str, ctx: Context, form: Form = "sin", threshold: float = 0.05,
    out: Path | None = None, calibration: Calibration | None = None, force: bool = False,
    threshold_form: Form | None = None,
) -> RunResult[GammaRecord]:
    """:func:`run_gamma_recorded` with the whole file in memory."""
    if out is not None:
        check_run_target(out)  # before any model call
    rows = read_recorded(path)
    cached_embedder = ctx.embedder(embedder)
    values = score_answers(
        [r["answer"] for r in rows], [r["perturbed_answers"] for r in rows], cached_embedder, form
    )
    settings = GammaSettings(form=form, threshold=threshold, threshold_form=threshold_form,
                             ball=str(rows[0].get("ball", "recorded")))
    model = str(rows[0].get("model", "recorded"))
    cosines = perturbed_cosines([r["answer"] for r in rows], [r["perturbed_answers"] for r in rows],
                                cached_embedder)
    records = [recorded_record(row, value, cos, settings, model, cached_embedder.spec)
               for row, value, cos in zip(rows, values, cosines, strict=True)]
    results = _results(records, settings, model, cached_embedder.spec, f"recorded:{path.name}")
    sizes = sorted({len(r["perturbed_answers"]) for r in rows})
    described = {  # what the file says, not generation settings it never used
        "n": sizes[0] if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}",
        "ball": settings.ball, "form": form, "threshold": settings.applied_threshold,
        "threshold_given": {"value": threshold, "form": settings.cut.form}, "recorded": True,
    }
    results["settings"] = described
    records = _calibrate(records, results, calibration, force)
    config = {"recorded": str(path), "embedder": cached_embedder.spec, "model": model,
              "dataset": f"recorded:{path.name}", "settings": described,
              "model_options": ctx.options_record()}
    return _save(out, config, records, results, ctx)
