"""``veracity logprob``: the log-probability baseline on prompts, a dataset or recorded answers."""

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
from veracity.methods.logprob.core import SIGNALS, LogprobSettings
from veracity.methods.logprob.records import LogprobRecord
from veracity.methods.logprob.run import run_logprob, run_recorded

DEFAULT_MODEL = "llamacpp/default"


@dataclass(frozen=True, kw_only=True)
class LogprobOptions(BaselineOptions):
    """``veracity logprob``'s options."""

    model: str
    top_k: int
    signal: str
    max_tokens: int

    def settings(self) -> LogprobSettings:
        return LogprobSettings(self.max_tokens, self.top_k, self.signal)


def _line(record: LogprobRecord) -> str:
    score = "   —   " if record.score is None else f"{record.score:7.4f}"
    return f"{score}  {safe(record.prompt)[:70]}"


@click.command()
@source_options("JSONL of recorded answers (prompt, answer, logprobs): no model call.")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True, help="Model spec.")
@click.option("--top-k", type=click.IntRange(0, 20), default=5, show_default=True,
              help="Alternatives asked for at each token (the entropy is over them).")
@click.option("--signal", type=click.Choice(list(SIGNALS)), default="mean_logprob",
              show_default=True, help="The signal each record's score holds.")
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True)
@output_options
@common_options
@handles_errors
@options_as(LogprobOptions)
def logprob(o: LogprobOptions) -> None:
    """Log-probability baseline: how sure the model was of its own greedy answer's tokens.

    From the greedy answer's own call (no extra call): mean token log-probability, minimum
    token probability, mean entropy of the top-k alternatives, perplexity. Needs a backend
    that returns token log-probabilities (llamacpp/, hf/, openai/ servers that send logprobs,
    fake/). Give prompts, --dataset or --recorded.
    """
    selection = o.selection()
    settings = o.settings()
    ran = run_baseline(
        o, selection, "logprob", o.model,
        lambda items, ctx, out, source: run_logprob(items, o.model, settings, ctx, out, source),
        lambda path, ctx, out: run_recorded(path, settings, ctx, out))
    s = ran.outcome.summary
    show_baseline(o, ran, _line,
                  f"mean {settings.signal} {s.mean_score:.4f} ± "
                  f"{s.means[settings.signal].stderr:.4f} (SE) over {s.n_scored} questions, "
                  f"{s.n_unscored} unscored", "veracity logprob")
