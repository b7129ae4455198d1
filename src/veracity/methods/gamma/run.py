"""γ runs, live (model + embedder) or from recorded generations, chunk by chunk.

Each chunk of items goes through generate, embed and score; its records go to the run
directory's samples.jsonl as soon as they are scored (or to a list, without one). The
aggregates are running sums (:class:`~veracity.methods.gamma.running.RunningGamma`), equal to
the last digit whatever the chunks. Every answer is cached as it arrives, so a run cut short
in the middle of a chunk resumes with no repeated model call. The embedder's memory of vectors
is bounded (:class:`~veracity.client.CachedEmbedder`), so it does not grow either. A
calibration curve is chosen before any model call and applied to each chunk as it is scored;
the numeric null control answers each chunk's prompts again and keeps running sums too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from itertools import chain
from pathlib import Path
from typing import Any, cast

from veracity.client import CachedEmbedder, LLMClient
from veracity.data.jsonl import stream_objects
from veracity.data.qa import domain_of
from veracity.errors import ConfigError, DataError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.calibration.core import Calibration, Curve
from veracity.methods.gamma.calibration.run import apply_calibration, run_key
from veracity.methods.gamma.control import (
    CONTROLS,
    ControlPath,
    RunningControl,
    null_control,
    variations,
)
from veracity.methods.gamma.core import (
    EMBEDDING,
    Form,
    GammaSettings,
    check_prompt,
    measure_gamma,
    perturbed_cosines,
    recorded_record,
    score_answers,
)
from veracity.methods.gamma.paraphrase import PARAPHRASE
from veracity.methods.gamma.records import GammaAggregate, GammaRecord, GammaResults, GivenCut
from veracity.methods.gamma.running import RunningGamma
from veracity.methods.gamma.whitebox.core import Scope, Shape, check_ball, whitebox_gamma
from veracity.runs.common import Context
from veracity.runs.driver import Finish, RunPlan, Tally, check_target, drive
from veracity.runs.result import RunResult
from veracity.streaming import chunks, one_bar
from veracity.types import Item

RECORDED_CHUNK = 2048
"""Recorded items per chunk: (N+1) texts each to embed."""
LIVE_CHUNK = 256
"""Questions per chunk of a live run: (N+1) generations each, sent to the backend at once."""


@dataclass(frozen=True)
class GammaRunConfig:
    """run.json's ``config`` of a live γ run."""

    model: str
    model_identity: JsonObject
    """What besides the request changes the model's outputs (the backend's identity)."""
    embedder: str
    dataset: str
    domain: str
    n_items: int
    settings: GammaSettings
    model_options: JsonObject
    """The providers' options as resolved (no key values)."""
    control: tuple[ControlPath, ...] | None = None
    """The numeric null control's compute paths, when it runs."""
    calibration: Mapping[str, Any] | None = None
    """The calibration curve chosen for the run (its key and thresholds), when one is."""

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "model": self.model, "model_identity": self.model_identity,
            "embedder": self.embedder, "dataset": self.dataset, "domain": self.domain,
            "n_items": self.n_items,
            "settings": self.settings.describe() | {"sampling": asdict(self.settings.sampling)},
            "model_options": self.model_options,
        }
        if self.control is not None:
            out["control"] = {"kind": "numeric", "n": len(self.control),
                              "variations": [p.to_json() for p in self.control]}
        if self.calibration is not None:
            out["calibration"] = {k: v for k, v in self.calibration.items() if k != "curve"}
        return out


@dataclass(frozen=True)
class RecordedRunConfig:
    """run.json's ``config`` of a γ run scored from recorded generations."""

    recorded: str
    """The recorded file."""
    embedder: str
    model: str
    """The model the file names (``recorded`` when it names none)."""
    dataset: str
    settings: Mapping[str, Any]
    """The settings as the file and the options describe them."""
    model_options: JsonObject

    def to_json(self) -> JsonObject:
        return {"recorded": self.recorded, "embedder": self.embedder, "model": self.model,
                "dataset": self.dataset, "settings": self.settings,
                "model_options": self.model_options}


def _named(aggregate: GammaAggregate, settings: GammaSettings) -> GammaAggregate:
    """The aggregate with its threshold's form and the threshold as given, as
    :func:`veracity.methods.gamma.aggregate` names them."""
    cut = settings.cut
    return replace(aggregate, threshold_form=settings.form,
                   threshold_given=GivenCut(cut.value, cut.form))


def _choose(calibration: Calibration | None, results: dict[str, Any],
            force: bool) -> tuple[Curve | None, dict[str, Any] | None]:
    """The curve for this run and what results.json records of it; a mismatch is refused
    unless ``force``. Nothing without a calibration."""
    if calibration is None:
        return None, None
    curve, choice = calibration.select(run_key(results), force)
    return curve, choice | {"thresholds": curve.thresholds, "curve": curve.to_dict()}


def _calibrated(batches: Iterable[list[GammaRecord]],
                curve: Curve | None) -> Iterator[list[GammaRecord]]:
    """Each batch with P(correct) and the calibrated verdict when there is a curve."""
    for records in batches:
        yield records if curve is None else apply_calibration(records, curve)


def _measured(chunk: Sequence[Item], client: LLMClient, cached: CachedEmbedder,
              settings: GammaSettings, paraphraser: LLMClient | None,
              control: RunningControl | None) -> list[GammaRecord]:
    """One chunk's γ records under the settings' ball, with the null control's fields when
    there is one."""
    if settings.ball == EMBEDDING:  # each item's ball seeded on its own: chunks change nothing
        records = whitebox_gamma(chunk, client, cached, n=settings.n, radius=settings.radius,
                                 seed=settings.seed, form=settings.form,
                                 shape=cast(Shape, settings.shape),
                                 scope=cast(Scope, settings.scope), sampling=settings.sampling)
    else:
        records = measure_gamma(chunk, client, cached, settings, paraphraser)
    if control is None:
        return records
    return null_control(records, client, cached, settings.sampling, control.compute_paths,
                        settings.form)


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
    chunk_size: int = LIVE_CHUNK,
) -> RunResult[GammaRecord, GammaResults]:
    """Score items with gamma on a model, ``chunk_size`` questions at a time, under any ball;
    all generations go through the cache.

    ``domain`` names the corpus in comparisons across runs (Table 8's columns; default: the
    dataset's kind, e.g. Web QA, or its file name).

    With ``settings.control`` the numeric null control runs after gamma, on the same answers.
    With ``calibration`` every record gets P(correct) and a calibrated verdict; a calibration
    made for another setup is refused before any model call unless ``force``.
    """
    if settings.control is not None and settings.control not in CONTROLS:
        raise ConfigError(f"unknown control '{settings.control}'; known: {', '.join(CONTROLS)}")
    check_target(out)  # before any model call
    for item in items:
        check_prompt(item.question, f"item {item.id}")
    client = ctx.client(model)
    if settings.ball == EMBEDDING:
        check_ball(client, settings.n, settings.radius, settings.shape, settings.scope)
    cached = ctx.embedder(embedder)
    paraphraser = ctx.client(settings.paraphraser) if settings.paraphraser else None
    domain = domain or domain_of(dataset)
    results: JsonObject = {
        "method": "gamma", "model": client.spec, "embedder": cached.spec, "dataset": dataset,
        "domain": domain, "settings": settings.describe()}
    curve, calibrated = _choose(calibration, results, force)  # before any model call
    control = None
    if settings.control is not None:
        control = RunningControl(variations(client, settings.n))
    config = GammaRunConfig(
        client.spec, client.backend.identity(), cached.spec, dataset, domain, len(items),
        settings, ctx.options_record(),
        None if control is None else tuple(control.compute_paths), calibrated)
    running = RunningGamma(settings.applied_threshold)
    batches = _calibrated((_measured(chunk, client, cached, settings, paraphraser, control)
                           for chunk in chunks(items, chunk_size)), curve)

    def finish() -> Finish[GammaResults]:
        summary = GammaResults(client.spec, cached.spec, dataset, domain, settings.describe(),
                               _named(running.result(), settings),
                               None if control is None else control.result(), calibrated)
        # the options as the backend resolved them
        return Finish(summary, stats=ctx.stats(),
                      config=replace(config, model_options=ctx.options_record()))

    # the paraphrases are asked in stages of their own, as many as it takes, and the control
    # skips rejected items: no total then
    total = None if paraphraser is not None or settings.ball == PARAPHRASE \
        or control is not None else len(items) * (settings.n + 1)
    tallies: list[Tally[GammaRecord]] = [running, *([control] if control else [])]
    with one_bar([client, *([paraphraser] if paraphraser else [])], ctx.progress,
                 "gamma: answers", total):
        return drive(out, RunPlan("gamma", GammaRecord, config, ctx.started), batches, tallies,
                     finish)


def recorded_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The checked lines of a recorded file, one at a time."""
    from veracity.methods.gamma.recorded import recorded_row

    for number, row in stream_objects(path, "recorded file"):
        yield recorded_row(path, number, row)


def _score_recorded(rows: list[dict[str, Any]], settings: GammaSettings, model: str,
                    cached: Any, form: Form, sizes: set[int]) -> list[GammaRecord]:
    answers = [r["answer"] for r in rows]
    perturbed = [r["perturbed_answers"] for r in rows]
    values = score_answers(answers, perturbed, cached, form)
    cosines = perturbed_cosines(answers, perturbed, cached)
    sizes.update(len(p) for p in perturbed)
    return [recorded_record(row, value, cos, settings, model, cached.spec)
            for row, value, cos in zip(rows, values, cosines, strict=True)]


def _n_of(sizes: set[int]) -> int | str:
    """N of a recorded file: one size, or the range of sizes it mixes."""
    low, high = min(sizes), max(sizes)
    return low if low == high else f"{low}-{high}"


def _described_n(path: Path) -> int | str:
    """N of a recorded file, from one pass over it that keeps only the sizes seen."""
    return _n_of({len(row["perturbed_answers"]) for row in recorded_rows(path)})


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
    chunk_size: int = RECORDED_CHUNK,
) -> RunResult[GammaRecord, GammaResults]:
    """Score recorded generations with no model at all, reading the file as a stream (memory
    that does not grow with the file); ``threshold`` is in ``threshold_form`` (default: the
    paper's paper-code for the angle forms).

    With ``calibration`` the file is read twice: first for its N (part of the curve's key),
    so a mismatch is refused before anything is embedded."""
    check_target(out)
    rows = recorded_rows(path)
    first = next(rows, None)
    if first is None:
        raise DataError(f"{path}: no records")
    cached = ctx.embedder(embedder)
    ball = str(first.get("ball", "recorded"))
    model = str(first.get("model", "recorded"))
    settings = GammaSettings(form=form, threshold=threshold, threshold_form=threshold_form,
                             ball=ball)
    dataset = f"recorded:{path.name}"
    described: JsonObject = {
        "n": None if calibration is None else _described_n(path), "ball": ball, "form": form,
        "threshold": settings.applied_threshold,
        "threshold_given": {"value": threshold, "form": settings.cut.form}, "recorded": True,
    }
    results: JsonObject = {"method": "gamma", "model": model, "embedder": cached.spec,
                           "dataset": dataset, "domain": domain_of(dataset),
                           "settings": described}
    curve, calibrated = _choose(calibration, results, force)  # before anything is embedded
    config = RecordedRunConfig(str(path), cached.spec, model, dataset, dict(described),
                               ctx.options_record())
    running = RunningGamma(settings.applied_threshold)
    sizes: set[int] = set()
    batches = _calibrated((_score_recorded(chunk, settings, model, cached, form, sizes)
                           for chunk in chunks(chain([first], rows), chunk_size)), curve)

    def finish() -> Finish[GammaResults]:
        described["n"] = _n_of(sizes)
        summary = GammaResults(model, cached.spec, dataset, domain_of(dataset), described,
                               _named(running.result(), settings), None, calibrated)
        return Finish(summary, stats=ctx.stats(),
                      config=replace(config, settings=described,
                                     model_options=ctx.options_record()))

    return drive(out, RunPlan("gamma", GammaRecord, config, ctx.started), batches, [running],
                 finish)
