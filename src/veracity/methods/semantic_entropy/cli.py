"""``veracity semantic-entropy``: the semantic-entropy baseline on prompts, a dataset or
recorded samples."""

from __future__ import annotations

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
from veracity.methods.semantic_entropy.core import FORMS, SemanticEntropySettings
from veracity.methods.semantic_entropy.run import run_recorded, run_semantic_entropy
from veracity.store import dumps
from veracity.types import Item

DEFAULT_MODEL, DEFAULT_EMBEDDER = "llamacpp/default", "st/default"


@dataclass(frozen=True)
class SemanticEntropyOptions:
    """``veracity semantic-entropy``'s options."""

    prompts: tuple[str, ...]
    dataset: str | None
    recorded: Path | None
    model: str
    embedder: str
    entailment: str
    threshold: float
    cosine: float
    form: str
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


@click.command("semantic-entropy")
@click.argument("prompts", nargs=-1)
@click.option("--dataset", help="builtin, truthfulqa:PATH, webquestions:PATH, jsonl:PATH, csv:PATH.")
@click.option("--recorded", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="JSONL of recorded samples (prompt, answer, samples[, sample_logprobs]): "
                   "no model call but the entailment check's.")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True, help="Model spec.")
@click.option("--embedder", "-e", default=DEFAULT_EMBEDDER, show_default=True,
              help="Embedder spec (clusters by cosine when no --entailment is given).")
@click.option("--entailment", metavar="SPEC", default="",
              help="What decides that two answers mean the same: an NLI model (nli/PATH, "
                   "cross-encoder/PATH, or hf/PATH of a sequence-classification model; "
                   "bidirectional entailment) or a judge model spec asked YES / NO. Default: "
                   "the embedder's cosine >= --cosine.")
@click.option("--threshold", type=Finite(0.0, 1.0, min_open=True), default=0.5,
              show_default=True, help="NLI: P(entailment) at or above which one answer "
                                      "entails the other.")
@click.option("--cosine", type=Finite(-1.0, 1.0), default=0.9, show_default=True,
              help="Embedder clustering: cosine at or above which two answers mean the same.")
@click.option("--form", type=click.Choice(FORMS), default="auto", show_default=True,
              help="auto: likelihood-weighted where the backend returns log-probabilities, "
                   "else discrete.")
@click.option("-M", "--samples", "m", type=click.IntRange(2, 100), default=10, show_default=True,
              help="Answers sampled per question at --temperature.")
@click.option("--temperature", type=Finite(0.0, 10.0, min_open=True), default=1.0,
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
@options_as(SemanticEntropyOptions)
def semantic_entropy(o: SemanticEntropyOptions) -> None:
    """Semantic-entropy baseline: how many different meanings M sampled answers carry.

    The M answers are clustered greedily (each compared with one member of every cluster so
    far), and the entropy over the clusters is the score: 0 = all mean the same, log M = all
    differ; larger = less trustworthy. Give prompts, --dataset or --recorded.
    """
    if sum(map(bool, (o.prompts, o.dataset, o.recorded))) != 1:
        raise ConfigError("give prompts, --dataset SPEC or --recorded FILE (exactly one)")
    selection = selection_of(o.sample, o.sample_seed, o.limit)
    if selection.active and not o.dataset:
        raise ConfigError("--limit and --sample choose questions of a --dataset")
    settings = SemanticEntropySettings(o.m, o.temperature, o.max_tokens, o.seed,
                                       o.entailment, o.threshold, o.cosine,
                                       o.form)
    chosen: dict[str, Any] | None = None
    held = ExitStack()
    out: Path | None
    if o.recorded:
        source = f"recorded:{o.recorded}"
        out = o.out or default_out("semantic-entropy", str(o.recorded), "recorded")
        with command_run(o.common) as cmd:
            outcome = run_recorded(o.recorded, o.embedder, settings, cmd.ctx, out)
    else:
        if o.dataset is None:
            items: Sequence[Item] = [Item(f"prompt-{i}", p) for i, p in enumerate(o.prompts, 1)]
            source, out = "prompts", o.out
        else:
            items, chosen = held.enter_context(selected_items(
                o.dataset, selection, o.question_field))
            source = o.dataset
            out = o.out or default_out("semantic-entropy", source.split(":")[-1],
                                           o.model)
        with held, command_run(o.common) as cmd:
            outcome = run_semantic_entropy(items, o.model, o.embedder, settings,
                                           cmd.ctx, out, source)
    record_selection(outcome.run, chosen)
    if o.as_json:
        echo(dumps(outcome.records_json(), indent=2))
    else:
        for record in outcome.records:
            score = "   —  " if record.score is None else f"{record.score:.4f}"
            echo(f"{score}  {record.n_clusters:>2} clusters  {safe(record.prompt)[:60]}")
        r = outcome.results
        echo(f"\nmean semantic entropy {r['mean_score']:.4f} ± {r['stderr']:.4f} (SE) over "
             f"{r['n_scored']} questions, {r['n_unscored']} unscored\n{cmd.calls_line()}")
    write_report(outcome.run, f"veracity semantic entropy: {source}", o.as_json)
