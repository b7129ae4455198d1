"""``calibrate``: fit gamma -> P(correct) from validated gamma runs; apply a fit to records."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.errors import DataError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.calibration.core import KEY_FIELDS, Calibration, Curve, fit_curve
from veracity.methods.gamma.calibration.trust import verdict
from veracity.methods.gamma.records import GammaRecord
from veracity.store import VALIDATION_FILE, RunDir, dumps


def run_key(results: dict[str, Any]) -> JsonObject:
    """(model, embedder, form, ball, N) of a gamma run's results."""
    settings = results.get("settings") or {}
    return {"model": results.get("model"), "embedder": results.get("embedder"),
            "form": settings.get("form"), "ball": settings.get("ball"), "n": settings.get("n")}


def labelled_points(path: Path) -> tuple[dict[str, Any], list[float], list[bool]]:
    """A validated gamma run's key and its (gamma, correct) pairs."""
    run = RunDir.open(path)
    if run.method != "gamma":
        raise DataError(f"{path} is a '{run.method}' run, not a gamma run")
    target = run.path / VALIDATION_FILE
    if not target.is_file():
        raise DataError(f"{path} has no labels ({VALIDATION_FILE}): run 'veracity validate gamma "
                        f"{path}' first")
    try:
        items = json.loads(target.read_text(encoding="utf-8"))["items"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DataError(f"{target} is not a validation file: {exc}") from None
    found = [(float(i["gamma"]), bool(i["correct"])) for i in items
             if i.get("gamma") is not None and i.get("correct") is not None]
    return run_key(run.results), [g for g, _ in found], [c for _, c in found]


def calibrate(
    paths: Sequence[Path], out: Path, target_precision: float = 0.9, target_recall: float = 0.9,
    resamples: int = 200, holdout: float = 0.5, bins: int = 10, seed: int = 0,
) -> Calibration:
    """One curve per (model, embedder, form, ball, N) found among the runs; writes ``out``."""
    groups: dict[str, tuple[dict[str, Any], list[float], list[bool], list[str]]] = {}
    for path in paths:
        key, gammas, correct = labelled_points(path)
        name = json.dumps([key[f] for f in KEY_FIELDS])
        group = groups.setdefault(name, (key, [], [], []))
        group[1].extend(gammas)
        group[2].extend(correct)
        group[3].append(str(path))
    curves = []
    for key, gammas, correct, runs in groups.values():
        if not gammas:
            raise DataError(f"runs {', '.join(runs)} have no labelled answer with a gamma")
        curves.append(fit_curve(key, gammas, correct, runs, target_precision, target_recall,
                                resamples, holdout, bins, seed))
    settings = {"target_precision": target_precision, "target_recall": target_recall,
                "resamples": resamples, "holdout": holdout, "bins": bins, "seed": seed}
    calibration = Calibration(curves, source=str(out), settings=settings)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dumps(calibration.to_dict(), indent=2) + "\n", encoding="utf-8")
    return calibration


def apply_calibration(records: Sequence[GammaRecord], curve: Curve) -> list[GammaRecord]:
    """The records with ``p_correct``, its bootstrap band and the calibrated ``verdict``."""
    thresholds = curve.verdict_thresholds()
    out = []
    for record in records:
        band = curve.band(record.gamma)
        out.append(record.with_extra(p_correct=curve.p_correct(record.gamma),
                                     p_correct_band=None if band is None else list(band),
                                     verdict=verdict(record.gamma, thresholds)))
    return out
