"""``veracity semantic-entropy``: the semantic-entropy baseline on prompts, a dataset or
recorded samples."""

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
from veracity.cli.options import SEED, Finite, common_options, handles_errors, options_as
from veracity.cli.output import safe
from veracity.methods.semantic_entropy.core import FORMS, SemanticEntropySettings
from veracity.methods.semantic_entropy.records import SemanticEntropyRecord
from veracity.methods.semantic_entropy.run import run_recorded, run_semantic_entropy

DEFAULT_MODEL, DEFAULT_EMBEDDER = "llamacpp/default", "st/default"


@dataclass(frozen=True, kw_only=True)
class SemanticEntropyOptions(BaselineOptions):
    """``veracity semantic-entropy``'s options."""

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

    def settings(self) -> SemanticEntropySettings:
        return SemanticEntropySettings(self.m, self.temperature, self.max_tokens, self.seed,
                                       self.entailment, self.threshold, self.cosine, self.form)


def _line(record: SemanticEntropyRecord) -> str:
    score = "   —  " if record.score is None else f"{record.score:.4f}"
    return f"{score}  {record.n_clusters:>2} clusters  {safe(record.prompt)[:60]}"


@click.command("semantic-entropy")
@source_options("JSONL of recorded samples (prompt, answer, samples[, sample_logprobs]): "
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
@output_options
@common_options
@handles_errors
@options_as(SemanticEntropyOptions)
def semantic_entropy(o: SemanticEntropyOptions) -> None:
    """Semantic-entropy baseline: how many different meanings M sampled answers carry.

    The M answers are clustered greedily (each compared with one member of every cluster so
    far), and the entropy over the clusters is the score: 0 = all mean the same, log M = all
    differ; larger = less trustworthy. Give prompts, --dataset or --recorded.
    """
    selection = o.selection()
    settings = o.settings()
    ran = run_baseline(
        o, selection, "semantic-entropy", o.model,
        lambda items, ctx, out, source: run_semantic_entropy(items, o.model, o.embedder,
                                                             settings, ctx, out, source),
        lambda path, ctx, out: run_recorded(path, o.embedder, settings, ctx, out))
    s = ran.outcome.summary
    show_baseline(o, ran, _line,
                  f"mean semantic entropy {s.mean_score:.4f} ± {s.stderr:.4f} (SE) over "
                  f"{s.n_scored} questions, {s.n_unscored} unscored",
                  "veracity semantic entropy")
