"""``veracity semantic-entropy``: the semantic-entropy baseline on prompts, a dataset or
recorded samples."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from veracity.cli.lifecycle import command_run, write_report
from veracity.cli.options import (
    SEED,
    Finite,
    common_options,
    default_out,
    handles_errors,
    pop_selection,
    record_selection,
    sample_options,
)
from veracity.cli.output import echo, safe
from veracity.data.stored import selected_items
from veracity.errors import ConfigError
from veracity.methods.semantic_entropy.core import FORMS, SemanticEntropySettings
from veracity.methods.semantic_entropy.run import run_recorded, run_semantic_entropy
from veracity.store import dumps
from veracity.types import Item

DEFAULT_MODEL, DEFAULT_EMBEDDER = "llamacpp/default", "st/default"


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
def semantic_entropy(prompts: tuple[str, ...], **kw: Any) -> None:
    """Semantic-entropy baseline: how many different meanings M sampled answers carry.

    The M answers are clustered greedily (each compared with one member of every cluster so
    far), and the entropy over the clusters is the score: 0 = all mean the same, log M = all
    differ; larger = less trustworthy. Give prompts, --dataset or --recorded.
    """
    if sum(map(bool, (prompts, kw["dataset"], kw["recorded"]))) != 1:
        raise ConfigError("give prompts, --dataset SPEC or --recorded FILE (exactly one)")
    selection = pop_selection(kw)
    if selection.active and not kw["dataset"]:
        raise ConfigError("--limit and --sample choose questions of a --dataset")
    settings = SemanticEntropySettings(kw["m"], kw["temperature"], kw["max_tokens"], kw["seed"],
                                       kw["entailment"], kw["threshold"], kw["cosine"],
                                       kw["form"])
    chosen: dict[str, Any] | None = None
    held = ExitStack()
    if kw["recorded"]:
        source = f"recorded:{kw['recorded']}"
        out = kw["out"] or default_out("semantic-entropy", str(kw["recorded"]), "recorded")
        with command_run(kw) as cmd:
            outcome = run_recorded(kw["recorded"], kw["embedder"], settings, cmd.ctx, out)
    else:
        if prompts:
            items: Sequence[Item] = [Item(f"prompt-{i}", p) for i, p in enumerate(prompts, 1)]
            source, out = "prompts", kw["out"]
        else:
            items, chosen = held.enter_context(selected_items(
                kw["dataset"], selection, kw["question_field"]))
            source = kw["dataset"]
            out = kw["out"] or default_out("semantic-entropy", source.split(":")[-1],
                                           kw["model"])
        with held, command_run(kw) as cmd:
            outcome = run_semantic_entropy(items, kw["model"], kw["embedder"], settings,
                                           cmd.ctx, out, source)
    record_selection(outcome.run, chosen)
    if kw["as_json"]:
        echo(dumps(outcome.records_json(), indent=2))
    else:
        for record in outcome.records:
            score = "   —  " if record.score is None else f"{record.score:.4f}"
            echo(f"{score}  {record.n_clusters:>2} clusters  {safe(record.prompt)[:60]}")
        r = outcome.results
        echo(f"\nmean semantic entropy {r['mean_score']:.4f} ± {r['stderr']:.4f} (SE) over "
             f"{r['n_scored']} questions, {r['n_unscored']} unscored\n{cmd.calls_line()}")
    write_report(outcome.run, f"veracity semantic entropy: {source}", kw["as_json"])
