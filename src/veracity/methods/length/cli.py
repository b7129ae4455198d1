"""``veracity length``: the answer-length baseline on prompts, a dataset or recorded answers."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from veracity.cli.lifecycle import command_run, write_report
from veracity.cli.options import (
    CommonOptions,
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
from veracity.methods.length.core import LengthSettings
from veracity.methods.length.run import run_length, run_recorded
from veracity.store import dumps
from veracity.types import Item

DEFAULT_MODEL = "llamacpp/default"


@dataclass(frozen=True)
class LengthOptions:
    """``veracity length``'s options."""

    prompts: tuple[str, ...]
    dataset: str | None
    recorded: Path | None
    model: str
    max_tokens: int
    limit: int | None
    sample: int | None
    sample_seed: int
    question_field: str | None
    out: Path | None
    as_json: bool
    common: CommonOptions = CommonOptions()


@click.command()
@click.argument("prompts", nargs=-1)
@click.option("--dataset", help="builtin, truthfulqa:PATH, webquestions:PATH, jsonl:PATH, csv:PATH.")
@click.option("--recorded", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="JSONL of recorded answers (prompt, answer, optional tokens): no model call.")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True, help="Model spec.")
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first K questions.")
@sample_options
@click.option("--question-field", help="Question field / column of a JSONL or CSV dataset.")
@click.option("--out", type=click.Path(path_type=Path), help="Run directory to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-question records as JSON.")
@common_options
@handles_errors
@options_as(LengthOptions)
def length(o: LengthOptions) -> None:
    """Answer-length baseline: the greedy answer's length in tokens (larger = less trusted).

    Counted by the model's tokenizer where the backend reports it, else words and punctuation
    marks. Length alone can rival costly signals when the labels favour short answers, so
    compare every signal with it. Give prompts, --dataset or --recorded (prompt, answer and
    optionally tokens per line: no model call).
    """
    if sum(map(bool, (o.prompts, o.dataset, o.recorded))) != 1:
        raise ConfigError("give prompts, --dataset SPEC or --recorded FILE (exactly one)")
    selection = selection_of(o.sample, o.sample_seed, o.limit)
    if selection.active and not o.dataset:
        raise ConfigError("--limit and --sample choose questions of a --dataset")
    settings = LengthSettings(o.max_tokens)
    chosen: dict[str, Any] | None = None
    held = ExitStack()
    out: Path | None
    if o.recorded:
        source = f"recorded:{o.recorded}"
        out = o.out or default_out("length", str(o.recorded), "recorded")
        with command_run(o.common) as cmd:
            outcome = run_recorded(o.recorded, settings, cmd.ctx, out)
    else:
        if o.dataset is None:
            items: Sequence[Item] = [Item(f"prompt-{i}", p) for i, p in enumerate(o.prompts, 1)]
            source, out = "prompts", o.out
        else:
            items, chosen = held.enter_context(selected_items(
                o.dataset, selection, o.question_field))
            source = o.dataset
            out = o.out or default_out("length", source.split(":")[-1], o.model)
        with held, command_run(o.common) as cmd:
            outcome = run_length(items, o.model, settings, cmd.ctx, out, source)
    record_selection(outcome.run, chosen)
    if o.as_json:
        echo(dumps(outcome.records_json(), indent=2))
    else:
        for record in outcome.records:
            score = "    —" if record.score is None else f"{record.score:5.0f}"
            echo(f"{score}  {safe(record.prompt)[:70]}")
        r = outcome.results
        echo(f"\nmean length {r['mean_score']:.1f} ± {r['stderr']:.1f} tokens (SE) over "
             f"{r['n_scored']} questions, "
             f"{r['n_unscored']} unscored\n{cmd.calls_line()}")
    write_report(outcome.run, f"veracity length: {source}", o.as_json)
