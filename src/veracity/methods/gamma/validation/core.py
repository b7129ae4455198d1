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
from veracity.jsontypes import JsonObject
from veracity.methods.consistency.core import ConsistencySettings, consistency_scores
from veracity.methods.gamma.core import ALL_FORMS, Form, Threshold
from veracity.methods.gamma.records import GivenCut, cut_text
from veracity.methods.gamma.validation.annotate import (
    RatingsAnalysis,
    Rubric,
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


@dataclass(frozen=True)
class AurocBlock:
    """AUROC for flagging incorrect answers, with its percentile bootstrap interval."""

    auroc: float
    ci: tuple[float, float]
    n: int
    n_incorrect: int
    n_correct: int


@dataclass(frozen=True)
class Difference:
    """γ's AUROC minus the baseline's, with the paired bootstrap interval."""

    auroc: float
    ci: tuple[float, float]


@dataclass(frozen=True)
class Accuracy:
    """Share of answers judged correct, with its bootstrap interval."""

    accuracy: float
    ci: tuple[float, float]
    n: int


@dataclass(frozen=True)
class AccuracySection:
    threshold: float
    """In the run's form (``threshold_form``)."""
    threshold_form: Form | None
    all: Accuracy
    scored: Accuracy
    below_threshold: Accuracy
    share_below_threshold: float
    given: Threshold | None = None
    """The threshold as the user gave it, when recorded."""


@dataclass(frozen=True)
class AccuracyBin:
    lo: float
    hi: float
    n: int
    accuracy: float
    stderr: float | None


@dataclass(frozen=True)
class Aggregate:
    """What :func:`aggregate` finds: AUROCs, accuracy below the threshold, binned accuracy."""

    n_items: int
    n_labelled: int
    rules: dict[str, int]
    """Answers labelled by each rule."""
    n_unlabelled: int
    gamma: AurocBlock
    accuracy: AccuracySection
    bins: list[AccuracyBin]
    baseline: AurocBlock | None = None
    difference: Difference | None = None
    gamma_minus_null: AurocBlock | None = None
    gamma_null: AurocBlock | None = None

    def to_json(self) -> JsonObject:
        """validation.json's figures (the rules are recorded under ``labels``)."""
        out: JsonObject = {
            "n_items": self.n_items, "n_labelled": self.n_labelled,
            "n_unlabelled": self.n_unlabelled, "gamma": asdict(self.gamma),
            "baseline": None if self.baseline is None else asdict(self.baseline),
            "difference": None if self.difference is None else asdict(self.difference),
        }
        if self.gamma_minus_null is not None and self.gamma_null is not None:
            out["gamma_minus_null"] = asdict(self.gamma_minus_null)
            out["gamma_null"] = asdict(self.gamma_null)
        acc = self.accuracy
        accuracy = {"threshold": acc.threshold, "threshold_form": acc.threshold_form,
                    "all": asdict(acc.all), "scored": asdict(acc.scored),
                    "below_threshold": asdict(acc.below_threshold),
                    "share_below_threshold": acc.share_below_threshold}
        if acc.given is not None:
            accuracy["threshold_given"] = {"value": acc.given.value, "form": acc.given.form}
        return out | {"accuracy": accuracy, "bins": [asdict(b) for b in self.bins]}


def _auroc_block(scores: np.ndarray, incorrect: np.ndarray, boot: np.ndarray,
                 level: float) -> AurocBlock:
    return AurocBlock(auroc(list(scores), list(incorrect)), percentile_ci(boot, level),
                      int(incorrect.size), int(incorrect.sum()), int((~incorrect).sum()))


def _accuracy(correct: Sequence[bool], level: float, seed: int) -> Accuracy:
    values = [float(c) for c in correct]
    return Accuracy(float(np.mean(values)) if values else math.nan,
                    bootstrap_ci(values, level=level, seed=seed), len(values))


def aggregate(
    gamma: Sequence[float | None], verdicts: Sequence[Verdict],
    baseline: Sequence[float | None] | None, settings: ValidateSettings,
    null: Sequence[float | None] | None = None,
) -> Aggregate:
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

    def block(name: str) -> AurocBlock:
        return _auroc_block(named[name], incorrect, boot[:, column[name]], settings.level)

    gamma_block = block("gamma")
    baseline_block = difference = None
    if baseline is not None:
        baseline_block = block("baseline")
        difference = Difference(gamma_block.auroc - baseline_block.auroc, percentile_ci(
            boot[:, 0] - boot[:, column["baseline"]], settings.level))
    below = [k for k in with_gamma if float(gamma[k]) < settings.threshold]  # type: ignore[arg-type]
    accuracy = AccuracySection(
        threshold=settings.threshold,
        threshold_form=settings.threshold_form,
        all=_accuracy([correct[k] for k in labelled], settings.level, settings.seed),
        scored=_accuracy([correct[k] for k in with_gamma], settings.level, settings.seed),
        below_threshold=_accuracy([correct[k] for k in below], settings.level, settings.seed),
        share_below_threshold=len(below) / len(with_gamma) if with_gamma else math.nan,
    )
    xs = [float(gamma[k]) for k in with_gamma]  # type: ignore[arg-type]
    edges = gamma_edges(xs, settings.bins)
    return Aggregate(
        n_items=len(verdicts),
        n_labelled=len(labelled),
        rules={rule: sum(1 for k in labelled if verdicts[k].rule == rule)
               for rule in dict.fromkeys(str(verdicts[k].rule) for k in labelled)},
        n_unlabelled=len(verdicts) - len(labelled),
        gamma=gamma_block, baseline=baseline_block, difference=difference,
        gamma_minus_null=None if null is None else block("gamma_minus_null"),
        gamma_null=None if null is None else block("gamma_null"),
        accuracy=accuracy,
        bins=[AccuracyBin(float(b["lo"]), float(b["hi"]), int(b["n"]), float(b["mean"]),
                          None if b["stderr"] is None else float(b["stderr"]))
              for b in binned_means(xs, [float(correct[k]) for k in with_gamma], edges)],
    )


@dataclass(frozen=True)
class Baseline:
    """The self-consistency baseline a validation ran: its settings and the model it asked."""

    settings: ConsistencySettings
    model: str

    def to_json(self) -> JsonObject:
        return self.settings.describe() | {"model": self.model}


@dataclass(frozen=True)
class ValidationItem:
    """One validated answer: its γ, its label and how it was found, the baseline's score."""

    id: Any
    """The record's id as samples.jsonl holds it."""
    gamma: float | None
    gamma_null: float | None
    verdict: Verdict
    baseline: float | None

    def to_json(self) -> JsonObject:
        return {"id": self.id, "gamma": self.gamma, "gamma_null": self.gamma_null,
                "correct": self.verdict.correct, "rule": self.verdict.rule,
                "evidence": self.verdict.evidence, "baseline": self.baseline}


@dataclass(frozen=True)
class ValidationResults:
    """What ``validate gamma`` finds; validation.json is its ``to_json()``."""

    run: str
    model: str
    embedder: str
    dataset: str | None
    gamma_form: str | None
    settings: ValidateSettings
    aggregate: Aggregate
    baseline: Baseline | None
    endpoints_from_run: list[str]
    """Endpoints taken from the run's own record, as lines to show."""
    excluded_model_errors: list[Any]
    """Ids of the items the model gave no answer to."""
    selection: dict[str, Any]
    items: tuple[ValidationItem, ...]
    stats: dict[str, Any]

    def to_json(self) -> JsonObject:
        return {
            "method": "validate-gamma", "run": self.run, "model": self.model,
            "embedder": self.embedder, "dataset": self.dataset, "gamma_form": self.gamma_form,
            "settings": asdict(self.settings),
            "labels": {"judge": self.settings.judge, "rules": self.aggregate.rules},
            "baseline_settings": None if self.baseline is None else self.baseline.to_json(),
            "endpoints_from_run": self.endpoints_from_run,
            "excluded_model_errors": self.excluded_model_errors, "selection": self.selection,
            **self.aggregate.to_json(),
            "items": [item.to_json() for item in self.items],
            "stats": self.stats,
        }


@dataclass(frozen=True)
class RatingsResults:
    """What ``annotate import`` finds; ratings.json is its ``to_json()``."""

    run: str
    model: str | None
    dataset: str | None
    analysis: RatingsAnalysis
    rubric: Rubric
    threshold_form: str
    """The run's γ form, the one ``analysis.threshold`` is in."""
    threshold_given: GivenCut

    def to_json(self) -> JsonObject:
        return {"method": "ratings", "run": self.run, "model": self.model,
                "dataset": self.dataset, **self.analysis.to_json(),
                "rubric": self.rubric.name, "rubric_id": self.rubric.id,
                "threshold_form": self.threshold_form,
                "threshold_given": {"value": self.threshold_given.value,
                                    "form": self.threshold_given.form}}

    def threshold_text(self) -> str:
        """The threshold applied, and as given (:func:`cut_text`)."""
        return cut_text(self.analysis.threshold, self.threshold_form, self.threshold_given)


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
                   out: Path | None = None) -> ValidationResults:
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
    # the run's own model and embedder are asked where the run asked them
    endpoints = ctx.reuse_endpoints(config, () if settings.model else (model_spec,),
                                    () if settings.embedder else (embedder_spec,))
    embedder = ctx.embedder(embedder_spec)
    judge = ctx.client(settings.judge) if settings.judge else None
    verdicts = label_answers(items, embedder=embedder, judge=judge)
    baseline_scores: list[float | None] | None = None
    baseline_info: Baseline | None = None
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
        baseline_info = Baseline(baseline_settings, model_spec)
    gammas = [r.get("gamma") for r in records]
    nulls = [r.get("gamma_null") for r in records] if "gamma_null" in records[0] else None
    form = run_form(config)
    cut = threshold_in(settings.threshold, settings.threshold_form, form)
    agg = aggregate(gammas, verdicts, baseline_scores,
                    replace(settings, threshold=cut.to(form), threshold_form=form), nulls)
    agg = replace(agg, accuracy=replace(agg.accuracy, given=cut))
    results = ValidationResults(
        run=str(path), model=model_spec, embedder=embedder_spec,
        dataset=config.get("dataset"), gamma_form=config.get("settings", {}).get("form"),
        settings=settings, aggregate=agg, baseline=baseline_info, endpoints_from_run=endpoints,
        excluded_model_errors=[r.get("id") for r, no in zip(every, rejected, strict=True) if no],
        selection=settings.selection.record(n_run, [str(r.get("id")) for r in every]),
        items=tuple(
            ValidationItem(r.get("id"), r.get("gamma"), r.get("gamma_null"), v,
                           None if baseline_scores is None else baseline_scores[k])
            for k, (r, v) in enumerate(zip(records, verdicts, strict=True))),
        stats=ctx.stats(),
    )
    written = results.to_json()
    run.write_json(VALIDATION_FILE, written)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dumps(written, indent=2) + "\n", encoding="utf-8")
    return results


def import_ratings(path: Path, files: Sequence[Path], threshold: float = 0.05, bins: int = 10,
                   rubric: str = "auto", out: Path | None = None,
                   threshold_form: Form | None = None) -> RatingsResults:
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
    config = run.info.get("config", {})
    results = RatingsResults(
        str(path), config.get("model"), config.get("dataset"),
        analyse_ratings(records, read_all(files, rows), cut.to(form), bins, chosen), chosen,
        form, GivenCut(cut.value, cut.form))
    written = results.to_json()
    run.write_json(RATINGS_FILE, written)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dumps(written, indent=2) + "\n", encoding="utf-8")
    return results
