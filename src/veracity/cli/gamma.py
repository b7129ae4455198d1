"""``veracity gamma``: score prompts, a dataset, or recorded generations."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from veracity.checks import MAX_N
from veracity.cli.lifecycle import command_run, write_report
from veracity.cli.options import (
    SEED,
    THRESHOLD,
    Finite,
    ball_choice,
    common_options,
    handles_errors,
)
from veracity.cli.output import echo
from veracity.data.qa import load_items
from veracity.errors import ConfigError
from veracity.methods.calibration import read_calibration
from veracity.methods.control import CONTROLS
from veracity.methods.gamma import EMBEDDING, FORMS, GammaSettings, check_prompt
from veracity.methods.paraphrase import PARAPHRASE
from veracity.methods.whitebox import DEFAULT_RADIUS, SCOPES, SHAPES
from veracity.perturb import BALLS
from veracity.records import GammaRecord
from veracity.runs.gamma import run_gamma, run_gamma_recorded
from veracity.runs.result import RunResult
from veracity.store import dumps
from veracity.summaries import GammaSummary
from veracity.text import slug
from veracity.types import Item, Sampling

DEFAULT_MODEL = "llamacpp/default"
DEFAULT_EMBEDDER = "st/default"


def default_out(kind: str, dataset: str, model: str) -> Path:
    """A stable run directory name, so rerunning the same command resumes in place."""
    name = slug(f"{kind}-{Path(dataset).stem}-{model}")
    return Path("runs") / name


def _short(text: str, width: int = 60) -> str:
    flat = re.sub(r"\s+", " ", re.sub(r"[\x00-\x1f\x7f]", "·", text)).strip()
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def print_summary(outcome: RunResult[GammaRecord], calls_line: str) -> None:
    agg = GammaSummary.from_results(outcome.results)
    settings = outcome.results["settings"]
    control = outcome.results.get("control")
    calibrated = outcome.results.get("calibration")
    null_head = f" {'γ_null':>7}" if control else ""
    null_head += f" {'P(ok)':>5}" if calibrated else ""
    echo(f"\n{'prompt':<62} {'gamma':>7}{null_head}  answer")
    for record in outcome.records[:25]:
        value = _value(record.gamma)
        if control:
            value += " " + _value(record.gamma_null)
        if calibrated:
            p = record.p_correct
            value += "   —  " if p is None else f" {p:5.2f}"
        said = f"[{record.error.message}]" if record.error else record.answer
        echo(f"{_short(record.prompt):<62} {value}  {_short(said, 50)}")
    if len(outcome.records) > 25:
        echo(f"... {len(outcome.records) - 25} more in samples.jsonl")
    spread = "" if agg.stderr is None else f" ± {agg.stderr:.4f}"  # one item: none
    echo(
        f"\nitems {agg.n_items} (scored {agg.n_scored})  "
        f"mean γ {agg.mean or 0.0:.4f}{spread}  median {agg.median or 0.0:.4f}  "
        f"γ < {agg.threshold}: {100 * (agg.share_below_threshold or 0.0):.1f}%"
        if agg.n_scored else f"\nitems {agg.n_items}: none could be scored"
    )
    echo(
        f"model {outcome.results['model']}  embedder {outcome.results['embedder']}  "
        f"form {settings['form']}  ball {settings['ball']}  N {settings['n']}"
    )
    if control:
        print_control(control)
    if calibrated:
        print_calibration(calibrated, outcome.records)
    echo(calls_line)


def _value(value: float | None) -> str:
    return "   —   " if value is None else f"{value:7.4f}"


def print_calibration(calibrated: dict[str, Any], records: Sequence[GammaRecord]) -> None:
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


def print_control(control: dict[str, Any]) -> None:
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
                       "shape", "scope", "limit", "question_field", "control")
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
@click.option("--dataset", help="builtin, truthfulqa:PATH, webquestions:PATH, jsonl:PATH, csv:PATH.")
@click.option("--recorded", type=click.Path(path_type=Path),
              help="JSONL of recorded generations (prompt, answer, perturbed_answers): no model.")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True, help="Model spec.")
@click.option("--embedder", "-e", default=DEFAULT_EMBEDDER, show_default=True, help="Embedder spec.")
@click.option("-n", "--n", "n", type=click.IntRange(min=1), default=10, show_default=True,
              help="Perturbed prompts per question.")
@click.option("--allow-large-n", is_flag=True,
              help=f"Allow -n above {MAX_N} (each perturbed prompt is a model call).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the ball.")
@click.option("--form", type=click.Choice(FORMS), default="sin", show_default=True,
              help="sin (paper) or paper-code (authors' code: sqrt(1 - cos)).")
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
              help="γ below this counts as trustworthy in the summary.")
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
@click.option("--question-field", help="Question field / column of a JSONL or CSV dataset.")
@click.option("--out", type=click.Path(path_type=Path), help="Run directory to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-prompt records as JSON.")
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
    with command_run(kw) as cmd:
        ctx = cmd.ctx
        if kw["recorded"]:
            _refuse_generation_options()
            out = kw["out"]
            outcome = run_gamma_recorded(kw["recorded"], kw["embedder"], ctx, kw["form"],
                                         kw["threshold"], out, calibration, kw["force"])
        else:
            if prompts:
                for index, prompt in enumerate(prompts, 1):
                    check_prompt(prompt, f"prompt {index}")
                items = [Item(f"prompt-{i}", p) for i, p in enumerate(prompts, 1)]
                dataset = "prompts"
                out = kw["out"]
            else:
                items = load_items(kw["dataset"], kw["limit"], kw["question_field"])
                dataset = kw["dataset"]
                out = kw["out"] or default_out("gamma", dataset.split(":")[-1], kw["model"])
            settings = GammaSettings(
                n=kw["n"], ball=kw["ball"], seed=kw["seed"], form=kw["form"],
                sampling=Sampling(temperature=0.0, max_tokens=kw["max_tokens"]),
                threshold=kw["threshold"], paraphraser=kw["paraphraser"],
                radius=kw["radius"], shape=kw["shape"], scope=kw["scope"], control=kw["control"],
                allow_large_n=kw["allow_large_n"],
            )
            outcome = run_gamma(items, kw["model"], kw["embedder"], settings, ctx, out, dataset,
                                calibration, kw["force"])
    if kw["as_json"]:
        extra = {name: outcome.results[name] for name in ("control", "calibration")
                 if name in outcome.results}
        if "calibration" in extra:
            extra["calibration"] = {k: v for k, v in extra["calibration"].items() if k != "curve"}
        records = outcome.records_json()
        shown: Any = {"records": records, **extra} if extra else records
        echo(dumps(shown, indent=2))
    else:
        print_summary(outcome, cmd.calls_line())
    write_report(outcome.run, f"veracity γ: {outcome.results['dataset']}", kw["as_json"])
