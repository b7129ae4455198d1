"""``veracity consistency`` and ``veracity validate consistency``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from veracity.cli.lifecycle import command_run, write_report
from veracity.cli.options import (
    SEED,
    CommonOptions,
    Finite,
    common_options,
    default_out,
    handles_errors,
    options_as,
    record_selection,
    sample_options,
    selection_of,
)
from veracity.cli.output import echo, safe
from veracity.data.stored import selected_items
from veracity.errors import ConfigError
from veracity.methods.consistency.core import ConsistencySettings
from veracity.methods.consistency.run import run_consistency, validate_consistency
from veracity.store import dumps
from veracity.types import Item

DEFAULT_MODEL, DEFAULT_EMBEDDER = "llamacpp/default", "st/default"


@dataclass(frozen=True)
class ConsistencyOptions:
    """``veracity consistency``'s options."""

    prompts: tuple[str, ...]
    dataset: str | None
    model: str
    embedder: str
    m: int
    temperature: float
    max_tokens: int
    seed: int
    limit: int | None
    sample: int | None
    sample_seed: int
    question_field: str | None
    out: Path | None
    as_json: bool
    common: CommonOptions = CommonOptions()

    def settings(self) -> ConsistencySettings:
        return ConsistencySettings(self.m, self.temperature, self.max_tokens, self.seed)


@dataclass(frozen=True)
class ValidateOptions:
    """``veracity validate consistency``'s options."""

    run: Path
    judge: str | None
    resamples: int
    seed: int
    as_json: bool
    common: CommonOptions = CommonOptions()


@click.command()
@click.argument("prompts", nargs=-1)
@click.option("--dataset", help="builtin, truthfulqa:PATH, webquestions:PATH, jsonl:PATH, csv:PATH.")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True, help="Model spec.")
@click.option("--embedder", "-e", default=DEFAULT_EMBEDDER, show_default=True,
              help="Embedder spec.")
@click.option("-M", "--samples", "m", type=click.IntRange(1, 100), default=5, show_default=True,
              help="Answers sampled per question at --temperature.")
@click.option("--temperature", type=Finite(0.0, 10.0, min_open=True), default=0.7,
              show_default=True)
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the sampling (each sample has its own index).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first K questions.")
@sample_options
@click.option("--question-field", help="Question field / column of a JSONL or CSV dataset.")
@click.option("--out", type=click.Path(path_type=Path), help="Run directory to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-question records as JSON.")
@common_options
@handles_errors
@options_as(ConsistencyOptions)
def consistency(o: ConsistencyOptions) -> None:
    """Self-consistency baseline: how close M answers sampled at T > 0 stay to the greedy one.

    Score = (mean cosine of the samples' embeddings to the greedy answer's + 1) / 2, in [0, 1];
    higher = more consistent (UQLM's cosine scorer). Give prompts or --dataset.
    """
    if bool(o.prompts) == bool(o.dataset):
        raise ConfigError("give prompts or --dataset SPEC (exactly one)")
    selection = selection_of(o.sample, o.sample_seed, o.limit)
    if selection.active and not o.dataset:
        raise ConfigError("--limit and --sample choose questions of a --dataset")
    chosen: dict[str, Any] | None = None
    held = ExitStack()
    if o.dataset is None:
        items: Sequence[Item] = [Item(f"prompt-{i}", p) for i, p in enumerate(o.prompts, 1)]
        dataset, out = "prompts", o.out
    else:
        items, chosen = held.enter_context(selected_items(  # large files: on disk
            o.dataset, selection, o.question_field))
        dataset = o.dataset
        out = o.out or default_out("consistency", dataset.split(":")[-1], o.model)
    with held, command_run(o.common) as cmd:
        outcome = run_consistency(items, o.model, o.embedder, o.settings(), cmd.ctx, out,
                                  dataset)
    record_selection(outcome.run, chosen)
    if o.as_json:
        echo(dumps(outcome.records_json(), indent=2))
    else:
        for record in outcome.records:
            score = "   —  " if record.score is None else f"{record.score:.4f}"
            echo(f"{score}  {safe(record.prompt)[:70]}")
        r = outcome.summary
        echo(f"\nmean score {_float(r.mean_score):.4f} ± {_float(r.stderr):.4f} (SE) over "
             f"{r.n_scored} questions, {r.n_unscored} unscored\n{cmd.calls_line()}")
    write_report(outcome.run, f"veracity self-consistency: {dataset}", o.as_json)


def _float(value: float | None) -> float:
    return math.nan if value is None else value


@click.command("consistency")
@click.argument("run", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--judge", help="Judge model spec (asked CORRECT / INCORRECT) instead of the "
                              "reference rules.")
@click.option("--resamples", type=click.IntRange(100, 1_000_000), default=2000, show_default=True,
              help="Bootstrap resamples for the confidence interval.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@common_options
@handles_errors
@options_as(ValidateOptions)
def validate_command(o: ValidateOptions) -> None:
    """AUROC of 1 - score for flagging incorrect answers of a consistency RUN.

    Labels come from the references stored with each question, or from --judge. Writes
    validation.json into RUN and rebuilds its report.
    """
    run = o.run
    with command_run(o.common) as cmd:
        results = validate_consistency(run, cmd.ctx, o.judge, o.resamples, o.seed)
    from veracity.store import RunDir

    write_report(RunDir.open(run), "veracity self-consistency", quiet=True)
    for note in results.endpoints_from_run:
        echo(f"using {note}", err=True)
    if o.as_json:
        echo(dumps({k: v for k, v in results.to_json().items() if k != "items"}, indent=2))
        return
    a = results.auroc
    echo(f"labelled {results.n_labelled} of {results.n_items} answers; accuracy "
         f"{results.accuracy:.3f}\nAUROC of 1 − score for flagging incorrect answers: "
         f"{a.auroc:.3f} [{a.ci[0]:.3f}, {a.ci[1]:.3f}] (n = {a.n}, "
         f"{a.n_incorrect} incorrect)\n{cmd.calls_line()}\n"
         f"validation: {run / 'validation.json'}\nreport: {run / 'report.html'}")
