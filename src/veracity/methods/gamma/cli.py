"""``veracity gamma``: score prompts, a dataset, or recorded generations."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from veracity.checks import MAX_N
from veracity.cli.lifecycle import command_run, never_answered, write_report
from veracity.cli.options import (
    SEED,
    THRESHOLD,
    CommonOptions,
    Finite,
    ball_choice,
    common_options,
    default_out,
    handles_errors,
    options_as,
    record_selection,
    sample_options,
    selection_of,
)
from veracity.cli.output import echo
from veracity.data.qa import PROGRAMMING
from veracity.data.stored import selected_items
from veracity.errors import ConfigError
from veracity.methods.gamma.calibration.core import read_calibration
from veracity.methods.gamma.control import CONTROLS
from veracity.methods.gamma.core import (
    ALL_FORMS,
    EMBEDDING,
    LENGTH,
    Form,
    GammaSettings,
    check_prompt,
)
from veracity.methods.gamma.estimate import estimate_lines, spent_line
from veracity.methods.gamma.paraphrase import PARAPHRASE
from veracity.methods.gamma.presets import (
    DEFAULT_EMBEDDER,
    DEFAULT_MODEL,
    preset_option,
    record_preset,
    with_preset,
)
from veracity.methods.gamma.recorded import resolve_recorded
from veracity.methods.gamma.records import ControlSummary, GammaRecord, GammaResults
from veracity.methods.gamma.run import run_gamma, run_gamma_recorded
from veracity.methods.gamma.whitebox.core import DEFAULT_RADIUS, SCOPES, SHAPES
from veracity.perturb import BALLS
from veracity.prices import read_prices
from veracity.runs.result import RunResult
from veracity.store import dumps
from veracity.types import Item, Sampling

if TYPE_CHECKING:
    from veracity.jsontypes import JsonObject
    from veracity.methods.gamma.validation.core import ValidationResults
    from veracity.runs.common import Context


def _short(text: str, width: int = 60) -> str:
    flat = re.sub(r"\s+", " ", re.sub(r"[\x00-\x1f\x7f]", "·", text)).strip()
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def print_summary(outcome: RunResult[GammaRecord, GammaResults], calls_line: str,
                  validity: ValidationResults | None = None) -> None:
    """The first records, the aggregates, and (with ``validity``) each answer's correctness."""
    summary = outcome.summary
    agg = summary.summary
    correct = {str(i.id): i.verdict.correct for i in validity.items} if validity else {}
    settings = summary.settings
    control = summary.control
    calibrated = summary.calibration
    null_head = f" {'γ_null':>7}" if control else ""
    null_head += f" {'P(ok)':>5}" if calibrated else ""
    null_head += f" {'right':>5}" if correct else ""
    published = any("published_gamma" in r.extra for r in outcome.records)
    null_head += f" {'paper':>7}" if published else ""
    echo(f"\n{'prompt':<62} {'gamma':>7}{null_head}  answer")
    for record in outcome.records[:25]:
        value = _value(record.gamma)
        if control:
            value += " " + _value(record.gamma_null)
        if calibrated:
            p = record.p_correct
            value += "   —  " if p is None else f" {p:5.2f}"
        if correct:
            verdict = correct.get(record.id)
            value += f" {'—' if verdict is None else 'yes' if verdict else 'no':>5}"
        if published:
            value += " " + _value(record.extra.get("published_gamma"))
        if record.extra.get("finish_reason") == LENGTH:
            value += " [cut]"
        said = f"[{record.error.message}]" if record.error else record.answer
        echo(f"{_short(record.prompt):<62} {value}  {_short(said, 50)}")
    if len(outcome.records) > 25:
        echo(f"... {len(outcome.records) - 25} more in samples.jsonl")
    spread = "" if agg.stderr is None else f" ± {agg.stderr:.4f}"  # one item: none
    echo(
        f"\nitems {agg.n_items} (scored {agg.n_scored})  "
        f"mean γ {agg.mean or 0.0:.4f}{spread}  median {agg.median or 0.0:.4f}  "
        f"{summary.aggregate.threshold_text()}: "
        f"{100 * (agg.share_below_threshold or 0.0):.1f}%"
        if agg.n_scored else f"\nitems {agg.n_items}: none could be scored"
    )
    echo(
        f"model {summary.model}  embedder {summary.embedder}  "
        f"form {settings['form']}  ball {settings['ball']}  N {settings['n']}"
    )
    if control:
        print_control(control)
    aggregate = summary.aggregate
    if aggregate.n_truncated or aggregate.n_perturbed_truncated:
        echo(f"truncated at --max-tokens {settings['max_tokens']} (finish_reason: length, γ "
             f"measured on prefixes): {aggregate.n_truncated} of {agg.n_items} answers, "
             f"{aggregate.n_perturbed_truncated} perturbed answers")
    if calibrated:
        print_calibration(calibrated, outcome.records)
    if validity is not None:
        print_validity(validity)
    echo(calls_line)


def _value(value: float | None) -> str:
    return "   —   " if value is None else f"{value:7.4f}"


def first_screen_validity(run: Path, settings: GammaSettings,
                          ctx: Context) -> ValidationResults | None:
    """Correctness of each answer against the references and the AUROC of γ (validation.json
    in the run, so the report shows both); None when no answer could be labelled."""
    from veracity.errors import DataError
    from veracity.methods.gamma.validation.core import ValidateSettings, validate_gamma

    check = ValidateSettings(baseline_samples=0, resamples=1000, threshold=settings.threshold,
                             threshold_form=settings.cut.form)
    try:
        return validate_gamma(run, check, ctx)
    except DataError:  # nothing labelled: the summary just has no validity line
        return None


def print_validity(results: ValidationResults) -> None:
    """One line: how many answers are right, and how well γ flags the wrong ones."""
    g = results.aggregate.gamma
    low, high = g.ci
    acc = results.aggregate.accuracy.all
    auroc = "—" if g.auroc is None or g.auroc != g.auroc else f"{g.auroc:.3f}"
    ci = "" if low is None or low != low else f" [{low:.3f}, {high:.3f}]"
    rules = ", ".join(f"{n} by {rule}" for rule, n in results.aggregate.rules.items())
    echo(f"correct {sum(1 for i in results.items if i.verdict.correct)} of "
         f"{results.aggregate.n_labelled} labelled answers ({100 * acc.accuracy:.1f}%; {rules}); "
         f"AUROC of γ for flagging the wrong ones {auroc}{ci} (95% bootstrap; n = {g.n})")


def print_calibration(calibrated: Mapping[str, Any], records: Sequence[GammaRecord]) -> None:
    """Which calibration was used, its thresholds, and the calibrated verdicts."""
    t = calibrated["thresholds"]
    counts = {name: sum(r.verdict == name for r in records)
              for name in ("trustworthy", "uncertain", "untrustworthy", "unscored")}
    forced = " (FORCED: made for another setup)" if calibrated["forced"] else ""
    echo(
        f"calibration {calibrated['source']}{forced}: trustworthy γ < {t['low']:.4f}, "
        f"untrustworthy γ ≥ {t['high']:.4f}; "
        + ", ".join(f"{name} {count}" for name, count in counts.items() if count)
    )


def print_control(control: ControlSummary) -> None:
    """The numeric control's summary lines."""
    if not control.n_scored:
        echo("numeric control: no item has both γ and γ_null")
        return
    kinds = sorted({str(v.get("kind")) for v in control.variations})
    echo(
        f"numeric control ({control.n} {'/'.join(kinds)} paths, {control.n_scored} items): "
        f"mean γ {_fixed(control.mean_gamma, 4)}  "
        f"mean γ_null {_fixed(control.mean_gamma_null, 4)}  "
        f"γ above the null's 95th percentile ({_fixed(control.gamma_null_p95, 4)}): "
        f"{_fixed(_percent(control.share_above_null_p95), 1)}%  "
        f"null answers all identical: {_fixed(_percent(control.share_null_identical), 1)}%"
    )


def _fixed(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


@dataclass(frozen=True)
class GammaOptions:
    """``veracity gamma``'s options."""

    prompts: tuple[str, ...]
    dataset: str | None
    recorded: str | None
    model: str
    embedder: str
    n: int
    allow_large_n: bool
    seed: int
    form: Form
    ball: str
    radius: float
    shape: str
    scope: str
    paraphraser: str | None
    max_tokens: int
    threshold: float
    threshold_form: Form | None
    control: str | None
    calibration: Path | None
    force: bool
    limit: int | None
    sample: int | None
    sample_seed: int
    question_field: str | None
    domain: str | None
    validity: bool
    out: Path | None
    as_json: bool
    preset: str | None
    estimate: bool = False
    prices_file: Path | None = None
    common: CommonOptions = CommonOptions()

    def settings(self) -> GammaSettings:
        return GammaSettings(
            n=self.n, ball=self.ball, seed=self.seed, form=self.form,
            sampling=Sampling(temperature=0.0, max_tokens=self.max_tokens),
            threshold=self.threshold, threshold_form=self.threshold_form,
            paraphraser=self.paraphraser, radius=self.radius, shape=self.shape,
            scope=self.scope, control=self.control, allow_large_n=self.allow_large_n,
        )


_GENERATION_OPTIONS = ("model", "n", "allow_large_n", "seed", "ball", "max_tokens", "paraphraser", "radius",
                       "shape", "scope", "limit", "sample", "sample_seed", "question_field",
                       "control")
"""Options --recorded refuses."""


def _refuse_generation_options() -> None:
    """--recorded generates nothing: options that shape generation would be silently unused."""
    context = click.get_current_context()
    given = [name for name in _GENERATION_OPTIONS
             if context.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ConfigError(f"--recorded scores answers already generated: {flags} do not apply")


@click.command()
@click.argument("prompts", nargs=-1)
@click.option("--dataset", help="builtin, truthfulqa:PATH, webquestions:PATH, progqa:PATH "
                                "(Programming QA JSONL), jsonl:PATH, csv:PATH.")
@click.option("--recorded", type=click.Path(),
              help="JSONL of recorded generations (prompt, answer, perturbed_answers): no model. "
                   "'paper': the γ paper's Tables 1 and 2, its published γ shown beside ours.")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True, help="Model spec.")
@click.option("--embedder", "-e", default=DEFAULT_EMBEDDER, show_default=True, help="Embedder spec.")
@click.option("-n", "--n", "n", type=click.IntRange(min=1), default=10, show_default=True,
              help="Perturbed prompts per question.")
@click.option("--allow-large-n", is_flag=True,
              help=f"Allow -n above {MAX_N} (each perturbed prompt is a model call).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the ball.")
@click.option("--form", type=click.Choice(ALL_FORMS), default="sin", show_default=True,
              help="sin (paper: sqrt(1 - cos²)), paper-code (authors' code: sqrt(1 - cos)) or "
                   "magnitude (|original - mean perturbed embedding|).")
@click.option("--ball", default="ascii-control", show_default=True,
              callback=ball_choice(PARAPHRASE, EMBEDDING),
              help=f"Perturbation family: {', '.join(sorted(BALLS))}, utf8:LOW-HIGH, {PARAPHRASE}, "
                   f"{EMBEDDING} (white-box, hf/... models only), or one you registered.")
@click.option("--radius", type=Finite(min=0), default=DEFAULT_RADIUS, show_default=True,
              help="Embedding ball: L2 distance of each perturbed token embedding.")
@click.option("--shape", type=click.Choice(SHAPES), default="sphere", show_default=True,
              help="Embedding ball: random points on a sphere, or simplex vertices.")
@click.option("--scope", type=click.Choice(SCOPES), default="question", show_default=True,
              help="Embedding ball: perturb the question's tokens or all prompt tokens.")
@click.option("--paraphraser", metavar="SPEC",
              help="Model that writes the paraphrase ball (default: the model itself).")
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("--threshold", type=THRESHOLD, default=0.05, show_default=True,
              help="γ below this counts as trustworthy in the summary (Table 8's 0.05), written "
                   "in --threshold-form and converted to --form.")
@click.option("--threshold-form", type=click.Choice(ALL_FORMS), default=None,
              help="Form --threshold is written in (default: paper-code for the angle forms; "
                   "magnitude for --form magnitude). The paper's text and code disagree: its text "
                   "defines γ as a sine (Algorithm 1 returns sin; §3 reads Table 3's 0.151 as "
                   "arcsin(0.15) ≈ 8°), its authors' code computes sqrt(1 - cos); Table 8's 0.05 "
                   "is read here in the code's form (= 0.0707 as a sine).")
@click.option("--control", type=click.Choice(CONTROLS),
              help="numeric: answer each question N more times along other compute paths (no "
                   "input change) and report γ_null, the γ of numerical noise alone.")
@click.option("--calibration", type=click.Path(path_type=Path),
              help="Calibration file (veracity calibrate): adds P(correct) per answer and takes the "
                   "verdict thresholds from it.")
@click.option("--force", is_flag=True,
              help="Use a calibration made for another model, embedder, form, ball or N "
                   "(recorded in the results).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first K questions.")
@sample_options
@click.option("--question-field", help="Question field / column of a JSONL or CSV dataset.")
@click.option("--domain", help="Name of the corpus in comparisons across runs (Table 8's "
                               "columns; default: Web QA, TruthfulQA, Programming QA, ... from "
                               "the dataset).")
@click.option("--validity/--no-validity", default=True, show_default=True,
              help="When the questions have reference answers: judge each answer against them "
                   "(veracity validate's rules) and report the AUROC of γ for flagging wrong ones.")
@click.option("--out", type=click.Path(path_type=Path), help="Run directory to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-prompt records as JSON.")
@click.option("--estimate", is_flag=True,
              help="Print the model calls and tokens the run will make (and their cost with "
                   "--prices), then stop before making any.")
@click.option("--prices", "prices_file", type=click.Path(path_type=Path, dir_okay=False),
              help="Prices (TOML, USD per million tokens by model spec): the cost of --estimate, "
                   "and the tokens and USD per 1,000 scored answers after a run.")
@preset_option("gamma")
@common_options
@handles_errors
@options_as(GammaOptions)
def gamma(o: GammaOptions) -> None:
    """Harmonic γ of each answer: 0 = stable (trustworthy), larger = unstable.

    Give prompts as arguments, or --dataset, or --recorded.
    """
    sources = sum(bool(x) for x in (o.prompts, o.dataset, o.recorded))
    if sources != 1:
        raise ConfigError("give prompts, or --dataset SPEC, or --recorded FILE (exactly one)")
    if o.force and not o.calibration:
        raise ConfigError("--force only applies to --calibration FILE")
    calibration = read_calibration(o.calibration) if o.calibration else None
    o, preset = with_preset(o, "gamma")
    selection = selection_of(o.sample, o.sample_seed, o.limit)
    chosen: dict[str, Any] | None = None
    if selection.active and not o.dataset:
        raise ConfigError("--limit and --sample choose questions of a --dataset")
    validity: ValidationResults | None = None
    spent = ""
    prices = None if o.prices_file is None else read_prices(o.prices_file)
    if o.estimate and o.recorded:
        raise ConfigError("--estimate is for runs that call a model; --recorded makes no call")
    with command_run(o.common) as cmd, ExitStack() as held:
        ctx = cmd.ctx
        if o.recorded:
            _refuse_generation_options()
            out = o.out
            outcome = run_gamma_recorded(resolve_recorded(o.recorded), o.embedder, ctx, o.form,
                                         o.threshold, out, calibration, o.force, o.threshold_form)
        else:
            if o.dataset is None:
                for index, prompt in enumerate(o.prompts, 1):
                    check_prompt(prompt, f"prompt {index}")
                items: Sequence[Item] = [Item(f"prompt-{i}", p)
                                         for i, p in enumerate(o.prompts, 1)]
                dataset = "prompts"
                out = o.out
            else:
                items, chosen = held.enter_context(selected_items(  # large files: on disk
                    o.dataset, selection, o.question_field))
                dataset = o.dataset
                out = o.out or default_out("gamma", dataset.split(":")[-1], o.model)
            settings = o.settings()
            if o.estimate:
                for line in estimate_lines(items, settings, o.model, prices):
                    echo(line)
                return
            outcome = run_gamma(items, o.model, o.embedder, settings, ctx, out, dataset,
                                calibration, o.force, o.domain)
            if prices is not None:
                stats = ctx.client(o.model).stats  # loaded by the run
                scored = sum(1 for r in outcome.records if r.gamma is not None)
                mean_chars = sum(len(i.question) for i in items) / max(1, len(items))
                spent = spent_line(scored, stats.completion_tokens,
                                   int(stats.model_calls * mean_chars), o.model, prices)
            # a Programming QA reference is a whole worked answer, not a gold answer to match
            judged = o.validity and outcome.run is not None and any(
                i.references and i.metadata.get("domain") != PROGRAMMING for i in items)
            if judged and outcome.run is not None:
                validity = first_screen_validity(outcome.run.path, settings, ctx)
    record_selection(outcome.run, chosen)
    record_preset(outcome.run, preset)
    if o.as_json:
        found = outcome.summary
        extra: JsonObject = {}
        if found.control is not None:
            extra["control"] = found.control.to_json()
        if found.calibration is not None:
            extra["calibration"] = {k: v for k, v in found.calibration.items() if k != "curve"}
        records = outcome.records_json()
        shown: Any = {"records": records, **extra} if extra else records
        echo(dumps(shown, indent=2))
    else:
        print_summary(outcome, cmd.calls_line(), validity)
        if prices is not None and not o.recorded:
            echo(spent)
    write_report(outcome.run, f"veracity γ: {outcome.summary.dataset}", o.as_json)
    never_answered([r.error for r in outcome.records], cmd.stats.model_calls - cmd.stats.failed)
