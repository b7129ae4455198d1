"""``veracity gamma``: score prompts, a dataset, or recorded generations."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import click

from veracity.checks import MAX_N
from veracity.cli.lifecycle import command_run, write_report
from veracity.cli.options import (
    SEED,
    THRESHOLD,
    Finite,
    ball_choice,
    common_options,
    default_out,
    handles_errors,
    pop_selection,
    record_selection,
    sample_options,
)
from veracity.cli.output import echo
from veracity.data.qa import PROGRAMMING
from veracity.data.stored import selected_items
from veracity.errors import ConfigError
from veracity.methods.gamma.calibration import read_calibration
from veracity.methods.gamma.control import CONTROLS
from veracity.methods.gamma.core import ALL_FORMS, EMBEDDING, LENGTH, GammaSettings, check_prompt
from veracity.methods.gamma.paraphrase import PARAPHRASE
from veracity.methods.gamma.records import GammaRecord, GammaResults
from veracity.methods.gamma.run import run_gamma, run_gamma_recorded
from veracity.methods.gamma.whitebox import DEFAULT_RADIUS, SCOPES, SHAPES
from veracity.perturb import BALLS
from veracity.runs.result import RunResult
from veracity.store import RunDir, dumps
from veracity.types import Item, Sampling

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_MODEL = "llamacpp/default"
DEFAULT_EMBEDDER = "st/default"
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "paper": {
        # §3-4: N = 10 ASCII control-character ball points, temperature 0 (always), answers up
        # to 1,024 tokens, γ in the authors' sqrt(1 - cos) form with Table 8's 0.05
        "gamma": {"n": 10, "ball": "ascii-control", "form": "paper-code", "max_tokens": 1024,
                  "threshold": 0.05, "threshold_form": "paper-code"},
        "isotropy": {"n": 10, "ball": "ascii-control", "max_tokens": 1024},
        # §5: candidates and their γ balls from random UTF-8, as the authors' walker draws both
        "attack": {"n": 10, "charset": "utf8", "ball": "utf8", "form": "paper-code",
                   "max_tokens": 1024},
        # §4: 100 randomly sampled questions per model x corpus are rated
        "annotate export": {"sample": 100},
    },
}
"""Named bundles of settings; ``--preset NAME`` applies one, explicit options still win."""


def preset_option(command: str) -> Callable[[F], F]:
    """``--preset paper`` for ``command`` (a key of each preset)."""
    shown = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in PRESETS["paper"][command].items())
    return click.option("--preset", type=click.Choice(sorted(PRESETS)), default=None,
                        help=f"Settings of a publication: paper = Kersting et al. 2024 ({shown}); "
                             "options given explicitly still win. Recorded in run.json.")


def apply_preset(kw: dict[str, Any], command: str) -> dict[str, Any] | None:
    """Put the preset's settings into ``kw`` where no option was given on the command line;
    print what was applied (to stderr) and return the record for run.json."""
    name = kw.pop("preset", None)
    if name is None:
        return None
    context = click.get_current_context()
    applied: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    for key, value in PRESETS[name][command].items():
        if context.get_parameter_source(key) == click.core.ParameterSource.COMMANDLINE:
            kept[key] = kw[key]
        else:
            kw[key] = applied[key] = value
    shown = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in applied.items())
    echo(f"preset {name}: {shown}" + (
        f" (given explicitly: {', '.join(f'{k}={v}' for k, v in kept.items())})" if kept else ""),
        err=True)
    return {"name": name, "applied": applied, "overridden": kept}


def record_preset(run: RunDir | None, preset: dict[str, Any] | None) -> None:
    """The preset a run was made with, in its run.json (``config.preset``)."""
    if run is not None and preset is not None:
        run.update_config({"preset": preset})


def _short(text: str, width: int = 60) -> str:
    flat = re.sub(r"\s+", " ", re.sub(r"[\x00-\x1f\x7f]", "·", text)).strip()
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def print_summary(outcome: RunResult[GammaRecord, GammaResults], calls_line: str,
                  validity: dict[str, Any] | None = None) -> None:
    """The first records, the aggregates, and (with ``validity``) each answer's correctness."""
    summary = outcome.summary
    agg = summary.summary
    correct = {str(i["id"]): i["correct"] for i in validity["items"]} if validity else {}
    settings = summary.settings
    control = summary.control
    calibrated = summary.calibration
    null_head = f" {'γ_null':>7}" if control else ""
    null_head += f" {'P(ok)':>5}" if calibrated else ""
    null_head += f" {'right':>5}" if correct else ""
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
        f"{threshold_text(summary.aggregate)}: "
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
    if aggregate.get("n_truncated") or aggregate.get("n_perturbed_truncated"):
        echo(f"truncated at --max-tokens {settings['max_tokens']} (finish_reason: length, γ "
             f"measured on prefixes): {aggregate['n_truncated']} of {agg.n_items} answers, "
             f"{aggregate['n_perturbed_truncated']} perturbed answers")
    if calibrated:
        print_calibration(calibrated, outcome.records)
    if validity is not None:
        print_validity(validity)
    echo(calls_line)


def threshold_text(agg: Mapping[str, Any]) -> str:
    """``γ < 0.0707 (sin; given 0.05 paper-code)``: the threshold applied, and as given."""
    value, form = agg["threshold"], agg.get("threshold_form")
    given = agg.get("threshold_given")
    shown = f"γ < {value:.4g}" + (f" ({form}" if form else "")
    if given and (given["form"] != form or given["value"] != value):
        shown += f"; given {given['value']:g} {given['form']}"
    return shown + (")" if form else "")


def _value(value: float | None) -> str:
    return "   —   " if value is None else f"{value:7.4f}"


def first_screen_validity(run: Path, settings: GammaSettings, ctx: Any) -> dict[str, Any] | None:
    """Correctness of each answer against the references and the AUROC of γ (validation.json
    in the run, so the report shows both); None when no answer could be labelled."""
    from veracity.errors import DataError
    from veracity.methods.gamma.validate import ValidateSettings, validate_gamma

    check = ValidateSettings(baseline_samples=0, resamples=1000, threshold=settings.threshold,
                             threshold_form=settings.cut.form)
    try:
        return validate_gamma(run, check, ctx)
    except DataError:  # nothing labelled: the summary just has no validity line
        return None


def print_validity(results: dict[str, Any]) -> None:
    """One line: how many answers are right, and how well γ flags the wrong ones."""
    g = results["gamma"]
    low, high = g["ci"]
    acc = results["accuracy"]["all"]
    auroc = "—" if g["auroc"] is None or g["auroc"] != g["auroc"] else f"{g['auroc']:.3f}"
    ci = "" if low is None or low != low else f" [{low:.3f}, {high:.3f}]"
    rules = ", ".join(f"{n} by {rule}" for rule, n in results["labels"]["rules"].items())
    echo(f"correct {sum(1 for i in results['items'] if i['correct'])} of {results['n_labelled']} "
         f"labelled answers ({100 * acc['accuracy']:.1f}%; {rules}); AUROC of γ for flagging "
         f"the wrong ones {auroc}{ci} (95% bootstrap; n = {g['n']})")


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


def print_control(control: Mapping[str, Any]) -> None:
    """The numeric control's summary lines."""
    if not control["n_scored"]:
        echo("numeric control: no item has both γ and γ_null")
        return
    kinds = sorted({v["kind"] for v in control["variations"]})
    echo(
        f"numeric control ({control['n']} {'/'.join(kinds)} paths, {control['n_scored']} items): "
        f"mean γ {control['mean_gamma']:.4f}  mean γ_null {control['mean_gamma_null']:.4f}  "
        f"γ above the null's 95th percentile ({control['gamma_null_p95']:.4f}): "
        f"{100 * control['share_above_null_p95']:.1f}%  "
        f"null answers all identical: {100 * control['share_null_identical']:.1f}%"
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
@click.option("--recorded", type=click.Path(path_type=Path),
              help="JSONL of recorded generations (prompt, answer, perturbed_answers): no model.")
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
              help="Form --threshold is written in (default: paper-code, the paper's, for the "
                   "angle forms; magnitude for --form magnitude).")
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
@preset_option("gamma")
@common_options
@handles_errors
def gamma(prompts: tuple[str, ...], **kw: Any) -> None:
    """Harmonic γ of each answer: 0 = stable (trustworthy), larger = unstable.

    Give prompts as arguments, or --dataset, or --recorded.
    """
    sources = sum(bool(x) for x in (prompts, kw["dataset"], kw["recorded"]))
    if sources != 1:
        raise ConfigError("give prompts, or --dataset SPEC, or --recorded FILE (exactly one)")
    if kw["force"] and not kw["calibration"]:
        raise ConfigError("--force only applies to --calibration FILE")
    calibration = read_calibration(kw["calibration"]) if kw["calibration"] else None
    preset = apply_preset(kw, "gamma")
    selection = pop_selection(kw)
    chosen: dict[str, Any] | None = None
    if selection.active and not kw["dataset"]:
        raise ConfigError("--limit and --sample choose questions of a --dataset")
    validity: dict[str, Any] | None = None
    with command_run(kw) as cmd, ExitStack() as held:
        ctx = cmd.ctx
        if kw["recorded"]:
            _refuse_generation_options()
            out = kw["out"]
            outcome = run_gamma_recorded(kw["recorded"], kw["embedder"], ctx, kw["form"],
                                         kw["threshold"], out, calibration, kw["force"],
                                         kw["threshold_form"])
        else:
            if prompts:
                for index, prompt in enumerate(prompts, 1):
                    check_prompt(prompt, f"prompt {index}")
                items: Sequence[Item] = [Item(f"prompt-{i}", p) for i, p in enumerate(prompts, 1)]
                dataset = "prompts"
                out = kw["out"]
            else:
                items, chosen = held.enter_context(selected_items(  # large files: on disk
                    kw["dataset"], selection, kw["question_field"]))
                dataset = kw["dataset"]
                out = kw["out"] or default_out("gamma", dataset.split(":")[-1], kw["model"])
            settings = GammaSettings(
                n=kw["n"], ball=kw["ball"], seed=kw["seed"], form=kw["form"],
                sampling=Sampling(temperature=0.0, max_tokens=kw["max_tokens"]),
                threshold=kw["threshold"], threshold_form=kw["threshold_form"],
                paraphraser=kw["paraphraser"],
                radius=kw["radius"], shape=kw["shape"], scope=kw["scope"], control=kw["control"],
                allow_large_n=kw["allow_large_n"],
            )
            outcome = run_gamma(items, kw["model"], kw["embedder"], settings, ctx, out, dataset,
                                calibration, kw["force"], kw["domain"])
            # a Programming QA reference is a whole worked answer, not a gold answer to match
            judged = kw["validity"] and outcome.run is not None and any(
                i.references and i.metadata.get("domain") != PROGRAMMING for i in items)
            if judged and outcome.run is not None:
                validity = first_screen_validity(outcome.run.path, settings, ctx)
    record_selection(outcome.run, chosen)
    record_preset(outcome.run, preset)
    if kw["as_json"]:
        extra = {name: outcome.results[name] for name in ("control", "calibration")
                 if name in outcome.results}
        if "calibration" in extra:
            extra["calibration"] = {k: v for k, v in extra["calibration"].items() if k != "curve"}
        records = outcome.records_json()
        shown: Any = {"records": records, **extra} if extra else records
        echo(dumps(shown, indent=2))
    else:
        print_summary(outcome, cmd.calls_line(), validity)
    write_report(outcome.run, f"veracity γ: {outcome.summary.dataset}", kw["as_json"])
