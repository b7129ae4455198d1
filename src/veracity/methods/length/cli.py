"""``veracity length``: the answer-length baseline on prompts, a dataset or recorded answers."""

from __future__ import annotations

from dataclasses import dataclass

import click

from veracity.cli.baseline import (
    BaselineOptions,
    output_options,
    run_baseline,
    show_baseline,
    source_options,
)
from veracity.cli.options import common_options, handles_errors, options_as
from veracity.cli.output import safe
from veracity.methods.length.core import LengthSettings
from veracity.methods.length.records import LengthRecord
from veracity.methods.length.run import run_length, run_recorded

DEFAULT_MODEL = "llamacpp/default"


@dataclass(frozen=True, kw_only=True)
class LengthOptions(BaselineOptions):
    """``veracity length``'s options."""

    model: str
    max_tokens: int

    def settings(self) -> LengthSettings:
        return LengthSettings(self.max_tokens)


def _line(record: LengthRecord) -> str:
    score = "    —" if record.score is None else f"{record.score:5.0f}"
    return f"{score}  {safe(record.prompt)[:70]}"


@click.command()
@source_options("JSONL of recorded answers (prompt, answer, optional tokens): no model call.")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True, help="Model spec.")
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True)
@output_options
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
    selection = o.selection()
    settings = o.settings()
    ran = run_baseline(
        o, selection, "length", o.model,
        lambda items, ctx, out, source: run_length(items, o.model, settings, ctx, out, source),
        lambda path, ctx, out: run_recorded(path, settings, ctx, out))
    s = ran.outcome.summary
    show_baseline(o, ran, _line,
                  f"mean length {s.mean_score:.1f} ± {s.stderr:.1f} tokens (SE) over "
                  f"{s.n_scored} questions, {s.n_unscored} unscored", "veracity length")
