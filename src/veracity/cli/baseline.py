"""The shape the baseline commands share (``veracity logprob``, ``length``,
``semantic-entropy``, ``p-true``): questions from prompts, a dataset or a recorded file, a run
directory, per-question lines or ``--json`` records, and the report. Each command adds only its
own options, its settings and how a record and the summary read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import click

from veracity.cli.lifecycle import CommandRun, command_run, write_report
from veracity.cli.options import (
    CommonOptions,
    default_out,
    record_selection,
    sample_options,
    selection_of,
)
from veracity.cli.output import echo
from veracity.data.sample import Selection
from veracity.data.stored import selected_items
from veracity.errors import ConfigError
from veracity.records import Record
from veracity.runs.common import Context
from veracity.runs.result import RunResult, Summary
from veracity.store import dumps
from veracity.types import Item

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R", bound=Record)
S = TypeVar("S", bound=Summary)

DATASETS = "builtin, truthfulqa:PATH, webquestions:PATH, jsonl:PATH, csv:PATH."


@dataclass(frozen=True, kw_only=True)
class BaselineOptions:
    """The options every baseline command takes; a command's own options dataclass adds its
    fields to these."""

    prompts: tuple[str, ...]
    dataset: str | None
    recorded: Path | None
    limit: int | None
    sample: int | None
    sample_seed: int
    question_field: str | None
    out: Path | None
    as_json: bool
    common: CommonOptions = CommonOptions()

    def selection(self) -> Selection:
        """The dataset items --limit and --sample choose, once the questions' source is known
        to be exactly one of prompts, --dataset and --recorded."""
        if sum(map(bool, (self.prompts, self.dataset, self.recorded))) != 1:
            raise ConfigError("give prompts, --dataset SPEC or --recorded FILE (exactly one)")
        selection = selection_of(self.sample, self.sample_seed, self.limit)
        if selection.active and not self.dataset:
            raise ConfigError("--limit and --sample choose questions of a --dataset")
        return selection


def source_options(recorded_help: str) -> Callable[[F], F]:
    """PROMPTS, --dataset and --recorded (what the recorded file holds: ``recorded_help``)."""
    def apply(func: F) -> F:
        func = click.option("--recorded", type=click.Path(path_type=Path, exists=True,
                                                          dir_okay=False),
                            help=recorded_help)(func)
        func = click.option("--dataset", help=DATASETS)(func)
        return click.argument("prompts", nargs=-1)(func)
    return apply


def output_options(func: F) -> F:
    """--limit, --sample, --question-field, --out and --json."""
    func = click.option("--json", "as_json", is_flag=True,
                        help="Print the per-question records as JSON.")(func)
    func = click.option("--out", type=click.Path(path_type=Path),
                        help="Run directory to write.")(func)
    func = click.option("--question-field",
                        help="Question field / column of a JSONL or CSV dataset.")(func)
    func = sample_options(func)
    return click.option("--limit", type=click.IntRange(min=1),
                        help="Only the first K questions.")(func)


@dataclass(frozen=True)
class Ran(Generic[R, S]):
    """A baseline command's run: its result, the command (for its call counts) and the
    questions' source as the report's title names it."""

    outcome: RunResult[R, S]
    cmd: CommandRun
    source: str


def run_baseline(
    o: BaselineOptions,
    selection: Selection,
    method: str,
    model: str,
    live: Callable[[Sequence[Item], Context, Path | None, str], RunResult[R, S]],
    recorded: Callable[[Path, Context, Path | None], RunResult[R, S]],
    recorded_model: str = "recorded",
) -> Ran[R, S]:
    """Score the prompts or the chosen dataset items with ``model`` (``live``), or the
    recorded file (``recorded``); the run directory is --out, else a stable default name for a
    dataset or a recorded file (``recorded_model`` names the model in it)."""
    chosen: dict[str, Any] | None = None
    held = ExitStack()
    out: Path | None
    if o.recorded:
        source = f"recorded:{o.recorded}"
        out = o.out or default_out(method, str(o.recorded), recorded_model)
        with command_run(o.common) as cmd:
            outcome = recorded(o.recorded, cmd.ctx, out)
    else:
        if not o.dataset:
            items: Sequence[Item] = [Item(f"prompt-{i}", p) for i, p in enumerate(o.prompts, 1)]
            source, out = "prompts", o.out
        else:
            items, chosen = held.enter_context(selected_items(
                o.dataset, selection, o.question_field))
            source = o.dataset
            out = o.out or default_out(method, source.split(":")[-1], model)
        with held, command_run(o.common) as cmd:
            outcome = live(items, cmd.ctx, out, source)
    record_selection(outcome.run, chosen)
    return Ran(outcome, cmd, source)


def show_baseline(o: BaselineOptions, ran: Ran[R, S], line: Callable[[R], str], total: str,
                  title: str) -> None:
    """The records as JSON (--json), or a ``line`` per record, the ``total`` line and the
    calls; then the run directory's report (``title``)."""
    if o.as_json:
        echo(dumps(ran.outcome.records_json(), indent=2))
    else:
        for record in ran.outcome.records:
            echo(line(record))
        echo(f"\n{total}\n{ran.cmd.calls_line()}")
    write_report(ran.outcome.run, f"{title}: {ran.source}", o.as_json)
