"""``veracity isotropy``: is the ball centred on the original, in prompt and answer space?"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from veracity.checks import MAX_N
from veracity.cli.lifecycle import command_run, write_report
from veracity.cli.options import (
    SEED,
    CommonOptions,
    Finite,
    ball_choice,
    common_options,
    default_out,
    handles_errors,
    options_as,
    pick,
    record_selection,
    sample_options,
    selection_of,
)
from veracity.cli.output import echo
from veracity.data.qa import load_items
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.isotropy.core import DEFAULT_CONE
from veracity.methods.gamma.isotropy.run import run_isotropy
from veracity.methods.gamma.paraphrase import PARAPHRASE
from veracity.methods.gamma.presets import (
    DEFAULT_EMBEDDER,
    DEFAULT_MODEL,
    preset_option,
    record_preset,
    with_preset,
)
from veracity.store import dumps
from veracity.types import Sampling


@dataclass(frozen=True)
class IsotropyOptions:
    """``veracity isotropy``'s options."""

    dataset: str
    model: str
    embedder: str
    ball: str
    paraphraser: str | None
    n: int
    allow_large_n: bool
    cone: float
    seed: int
    max_tokens: int
    limit: int | None
    sample: int | None
    sample_seed: int
    question_field: str | None
    out: Path | None
    as_json: bool
    preset: str | None
    common: CommonOptions = CommonOptions()

    def settings(self) -> GammaSettings:
        return GammaSettings(
            n=self.n, ball=self.ball, seed=self.seed,
            sampling=Sampling(temperature=0.0, max_tokens=self.max_tokens),
            paraphraser=self.paraphraser, allow_large_n=self.allow_large_n,
        )


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
@options_as(IsotropyOptions)
def isotropy(o: IsotropyOptions) -> None:
    """Is the ball centred? Angles of perturbed answers and prompts around the originals.

    Uses the same (cached) generations as `veracity gamma` with the same ball, N and seed.
    """
    o, preset = with_preset(o, "isotropy")
    items, chosen = pick(load_items(o.dataset, None, o.question_field),
                         selection_of(o.sample, o.sample_seed, o.limit), lambda item: item.id)
    settings = o.settings()
    out = o.out or default_out("isotropy", o.dataset.split(":")[-1], o.model)
    with command_run(o.common) as cmd:
        outcome = run_isotropy(items, o.model, o.embedder, settings, cmd.ctx, o.cone,
                               out, o.dataset)
    record_selection(outcome.run, chosen)
    record_preset(outcome.run, preset)
    summary = outcome.summary
    agg = summary.aggregate
    if o.as_json:
        echo(dumps(outcome.results, indent=2))
    else:
        echo(f"\n{'angle (degrees)':<40} {'mean':>7} {'median':>7} {'max':>7} {'≤ cone':>7}")
        for key, label in (
            ("answer_angle", "answer vs mean perturbed answer"),
            ("prompt_angle_mean", "perturbed prompts vs prompt (mean)"),
            ("prompt_angle_std", "  spread (std) of those angles"),
            ("prompt_centroid_angle", "prompt vs mean perturbed prompt"),
        ):
            s = agg.angle(key)
            share = "—" if s.n == 0 or s.share_within_cone is None \
                else f"{100 * s.share_within_cone:.0f}%"
            echo(f"{label:<40} {_num(s.mean)} {_num(s.median)} {_num(s.max)} {share:>7}")
        echo(
            f"\n{agg.n_items} questions, cone {agg.cone}°, ball {settings.ball}, N {settings.n}, "
            f"model {summary.model}, embedder {summary.embedder}\n"
            f"{cmd.calls_line()}"
        )
    write_report(outcome.run, f"veracity isotropy: {o.dataset}", o.as_json)


def _num(value: float | None) -> str:
    return f"{'—':>7}" if value is None or value != value else f"{value:7.2f}"
