"""``veracity p-true``: the P(True) baseline on prompts, a dataset or recorded answers."""

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
from veracity.methods.p_true.core import PTrueSettings, load_prompt
from veracity.methods.p_true.run import run_p_true, run_recorded
from veracity.store import dumps
from veracity.types import Item

DEFAULT_MODEL = "llamacpp/default"


@dataclass(frozen=True)
class PTrueOptions:
    """``veracity p-true``'s options."""

    prompts: tuple[str, ...]
    dataset: str | None
    recorded: Path | None
    model: str | None
    prompt_file: Path | None
    top_k: int
    max_tokens: int
    limit: int | None
    sample: int | None
    sample_seed: int
    question_field: str | None
    out: Path | None
    as_json: bool
    common: CommonOptions = CommonOptions()


@click.command("p-true")
@click.argument("prompts", nargs=-1)
@click.option("--dataset", help="builtin, truthfulqa:PATH, webquestions:PATH, jsonl:PATH, csv:PATH.")
@click.option("--recorded", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="JSONL of recorded answers (prompt, answer[, verdict, verdict_logprobs]): "
                   "answers with a recorded verdict need no model call.")
@click.option("--model", "-m", default=None,
              help=f"Model spec (default {DEFAULT_MODEL}; with --recorded, only to ask about "
                   "answers without a recorded verdict).")
@click.option("--prompt-file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Your own True / False question: a text file with {question} and {answer}.")
@click.option("--top-k", type=click.IntRange(1, 20), default=20, show_default=True,
              help="Alternatives asked for at each reply token.")
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True,
              help="Of the greedy answer.")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first K questions.")
@sample_options
@click.option("--question-field", help="Question field / column of a JSONL or CSV dataset.")
@click.option("--out", type=click.Path(path_type=Path), help="Run directory to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-question records as JSON.")
@common_options
@handles_errors
@options_as(PTrueOptions)
def p_true(o: PTrueOptions) -> None:
    """P(True) baseline (Kadavath et al. 2022): the model judges its own answer.

    Shown the question and its greedy answer, the model is asked whether the answer is true;
    the score is its probability of "True" against "False" from the next-token
    log-probabilities, or 1 / 0 from the word it replies where there are none. Larger = more
    trustworthy. Give prompts, --dataset or --recorded.
    """
    if sum(map(bool, (o.prompts, o.dataset, o.recorded))) != 1:
        raise ConfigError("give prompts, --dataset SPEC or --recorded FILE (exactly one)")
    selection = selection_of(o.sample, o.sample_seed, o.limit)
    if selection.active and not o.dataset:
        raise ConfigError("--limit and --sample choose questions of a --dataset")
    template, source_of_prompt = load_prompt(o.prompt_file)
    settings = PTrueSettings(o.max_tokens, o.top_k, prompt=template,
                             prompt_source=source_of_prompt)
    chosen: dict[str, Any] | None = None
    held = ExitStack()
    out: Path | None
    if o.recorded:
        source = f"recorded:{o.recorded}"
        out = o.out or default_out("p-true", str(o.recorded), o.model or "recorded")
        with command_run(o.common) as cmd:
            outcome = run_recorded(o.recorded, o.model, settings, cmd.ctx, out)
    else:
        model = o.model or DEFAULT_MODEL
        if o.dataset is None:
            items: Sequence[Item] = [Item(f"prompt-{i}", p) for i, p in enumerate(o.prompts, 1)]
            source, out = "prompts", o.out
        else:
            items, chosen = held.enter_context(selected_items(
                o.dataset, selection, o.question_field))
            source = o.dataset
            out = o.out or default_out("p-true", source.split(":")[-1], model)
        with held, command_run(o.common) as cmd:
            outcome = run_p_true(items, model, settings, cmd.ctx, out, source)
    record_selection(outcome.run, chosen)
    if o.as_json:
        echo(dumps(outcome.records_json(), indent=2))
    else:
        for record in outcome.records:
            score = "   —  " if record.score is None else f"{record.score:.4f}"
            echo(f"{score}  {safe(record.prompt)[:70]}")
        r = outcome.results
        echo(f"\nmean P(True) {r['mean_score']:.4f} ± {r['stderr']:.4f} (SE) over "
             f"{r['n_scored']} questions, {r['n_unscored']} unscored\n{cmd.calls_line()}")
    write_report(outcome.run, f"veracity P(True): {source}", o.as_json)
