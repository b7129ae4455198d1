"""Validate a gamma run against labels, beside a self-consistency baseline; and import ratings.

``validate_gamma`` reads a gamma run directory, labels every answer (TruthfulQA similarity rule,
gold-string containment, or a judge model), scores the same answers with the sampling
self-consistency baseline on the same model, and writes ``validation.json`` into the run.
``import_ratings`` joins raters' sheets and writes ``ratings.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from veracity.correctness import Labelled, Verdict, label_answers
from veracity.data.qa import load_items
from veracity.data.sample import Sample, Selection
from veracity.errors import ConfigError, DataError
from veracity.methods.consistency.core import ConsistencySettings, consistency_scores
from veracity.methods.gamma.core import ALL_FORMS, Form, Threshold
from veracity.methods.gamma.validation.annotate import (
    analyse_ratings,
    gamma_edges,
    read_all,
    resolve_rubric,
    sheet_rows,
)
from veracity.paths import check_output_file
from veracity.records import RecordError
from veracity.runs.common import Context
from veracity.stats import (
    auroc,
    binned_means,
    bootstrap_aurocs,
    bootstrap_ci,
    percentile_ci,
)
from veracity.store import RATINGS_FILE, VALIDATION_FILE, RunDir, dumps


@dataclass(frozen=True)
class ValidateSettings:
    """How a gamma run is validated; recorded in validation.json."""

    judge: str | None = None
    """Judge model spec; without it, the reference rules decide."""
    embedder: str | None = None
    """Embedder for the TruthfulQA rule and the baseline (default: the run's)."""
    model: str | None = None
    """Model for the baseline (default: the run's)."""
    dataset: str | None = None
    """Dataset spec to re-load references and incorrect answers from (default: the run's)."""
    baseline_samples: int = 5
    """M sampled answers per question for the baseline; 0 skips it."""
    temperature: float = 0.7
    threshold: float = 0.05
    """γ threshold in ``threshold_form`` (None: the paper's paper-code, or the run's own form
    when that is magnitude), converted to the run's form."""
    threshold_form: Form | None = None
    bins: int = 10
    resamples: int = 2000
    seed: int = 0
    level: float = 0.95
    sample: int | None = None
    """Validate a random K of the run's answers (drawn with ``sample_seed``) instead of all."""
    sample_seed: int = 0

    @property
    def selection(self) -> Selection:
        return Selection(None, Sample(self.sample, self.sample_seed) if self.sample else None)


def open_gamma_run(path: Path) -> tuple[RunDir, list[dict[str, Any]]]:
    run = RunDir.open(path)
    if run.method != "gamma":
        raise DataError(f"{path} is a '{run.method}' run, not a gamma run")
    records = list(run.samples())
    if not records:
        raise DataError(f"{path}: the run has no samples")
    for number, record in enumerate(records, 1):
        _check_record(record, f"{run.path / 'samples.jsonl'}, record {number}")
    return run, records


def _check_record(record: dict[str, Any], where: str) -> None:
    """The fields of a gamma record that validation and ratings read."""
    if not isinstance(record.get("prompt"), str):
        raise DataError(f"{where}, field 'prompt': expected a string")
    if not isinstance(record.get("answer"), str | None):
        raise DataError(f"{where}, field 'answer': expected a string or null")
    value = record.get("gamma")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                              or not math.isfinite(value)):
        raise DataError(f"{where}, field 'gamma': expected a number or null")
    if not isinstance(record.get("id", ""), str | int) or not isinstance(
            record.get("metadata", {}), dict):
        raise DataError(f"{where}: 'id' must be a string and 'metadata' an object")


def _reload_metadata(records: list[dict[str, Any]], spec: str) -> None:
    """Fill each record's references and metadata from the dataset, matched by id."""
    try:
        items = {item.id: item for item in load_items(spec)}
    except DataError as exc:
        raise DataError(f"{exc} (the run's dataset is needed for its reference answers; "
                        "pass --dataset SPEC)") from None
    for record in records:
        item = items.get(str(record.get("id")))
        if item is None or item.question != record["prompt"]:
            raise DataError(f"dataset '{spec}' has no question '{record.get('id')}' matching the "
                            "run's prompt: is it the dataset the run used?")
        record["references"] = list(item.references)
        record["metadata"] = dict(item.metadata)


def labelled_items(records: list[dict[str, Any]], config: dict[str, Any],
                   dataset: str | None = None) -> list[Labelled]:
    """What correctness needs per record; old runs without metadata re-read their dataset."""
    spec = dataset or str(config.get("dataset", ""))
    reloadable = spec and spec != "prompts" and not spec.startswith("recorded:")
    if dataset or (reloadable and any("metadata" not in r for r in records)):
        _reload_metadata(records, spec)
    items = []
    for r in records:
        meta = r.get("metadata") or {}
        items.append(Labelled(
            question=str(r["prompt"]), answer=str(r["answer"]),
            correct=tuple(str(a) for a in r.get("references") or ()),
            incorrect=tuple(str(a) for a in meta.get("incorrect_answers") or ()),
        ))
    return items


def _auroc_block(scores: np.ndarray, incorrect: np.ndarray, boot: np.ndarray,
                 level: float) -> dict[str, Any]:
    low, high = percentile_ci(boot, level)
    return {"auroc": auroc(list(scores), list(incorrect)), "ci": [low, high],
            "n": int(incorrect.size), "n_incorrect": int(incorrect.sum()),
            "n_correct": int((~incorrect).sum())}


def _accuracy(correct: Sequence[bool], level: float, seed: int) -> dict[str, Any]:
    values = [float(c) for c in correct]
    low, high = bootstrap_ci(values, level=level, seed=seed)
    return {"accuracy": float(np.mean(values)) if values else math.nan, "ci": [low, high],
            "n": len(values)}


def aggregate(
    gamma: Sequence[float | None], verdicts: Sequence[Verdict],
    baseline: Sequence[float | None] | None, settings: ValidateSettings,
    null: Sequence[float | None] | None = None,
) -> dict[str, Any]:
    """AUROCs with paired bootstrap CIs, accuracy below the threshold, binned accuracy.

    With ``null`` (the numeric control's gamma_null) also the AUROC of gamma - gamma_null and
    of gamma_null alone, on the same questions.
    """
    labelled = [k for k, v in enumerate(verdicts) if v.correct is not None]
    if not labelled:
        raise DataError("no answer could be labelled: the dataset has no reference answers "
                        "(use --judge MODEL)")
    correct = {k: bool(verdicts[k].correct) for k in labelled}
    with_gamma = [k for k in labelled if gamma[k] is not None]
    common = [k for k in with_gamma if (baseline is None or baseline[k] is not None)
              and (null is None or null[k] is not None)]
    incorrect = np.array([not correct[k] for k in common], dtype=bool)

    def scores(values: Sequence[float | None], transform: Any = float) -> np.ndarray:
        return np.array([transform(values[k]) for k in common], dtype=np.float64)

    named = {"gamma": scores(gamma)}
    if baseline is not None:
        named["baseline"] = scores(baseline, lambda v: 1.0 - float(v))
    if null is not None:
        named["gamma_minus_null"] = named["gamma"] - scores(null)
        named["gamma_null"] = scores(null)
    sets = list(named.values())
    boot = (bootstrap_aurocs(sets, list(incorrect), settings.resamples, settings.seed)
            if common else np.full((1, len(sets)), np.nan))
    column = {name: k for k, name in enumerate(named)}
    out: dict[str, Any] = {
        "n_items": len(verdicts),
        "n_labelled": len(labelled),
        "rules": {rule: sum(1 for k in labelled if verdicts[k].rule == rule)
                  for rule in dict.fromkeys(str(verdicts[k].rule) for k in labelled)},
        "n_unlabelled": len(verdicts) - len(labelled),
        "gamma": _auroc_block(sets[0], incorrect, boot[:, 0], settings.level),
        "baseline": None,
        "difference": None,
    }
    if baseline is not None:
        out["baseline"] = _auroc_block(named["baseline"], incorrect, boot[:, column["baseline"]],
                                       settings.level)
        diff = out["gamma"]["auroc"] - out["baseline"]["auroc"]
        out["difference"] = {"auroc": diff, "ci": list(percentile_ci(
            boot[:, 0] - boot[:, column["baseline"]], settings.level))}
    if null is not None:
        for name in ("gamma_minus_null", "gamma_null"):
            out[name] = _auroc_block(named[name], incorrect, boot[:, column[name]], settings.level)
    below = [k for k in with_gamma if float(gamma[k]) < settings.threshold]  # type: ignore[arg-type]
    out["accuracy"] = {
        "threshold": settings.threshold,
        "threshold_form": settings.threshold_form,
        "all": _accuracy([correct[k] for k in labelled], settings.level, settings.seed),
        "scored": _accuracy([correct[k] for k in with_gamma], settings.level, settings.seed),
        "below_threshold": _accuracy([correct[k] for k in below], settings.level, settings.seed),
        "share_below_threshold": len(below) / len(with_gamma) if with_gamma else math.nan,
    }
    xs = [float(gamma[k]) for k in with_gamma]  # type: ignore[arg-type]
    edges = gamma_edges(xs, settings.bins)
    out["bins"] = [
        {"lo": b["lo"], "hi": b["hi"], "n": b["n"], "accuracy": b["mean"], "stderr": b["stderr"]}
        for b in binned_means(xs, [float(correct[k]) for k in with_gamma], edges)
    ]
    return out


SHEET_FILE = "rating_sheet.json"
"""What the last ``annotate export`` of a run wrote: its rubric and which answers."""


def _sheet_rubric(run: RunDir) -> str | None:
    """The rubric id the run's last rating sheet was exported with, if it records one."""
    if SHEET_FILE not in run.info.get("files", []) or not (run.path / SHEET_FILE).is_file():
        return None
    try:
        found = json.loads((run.path / SHEET_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{run.path / SHEET_FILE} is unreadable: {exc}") from None
    value = found.get("rubric_id") if isinstance(found, dict) else None
    return str(value) if value else None


def run_form(config: dict[str, Any]) -> Form:
    """The γ form a gamma run's config names (sin for runs that predate the field)."""
    form = str(config.get("settings", {}).get("form") or "sin")
    if form not in ALL_FORMS:
        raise DataError(f"the run's γ form '{form}' is not one of {', '.join(ALL_FORMS)}")
    return form


def threshold_in(value: float, given: Form | None, form: Form) -> Threshold:
    """A threshold as given (default form: the paper's for angle forms), checked against ``form``."""
    cut = Threshold(value, given) if given else Threshold(value, Threshold.default(form).form)
    cut.to(form)
    return cut


def _no_answer(record: dict[str, Any]) -> bool:
    """Whether the model gave this item no answer at all (older runs: told by a prefix)."""
    error = RecordError.from_json(record.get("error"), record.get("error_kind"))
    return error is not None and error.no_answer


def validate_gamma(path: Path, settings: ValidateSettings, ctx: Context,
                   out: Path | None = None) -> dict[str, Any]:
    """Label the run's answers, run the baseline, and write validation.json into the run."""
    if out is not None:
        check_output_file(out)
    run, every = open_gamma_run(path)
    n_run = len(every)
    every = settings.selection.apply(every)
    # items with no answer from the model (rejected, server fault) have nothing to judge
    rejected = [_no_answer(r) for r in every]
    records = [r for r, no in zip(every, rejected, strict=True) if not no]
    if not records:
        raise DataError(f"{path}: every item failed with a model error; nothing to validate")
    config = run.info.get("config", {})
    embedder_spec = settings.embedder or str(config.get("embedder") or records[0]["embedder"])
    model_spec = settings.model or str(config.get("model") or records[0]["model"])
    items = labelled_items(records, config, settings.dataset)
    embedder = ctx.embedder(embedder_spec)
    judge = ctx.client(settings.judge) if settings.judge else None
    verdicts = label_answers(items, embedder=embedder, judge=judge)
    baseline_scores: list[float | None] | None = None
    baseline_info: dict[str, Any] | None = None
    if settings.baseline_samples > 0:
        if settings.model is None and ("recorded" in config or model_spec == "recorded"):
            raise ConfigError("this run holds recorded generations and names no model: give "
                              "--model SPEC for the baseline, or --baseline-samples 0")
        max_tokens = int(config.get("settings", {}).get("max_tokens", 64))
        baseline_settings = ConsistencySettings(settings.baseline_samples, settings.temperature,
                                                max_tokens, settings.seed)
        found = consistency_scores([str(r["prompt"]) for r in records], ctx.client(model_spec),
                                   embedder, baseline_settings,
                                   greedy=[str(r["answer"]) for r in records])
        baseline_scores = [f.score for f in found]
        baseline_info = baseline_settings.describe() | {"model": model_spec}
    gammas = [r.get("gamma") for r in records]
    nulls = [r.get("gamma_null") for r in records] if "gamma_null" in records[0] else None
    form = run_form(config)
    cut = threshold_in(settings.threshold, settings.threshold_form, form)
    results = aggregate(gammas, verdicts, baseline_scores,
                        replace(settings, threshold=cut.to(form), threshold_form=form), nulls)
    results["accuracy"]["threshold_given"] = {"value": cut.value, "form": cut.form}
    results = {
        "method": "validate-gamma",
        "run": str(path),
        "model": model_spec,
        "embedder": embedder_spec,
        "dataset": config.get("dataset"),
        "gamma_form": config.get("settings", {}).get("form"),
        "settings": asdict(settings),
        "labels": {"judge": settings.judge, "rules": results.pop("rules")},
        "baseline_settings": baseline_info,
        "excluded_model_errors": [r.get("id") for r, no in zip(every, rejected, strict=True) if no],
        "selection": settings.selection.record(n_run, [str(r.get("id")) for r in every]),
        **results,
        "items": [
            {"id": r.get("id"), "gamma": r.get("gamma"), "gamma_null": r.get("gamma_null"),
             "correct": v.correct, "rule": v.rule,
             "evidence": v.evidence,
             "baseline": None if baseline_scores is None else baseline_scores[k]}
            for k, (r, v) in enumerate(zip(records, verdicts, strict=True))
        ],
        "stats": ctx.stats(),
    }
    run.write_json(VALIDATION_FILE, results)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


def import_ratings(path: Path, files: Sequence[Path], threshold: float = 0.05, bins: int = 10,
                   rubric: str = "auto", out: Path | None = None,
                   threshold_form: Form | None = None) -> dict[str, Any]:
    """Join raters' sheets for a gamma run and write ratings.json into it; ``threshold`` is in
    ``threshold_form`` (default: the paper's paper-code) and converted to the run's form."""
    if out is not None:
        check_output_file(out)
    run, records = open_gamma_run(path)
    form = run_form(run.info.get("config", {}))
    cut = threshold_in(threshold, threshold_form, form)
    chosen = resolve_rubric(rubric)
    exported = _sheet_rubric(run)
    if exported is not None and exported != chosen.id:
        raise ConfigError(f"the run's rating sheet was exported with rubric {exported}, not "
                          f"{chosen.id}: ratings on different scales are not pooled; import with "
                          "the rubric the sheet was made with")
    rows = sheet_rows(records, chosen)
    results = {"method": "ratings", "run": str(path),
               "model": run.info.get("config", {}).get("model"),
               "dataset": run.info.get("config", {}).get("dataset")}
    results |= analyse_ratings(records, read_all(files, rows), cut.to(form), bins, chosen)
    results |= {"rubric": chosen.name, "rubric_id": chosen.id}
    results |= {"threshold_form": form, "threshold_given": {"value": cut.value, "form": cut.form}}
    run.write_json(RATINGS_FILE, results)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dumps(results, indent=2) + "\n", encoding="utf-8")
    return results
