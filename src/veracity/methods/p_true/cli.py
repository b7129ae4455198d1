"""``veracity p-true``: the P(True) baseline on prompts, a dataset or recorded answers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
from veracity.methods.p_true.core import PTrueSettings, load_prompt
from veracity.methods.p_true.records import PTrueRecord
from veracity.methods.p_true.run import run_p_true, run_recorded

DEFAULT_MODEL = "llamacpp/default"


@dataclass(frozen=True, kw_only=True)
class PTrueOptions(BaselineOptions):
    """``veracity p-true``'s options."""

    model: str | None
    prompt_file: Path | None
    top_k: int
    max_tokens: int

    def settings(self) -> PTrueSettings:
        """The settings, with the True / False question read from --prompt-file (or the
        built-in one)."""
        template, source_of_prompt = load_prompt(self.prompt_file)
        return PTrueSettings(self.max_tokens, self.top_k, prompt=template,
                             prompt_source=source_of_prompt)


def _line(record: PTrueRecord) -> str:
    score = "   —  " if record.score is None else f"{record.score:.4f}"
    return f"{score}  {safe(record.prompt)[:70]}"


@click.command("p-true")
@source_options("JSONL of recorded answers (prompt, answer[, verdict, verdict_logprobs]): "
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
@output_options
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
    selection = o.selection()
    settings = o.settings()
    model = o.model or DEFAULT_MODEL
    ran = run_baseline(
        o, selection, "p-true", model,
        lambda items, ctx, out, source: run_p_true(items, model, settings, ctx, out, source),
        lambda path, ctx, out: run_recorded(path, o.model, settings, ctx, out),
        recorded_model=o.model or "recorded")
    s = ran.outcome.summary
    show_baseline(o, ran, _line,
                  f"mean P(True) {s.mean_score:.4f} ± {s.stderr:.4f} (SE) over "
                  f"{s.n_scored} questions, {s.n_unscored} unscored", "veracity P(True)")
