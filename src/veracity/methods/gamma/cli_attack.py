"""``veracity attack`` (adversarial gamma search) and ``veracity isotropy`` (ball check)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from veracity.checks import MAX_N
from veracity.cli.lifecycle import command_run, write_report
from veracity.cli.options import (
    SEED,
    Finite,
    ball_choice,
    common_options,
    default_out,
    handles_errors,
    pick,
    pop_selection,
    record_selection,
    sample_options,
)
from veracity.cli.output import echo
from veracity.data.qa import load_items
from veracity.methods.gamma.attack import ATTACK_MAX_N, AttackSettings, visible
from veracity.methods.gamma.cli import (
    DEFAULT_EMBEDDER,
    DEFAULT_MODEL,
    apply_preset,
    preset_option,
    record_preset,
)
from veracity.methods.gamma.core import ALL_FORMS, GammaSettings
from veracity.methods.gamma.isotropy import DEFAULT_CONE
from veracity.methods.gamma.paraphrase import PARAPHRASE
from veracity.methods.gamma.records import AttackStep
from veracity.methods.gamma.run_attack import run_attack
from veracity.methods.gamma.run_isotropy import run_isotropy
from veracity.store import dumps
from veracity.text import slug
from veracity.types import Sampling


def _flat(text: str, width: int) -> str:
    shown = re.sub(r"\s+", " ", visible(text)).strip()
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def _gamma(value: float | None) -> str:
    return "   —   " if value is None else f"{value:7.4f}"


def _echo_step(record: AttackStep) -> None:
    suffix = record.suffix if record.suffix is not None else record.prompt
    shown = "(start)" if record.step == 0 else _flat(suffix, 28)
    echo(f"{record.step:>4} {_gamma(record.gamma)}  {shown:<28}  {_flat(record.answer, 60)}")


def _slug(text: str) -> str:
    return slug(text, keep="")[:40].strip("-") or "prompt"


@click.command()
@click.option("--prompt", "-p", required=True, help="The prompt to start from.")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True, help="Model spec.")
@click.option("--embedder", "-e", default=DEFAULT_EMBEDDER, show_default=True, help="Embedder spec.")
@click.option("--steps", type=click.IntRange(0, 10_000), default=20, show_default=True,
              help="Maximum number of moves.")
@click.option("-n", "--n", "n", type=click.IntRange(min=1), default=10, show_default=True,
              help="Candidates per step, and perturbed prompts per γ.")
@click.option("--allow-large-n", is_flag=True,
              help=f"Allow -n above {ATTACK_MAX_N} (a step costs n x (n + 1) generations).")
@click.option("--max-calls", type=click.IntRange(min=1),
              help="Generation budget: stop before a step that would exceed it (cached or not).")
@click.option("--charset", default="utf8", show_default=True, callback=ball_choice(),
              help="Ball that draws candidates: utf8 (codes 0-500), utf8:LOW-HIGH, ascii-control, ...")
@click.option("--ball", default="utf8", show_default=True, callback=ball_choice(PARAPHRASE),
              help="Ball that measures γ of each candidate (or paraphrase); utf8 as in the "
                   "paper's §5.")
@click.option("--paraphraser", metavar="SPEC", help="Model writing the paraphrase ball.")
@click.option("--descend", is_flag=True, help="Walk towards the smallest γ instead.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of both balls.")
@click.option("--form", type=click.Choice(ALL_FORMS), default="sin", show_default=True)
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), help="Run directory to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the steps as JSON.")
@preset_option("attack")
@common_options
@handles_errors
def attack(**kw: Any) -> None:
    """Adversarial γ search: append random characters, move to the largest γ, repeat.

    Each step costs N x (N + 1) generations (one cached batch); the trajectory shows where
    the answers start to drift.
    """
    preset = apply_preset(kw, "attack")
    settings = AttackSettings(
        steps=kw["steps"], n=kw["n"], charset=kw["charset"], ball=kw["ball"],
        descend=kw["descend"], seed=kw["seed"], max_calls=kw["max_calls"], form=kw["form"],
        sampling=Sampling(temperature=0.0, max_tokens=kw["max_tokens"]),
        paraphraser=kw["paraphraser"], allow_large_n=kw["allow_large_n"],
    )
    out = kw["out"] or default_out("attack", _slug(kw["prompt"]), kw["model"])
    with command_run(kw) as cmd:
        if not kw["as_json"]:
            echo(f"{'step':>4} {'γ':>7}  {'appended':<28}  answer")
        outcome = run_attack(kw["prompt"], kw["model"], kw["embedder"], settings, cmd.ctx, out,
                             None if kw["as_json"] else _echo_step)
    record_preset(outcome.run, preset)
    r = outcome.results
    if kw["as_json"]:
        echo(dumps(outcome.records_json(), indent=2))
    else:
        best = r["best"]
        echo(
            f"\n{r['steps_taken']} steps ({'budget reached' if r['stop_reason'] == 'budget' else 'done'}), "
            f"{r['uphill_moves']} up / {r['downhill_moves']} down; start γ {_gamma(r['start']['gamma'])}"
            f", final γ {_gamma(r['final']['gamma'])}, best γ {_gamma(best['gamma'])} at step "
            f"{best['step']}\n{r['requested_calls']} generations requested: {cmd.calls_line()}"
        )
    write_report(outcome.run, f"veracity attack: {kw['prompt'][:60]}", kw["as_json"])


@click.command()
@click.option("--dataset", required=True,
              help="builtin, truthfulqa:PATH, webquestions:PATH, progqa:PATH, jsonl:PATH, csv:PATH.")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True, help="Model spec.")
@click.option("--embedder", "-e", default=DEFAULT_EMBEDDER, show_default=True, help="Embedder spec.")
@click.option("--ball", default="ascii-control", show_default=True, callback=ball_choice(PARAPHRASE),
              help="Perturbation family (any ball, utf8:LOW-HIGH, or paraphrase).")
@click.option("--paraphraser", metavar="SPEC", help="Model writing the paraphrase ball.")
@click.option("-n", "--n", "n", type=click.IntRange(min=1), default=10, show_default=True,
              help="Perturbed prompts per question.")
@click.option("--allow-large-n", is_flag=True,
              help=f"Allow -n above {MAX_N} (each perturbed prompt is a model call).")
@click.option("--cone", type=Finite(min=0, max=180), default=DEFAULT_CONE,
              show_default=True, help="Cone half-angle in degrees.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the ball.")
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first K questions.")
@sample_options
@click.option("--question-field", help="Question field / column of a JSONL or CSV dataset.")
@click.option("--out", type=click.Path(path_type=Path), help="Run directory to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the aggregates as JSON.")
@preset_option("isotropy")
@common_options
@handles_errors
def isotropy(**kw: Any) -> None:
    """Is the ball centred? Angles of perturbed answers and prompts around the originals.

    Uses the same (cached) generations as `veracity gamma` with the same ball, N and seed.
    """
    preset = apply_preset(kw, "isotropy")
    items, chosen = pick(load_items(kw["dataset"], None, kw["question_field"]),
                         pop_selection(kw), lambda item: item.id)
    settings = GammaSettings(
        n=kw["n"], ball=kw["ball"], seed=kw["seed"],
        sampling=Sampling(temperature=0.0, max_tokens=kw["max_tokens"]),
        paraphraser=kw["paraphraser"], allow_large_n=kw["allow_large_n"],
    )
    out = kw["out"] or default_out("isotropy", kw["dataset"].split(":")[-1], kw["model"])
    with command_run(kw) as cmd:
        outcome = run_isotropy(items, kw["model"], kw["embedder"], settings, cmd.ctx, kw["cone"],
                               out, kw["dataset"])
    record_selection(outcome.run, chosen)
    record_preset(outcome.run, preset)
    agg = outcome.results["aggregate"]
    if kw["as_json"]:
        echo(dumps(outcome.results, indent=2))
    else:
        cone = agg["cone"]
        echo(f"\n{'angle (degrees)':<40} {'mean':>7} {'median':>7} {'max':>7} {'≤ cone':>7}")
        for key, label in (
            ("answer_angle", "answer vs mean perturbed answer"),
            ("prompt_angle_mean", "perturbed prompts vs prompt (mean)"),
            ("prompt_angle_std", "  spread (std) of those angles"),
            ("prompt_centroid_angle", "prompt vs mean perturbed prompt"),
        ):
            s = agg[key]
            share = "—" if s["n"] == 0 else f"{100 * s['share_within_cone']:.0f}%"
            echo(f"{label:<40} {_num(s['mean'])} {_num(s['median'])} {_num(s['max'])} "
                       f"{share:>7}")
        echo(
            f"\n{agg['n_items']} questions, cone {cone}°, ball {settings.ball}, N {settings.n}, "
            f"model {outcome.results['model']}, embedder {outcome.results['embedder']}\n"
            f"{cmd.calls_line()}"
        )
    write_report(outcome.run, f"veracity isotropy: {kw['dataset']}", kw["as_json"])


def _num(value: float | None) -> str:
    return f"{'—':>7}" if value is None or value != value else f"{value:7.2f}"
