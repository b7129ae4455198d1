"""``veracity benchmark``: every trust signal on the same answers at an equal call budget."""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from veracity.cli.baseline import BaselineOptions
from veracity.cli.lifecycle import command_run, write_report
from veracity.cli.options import (
    SEED,
    Finite,
    common_options,
    default_out,
    handles_errors,
    options_as,
    record_selection,
    sample_options,
)
from veracity.cli.output import echo, safe
from veracity.data.stored import selected_items
from veracity.jsontypes import JsonObject
from veracity.methods.benchmark.records import BenchmarkSummary
from veracity.methods.benchmark.run import run_benchmark, score_recorded
from veracity.methods.benchmark.settings import BenchmarkSettings
from veracity.metrics import Estimate
from veracity.store import dumps
from veracity.types import Item

DEFAULT_MODEL, DEFAULT_EMBEDDER = "llamacpp/default", "st/default"
SHOWN = ("auroc", "prr", "auprc", "aurc", "e_aurc", "ece", "brier")


@dataclass(frozen=True, kw_only=True)
class BenchmarkOptions(BaselineOptions):
    """``veracity benchmark``'s options (the questions' source and selection as every
    baseline command's)."""

    model: str | None
    embedder: str
    budget: int
    labels: tuple[str, ...]
    methods: str | None
    entailment: str | None
    references: tuple[str, ...]
    temperature: float
    max_tokens: int
    seed: int
    folds: int
    resamples: int

    def settings(self) -> BenchmarkSettings:
        """The settings, --labels and --methods split at commas."""
        sources = tuple(s.strip() for text in self.labels for s in text.split(",") if s.strip())
        methods = tuple(m.strip() for m in (self.methods or "").split(",") if m.strip())
        return BenchmarkSettings(self.budget, sources, methods, self.temperature,
                                 self.max_tokens, self.seed, self.folds, self.resamples,
                                 entailment=self.entailment, references=self.references)


@click.command()
@click.argument("prompts", nargs=-1)
@click.option("--dataset", help="builtin, truthfulqa:PATH, webquestions:PATH, jsonl:PATH, csv:PATH.")
@click.option("--recorded", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Score-only: a JSONL file of recorded answers (id, question, answer, samples, "
                   "references, correct); methods that need new model calls are left out "
                   "unless --model is given too.")
@click.option("--model", "-m", default=None, help=f"Model spec [default: {DEFAULT_MODEL}; none "
                                                  "with --recorded].")
@click.option("--embedder", "-e", default=DEFAULT_EMBEDDER, show_default=True,
              help="Embedder spec.")
@click.option("--budget", "-K", type=click.IntRange(1, 1000), default=11, show_default=True,
              help="Model calls per question for every method, the shared greedy answer "
                   "included (γ: N = K−1, consistency / semantic entropy: M = K−1, P(True): 1).")
@click.option("--labels", "labels", multiple=True, default=("contains",), show_default=True,
              help="Label source: contains, exact, rouge-l, similarity, judge:MODEL, "
                   "sheet:FILE (repeat, or comma-separate, for several).")
@click.option("--methods", help="Comma-separated methods to run (default: every one that can "
                                "be benchmarked).")
@click.option("--entailment", help="NLI / judge model spec semantic entropy clusters with.")
@click.option("--reference", "references", multiple=True,
              help="Reference model spec of FEWL (repeat for several); without one FEWL is "
                   "left out. FEWL spends one pair call per question and splits the rest of "
                   "the budget over the reference models.")
@click.option("--temperature", type=Finite(0.0, 10.0, min_open=True), default=0.7,
              show_default=True, help="Temperature of the methods that sample answers.")
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--folds", type=click.IntRange(2, 100), default=5, show_default=True,
              help="Cross-fitting folds of the calibration and the fused row.")
@click.option("--resamples", type=click.IntRange(100, 1_000_000), default=2000,
              show_default=True, help="Bootstrap resamples of the intervals.")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first K questions.")
@sample_options
@click.option("--question-field", help="Question field / column of a JSONL or CSV dataset.")
@click.option("--out", type=click.Path(path_type=Path), help="Run directory to write.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the tables as JSON (per label source and signal: auroc, prr, auprc, "
                   "aurc, e_aurc, ece, brier).")
@common_options
@handles_errors
@options_as(BenchmarkOptions)
def benchmark(o: BenchmarkOptions) -> None:
    """Which trust signal works on this model: every method on the same greedy answers.

    Each method gets the same --budget of model calls per question; answers are labelled by
    every --labels source; one table per source gives AUROC, PRR, AUPRC (flagging wrong
    answers), AURC, E-AURC, and ECE / Brier after cross-fitted calibration, each with a 95 %
    bootstrap interval and the paired interval of its difference to the best baseline.
    """
    settings = o.settings()
    selection = o.selection()
    chosen: dict[str, Any] | None = None
    held = ExitStack()
    with held, command_run(o.common) as cmd:
        if o.recorded:
            out = o.out
            outcome = score_recorded(o.recorded, o.embedder, settings, cmd.ctx, out, o.model)
        else:
            model = o.model or DEFAULT_MODEL
            if not o.dataset:
                items: Sequence[Item] = [Item(f"prompt-{i}", p)
                                         for i, p in enumerate(o.prompts, 1)]
                dataset, out = "prompts", o.out
            else:
                items, chosen = held.enter_context(selected_items(
                    o.dataset, selection, o.question_field))
                dataset = o.dataset
                out = o.out or default_out("benchmark", dataset.split(":")[-1], model)
            outcome = run_benchmark(items, model, o.embedder, settings, cmd.ctx, out, dataset)
    record_selection(outcome.run, chosen)
    summary = outcome.summary
    if o.as_json:
        echo(dumps(json_view(summary), indent=2))
    else:
        echo(terminal_tables(summary))
        echo(cmd.calls_line())
    write_report(outcome.run, "veracity benchmark", o.as_json)


def json_view(summary: BenchmarkSummary) -> JsonObject:
    """``--json``: benchmark.json without the curves and diagrams (the metric values per label
    source and signal under ``tables.SOURCE.metrics.SIGNAL``: auroc, prr, auprc, aurc, e_aurc,
    ece, brier, ...)."""
    found = summary.to_json()
    del found["tables"]
    return found | {"tables": {source: table.to_json(drawn=False)
                               for source, table in summary.tables.items()}}


def _cell(est: Estimate) -> str:
    if math.isnan(est.value):
        return "—"
    return f"{est.value:.3f} [{_f(est.low)}, {_f(est.high)}]"


def _f(v: float) -> str:
    return "—" if math.isnan(v) else f"{v:.2f}"


def terminal_tables(summary: BenchmarkSummary) -> str:
    """The leaderboard per label source, costs, skipped methods and warnings, as text."""
    lines: list[str] = []
    for source, entry in summary.tables.items():
        lines.append(f"\nlabels: {safe(source)}: {entry.n} of {entry.n_items} answers "
                     f"scored and labelled, {entry.n_wrong} wrong")
        if entry.problem is not None:
            lines.append(f"  no table: {entry.problem}")
            continue
        ref = entry.reference
        lines.append("  signal               " + "  ".join(f"{k:<20}" for k in SHOWN)
                     + (f"  ΔAUROC vs {safe(ref)}" if ref else ""))
        for name, row in entry.rows.items():
            diff = row["auroc"]
            delta = (f"{diff.diff:+.3f} [{_f(diff.diff_low)}, {_f(diff.diff_high)}]"
                     if not math.isnan(diff.diff) else "")
            lines.append(f"  {safe(name):<20} " + "  ".join(f"{_cell(row[k]):<20}" for k in SHOWN)
                         + f"  {delta}")
        best = entry.winner
        if best:
            lines.append(f"  best single signal by AUROC: {safe(best)}")
    lines.append("\ncost per method (budget "
                 f"{summary.settings.budget} calls per question):")
    for name, cost in summary.costs.items():
        lines.append(f"  {safe(name):<22} {cost.per_question(summary.n_items):.2f} calls/question, "
                     f"{cost.model_calls} model calls, {cost.generated_tokens} tokens, "
                     f"{cost.wall_seconds:.1f} s, embedder {cost.embed_seconds:.1f} s, "
                     f"NLI {cost.scorer_seconds:.1f} s")
    for skipped in summary.skipped:
        lines.append(f"  skipped {safe(skipped.method)}: {safe(skipped.reason)}")
    for note in summary.warnings:
        lines.append(f"warning: {safe(note)}")
    return "\n".join(lines)
