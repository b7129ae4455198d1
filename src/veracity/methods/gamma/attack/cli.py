"""``veracity attack``: the adversarial γ search from one prompt."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import click

from veracity.cli.lifecycle import command_run, write_report
from veracity.cli.options import (
    SEED,
    CommonOptions,
    ball_choice,
    common_options,
    default_out,
    handles_errors,
    options_as,
)
from veracity.cli.output import echo
from veracity.methods.gamma.attack.core import ATTACK_MAX_N, AttackSettings, visible
from veracity.methods.gamma.attack.records import AttackStep
from veracity.methods.gamma.attack.run import run_attack
from veracity.methods.gamma.core import ALL_FORMS, Form
from veracity.methods.gamma.paraphrase import PARAPHRASE
from veracity.methods.gamma.presets import (
    DEFAULT_EMBEDDER,
    DEFAULT_MODEL,
    preset_option,
    record_preset,
    with_preset,
)
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


@dataclass(frozen=True)
class AttackOptions:
    """``veracity attack``'s options."""

    prompt: str
    model: str
    embedder: str
    steps: int
    n: int
    allow_large_n: bool
    max_calls: int | None
    charset: str
    ball: str
    paraphraser: str | None
    descend: bool
    seed: int
    form: Form
    max_tokens: int
    out: Path | None
    as_json: bool
    preset: str | None
    common: CommonOptions = CommonOptions()

    def settings(self) -> AttackSettings:
        return AttackSettings(
            steps=self.steps, n=self.n, charset=self.charset, ball=self.ball,
            descend=self.descend, seed=self.seed, max_calls=self.max_calls, form=self.form,
            sampling=Sampling(temperature=0.0, max_tokens=self.max_tokens),
            paraphraser=self.paraphraser, allow_large_n=self.allow_large_n,
        )


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
@options_as(AttackOptions)
def attack(o: AttackOptions) -> None:
    """Adversarial γ search: append random characters, move to the largest γ, repeat.

    Each step costs N x (N + 1) generations (one cached batch); the trajectory shows where
    the answers start to drift.
    """
    o, preset = with_preset(o, "attack")
    settings = o.settings()
    out = o.out or default_out("attack", _slug(o.prompt), o.model)
    with command_run(o.common) as cmd:
        if not o.as_json:
            echo(f"{'step':>4} {'γ':>7}  {'appended':<28}  answer")
        outcome = run_attack(o.prompt, o.model, o.embedder, settings, cmd.ctx, out,
                             None if o.as_json else _echo_step)
    record_preset(outcome.run, preset)
    r = outcome.summary.trajectory
    if o.as_json:
        echo(dumps(outcome.records_json(), indent=2))
    else:
        best = r.best
        echo(
            f"\n{r.steps_taken} steps ({'budget reached' if r.stop_reason == 'budget' else 'done'}), "
            f"{r.uphill_moves} up / {r.downhill_moves} down; start γ {_gamma(r.start.gamma)}"
            f", final γ {_gamma(r.final.gamma)}, best γ {_gamma(best.gamma)} at step "
            f"{best.step}\n{r.requested_calls} generations requested: {cmd.calls_line()}"
        )
    write_report(outcome.run, f"veracity attack: {o.prompt[:60]}", o.as_json)
