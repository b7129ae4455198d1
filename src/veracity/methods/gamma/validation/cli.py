"""``veracity validate gamma`` and ``veracity annotate export|import``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from veracity.cli.lifecycle import command_run
from veracity.cli.options import (
    SEED,
    THRESHOLD,
    CommonOptions,
    Finite,
    common_options,
    handles_errors,
    options_as,
    sample_options,
    selection_of,
)
from veracity.cli.output import echo
from veracity.methods.gamma.core import ALL_FORMS, Form
from veracity.methods.gamma.presets import preset_option, with_preset
from veracity.methods.gamma.records import GivenCut, cut_text
from veracity.methods.gamma.validation.anchors import ANCHOR_CHOICES
from veracity.methods.gamma.validation.annotate import export_sheet, resolve_rubric
from veracity.methods.gamma.validation.core import (
    SHEET_FILE,
    AurocBlock,
    Difference,
    ValidateSettings,
    import_ratings,
    open_gamma_run,
    validate_gamma,
)
from veracity.report import build_report
from veracity.runlock import run_dir_claimed
from veracity.store import dumps

RUN = click.Path(path_type=Path, exists=True, file_okay=False)


def _num(value: Any, digits: int = 3) -> str:
    return "—" if value is None or value != value else f"{value:.{digits}f}"


def _ci(block: AurocBlock | Difference) -> str:
    low, high = block.ci
    return f"{_num(block.auroc)}  [{_num(low)}, {_num(high)}]"


@dataclass(frozen=True)
class ValidateOptions:
    """``veracity validate gamma``'s options."""

    run: Path
    judge: str | None
    baseline_samples: int
    temperature: float
    threshold: float
    threshold_form: Form | None
    bins: int
    resamples: int
    seed: int
    embedder: str | None
    model: str | None
    dataset: str | None
    sample: int | None
    sample_seed: int
    out: Path | None
    as_json: bool
    common: CommonOptions = CommonOptions()

    def settings(self) -> ValidateSettings:
        sample = selection_of(self.sample, self.sample_seed).sample
        return ValidateSettings(judge=self.judge, embedder=self.embedder, model=self.model,
                                dataset=self.dataset, baseline_samples=self.baseline_samples,
                                temperature=self.temperature, threshold=self.threshold,
                                bins=self.bins, resamples=self.resamples, seed=self.seed,
                                sample=sample.k if sample else None,
                                sample_seed=sample.seed if sample else 0,
                                threshold_form=self.threshold_form)


@dataclass(frozen=True)
class ExportOptions:
    """``veracity annotate export``'s options."""

    run: Path
    out: Path
    rubric: str
    sample: int | None
    sample_seed: int
    preset: str | None
    anchors: str | None = None


def _rebuild_report(path: Path) -> Path:
    with run_dir_claimed(path):
        return build_report([path], path / "report.html", title=f"veracity: {path.name}")


@click.group()
def validate() -> None:
    """Check a method's scores against labelled answers."""


@validate.command("gamma")
@click.argument("run", type=RUN)
@click.option("--judge", help="Judge model spec (asked CORRECT / INCORRECT) instead of the "
                              "reference rules.")
@click.option("--baseline-samples", type=click.IntRange(0, 100), default=5, show_default=True,
              help="M sampled answers per question for the self-consistency baseline (0: skip).")
@click.option("--temperature", type=Finite(0.0, 10.0, min_open=True), default=0.7,
              show_default=True, help="Sampling temperature of the baseline.")
@click.option("--threshold", type=THRESHOLD, default=0.05, show_default=True,
              help="Accuracy of answers with γ below this vs all answers.")
@click.option("--threshold-form", type=click.Choice(ALL_FORMS), default=None,
              help="Form --threshold is written in (default: paper-code, the paper's; "
                   "converted to the run's form).")
@click.option("--bins", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="γ bins of the accuracy-vs-γ plot.")
@click.option("--resamples", type=click.IntRange(100, 1_000_000), default=2000, show_default=True,
              help="Bootstrap resamples for the confidence intervals.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--embedder", "-e", help="Embedder for the TruthfulQA rule and the baseline "
                                       "(default: the run's).")
@click.option("--model", "-m", help="Model for the baseline (default: the run's).")
@click.option("--dataset", help="Re-read reference answers from this dataset spec "
                                "(default: the run's, when its samples lack them).")
@sample_options
@click.option("--out", type=click.Path(path_type=Path),
              help="Also write the results to this JSON file.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@common_options
@handles_errors
@options_as(ValidateOptions)
def validate_gamma_command(o: ValidateOptions) -> None:
    """AUROC of γ for flagging incorrect answers of a gamma RUN, beside a baseline.

    Labels come from the dataset's references (TruthfulQA: nearest correct vs incorrect
    reference answer; other datasets: the answer contains a gold answer) or from --judge. The
    baseline asks the same model the same questions M times at --temperature and scores the
    mean cosine to the greedy answer (UQLM's cosine scorer). Writes validation.json into RUN.
    """
    run, settings = o.run, o.settings()
    with command_run(o.common) as cmd:
        results = validate_gamma(run, settings, cmd.ctx, o.out)
    report = _rebuild_report(run)
    for note in results.endpoints_from_run:
        echo(f"using {note}", err=True)
    if o.as_json:
        echo(dumps({k: v for k, v in results.to_json().items() if k != "items"}, indent=2))
        return
    agg = results.aggregate
    acc = agg.accuracy
    rules = ", ".join(f"{n} by {rule}" for rule, n in agg.rules.items())
    echo(f"labelled {agg.n_labelled} of {agg.n_items} answers ({rules}); "
               f"accuracy {_num(acc.all.accuracy)}")
    given = None if acc.given is None else GivenCut(acc.given.value, acc.given.form)
    echo(f"accuracy of answers with {cut_text(acc.threshold, acc.threshold_form, given)}: "
               f"{_num(acc.below_threshold.accuracy)} (n = {acc.below_threshold.n}, "
               f"{100 * (acc.share_below_threshold or 0):.1f}% of scored answers)")
    g = agg.gamma
    echo(f"\nAUROC for flagging incorrect answers (n = {g.n}: {g.n_incorrect} "
               f"incorrect, {g.n_correct} correct), 95% bootstrap CI:")
    lines: list[tuple[str, AurocBlock | Difference]] = [("γ", g)]
    if results.baseline is not None and agg.baseline is not None and agg.difference is not None:
        b = results.baseline.settings
        lines += [(f"self-consistency (M={b.m}, T={b.temperature})", agg.baseline),
                  ("difference γ − baseline", agg.difference)]
    if agg.gamma_minus_null is not None and agg.gamma_null is not None:
        lines += [("γ − γ_null (numeric control)", agg.gamma_minus_null),
                  ("γ_null alone", agg.gamma_null)]
    for name, block in lines:
        echo(f"  {name:<34} {_ci(block)}")
    echo(f"\n{cmd.calls_line()}")
    echo(f"validation: {run / 'validation.json'}\nreport: {report}")


@click.group()
def annotate() -> None:
    """Human ratings of a gamma run's answers (0-5 rubric; γ hidden from raters)."""


@annotate.command("export")
@click.argument("run", type=RUN)
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Sheet to write: .csv (spreadsheet) or .html (rate in a browser, save CSV).")
@click.option("--rubric", default="auto", show_default=True, metavar="auto|qa|code|FILE",
              help="qa, code (programming questions), auto (code when the question is), or a "
                   "rubric FILE: six lines '0: ...' to '5: ...', or [qa] and [code] sections.")
@click.option("--anchors", type=click.Choice(ANCHOR_CHOICES),
              help="paper: the γ paper's eight rated answers (Appendix A, Tables 12-14) as "
                   "worked examples above the answers (HTML sheets).")
@sample_options
@preset_option("annotate export")
@handles_errors
@options_as(ExportOptions)
def annotate_export(o: ExportOptions) -> None:
    """Write a rating sheet for every answer of RUN (or a random --sample of them)."""
    directory, records = open_gamma_run(o.run)
    o, preset = with_preset(o, "annotate export")
    selection = selection_of(o.sample, o.sample_seed)
    run, out, chosen = o.run, o.out, resolve_rubric(o.rubric)
    rows = export_sheet(records, out, chosen, title=f"Rating sheet: {run.name}",
                        selection=selection, anchors=o.anchors)
    directory.write_json(SHEET_FILE, {
        "sheet": str(out), "rubric": chosen.name, "rubric_id": chosen.id, "n_rows": len(rows),
        "selection": selection.record(len(records), [r.item_id for r in rows]),
        "preset": None if preset is None else preset.to_json(), "anchors": o.anchors})
    code = sum(r.kind == "code" for r in rows)
    echo(f"{len(rows)} answers ({code} with the coding rubric) -> {out}")


@annotate.command("import")
@click.argument("run", type=RUN)
@click.argument("ratings", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--threshold", type=THRESHOLD, default=0.05, show_default=True,
              help="R and share of answers with γ below this (Table 8's 0.05).")
@click.option("--threshold-form", type=click.Choice(ALL_FORMS), default=None,
              help="Form --threshold is written in (default: paper-code, the paper's; "
                   "converted to the run's form).")
@click.option("--bins", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="γ bins of Figure 1 (mean rating per bin).")
@click.option("--rubric", default="auto", show_default=True, metavar="auto|qa|code|FILE",
              help="The rubric the sheet was exported with (checked against the export).")
@click.option("--out", type=click.Path(path_type=Path), help="Also write the results here.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@handles_errors
def annotate_import(run: Path, ratings: tuple[Path, ...], threshold: float,
                    threshold_form: Form | None, bins: int, rubric: str, out: Path | None,
                    as_json: bool) -> None:
    """Join raters' CSVs for RUN: Fleiss' kappa, mean rating R, Figure 1."""
    found = import_ratings(run, list(ratings), threshold, bins, rubric, out, threshold_form)
    shown = found.threshold_text()
    report = _rebuild_report(run)
    if as_json:
        echo(dumps({k: v for k, v in found.to_json().items() if k != "items"}, indent=2))
        return
    r = found.analysis
    raters = ", ".join(f"{x.rater} ({len(x.ratings)})" for x in r.raters)
    echo(f"raters: {raters}; rated answers {r.n_rated} of {r.n_items}")
    echo(f"Fleiss' kappa {_num(r.fleiss_kappa)} over {r.kappa_items} answers "
               "rated by everyone")
    echo(f"R = {_num(r.mean_rating, 2)} ± {_num(r.mean_rating_stderr, 2)}   "
               f"R({shown}) = {_num(r.mean_rating_below_threshold, 2)} ± "
               f"{_num(r.mean_rating_below_threshold_stderr, 2)}   "
               f"{shown}: {100 * (r.share_below_threshold or 0):.1f}%")
    echo(f"Figure 1 fit: rating = {_num(r.slope, 2)} γ + {_num(r.intercept, 2)}")
    echo(f"ratings: {run / 'ratings.json'}\nreport: {report}")
