"""The semantic-entropy baseline's public Python API: ``veracity.semantic_entropy``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.methods.semantic_entropy.core import SemanticEntropySettings
from veracity.methods.semantic_entropy.records import SemanticEntropyRecord, SemanticEntropySummary
from veracity.methods.semantic_entropy.run import run_semantic_entropy
from veracity.runs.common import api_context
from veracity.runs.result import RunResult
from veracity.types import Item


def semantic_entropy(
    prompts: Sequence[str],
    model: str | Backend = "llamacpp/default",
    embedder: str = "st/default",
    m: int = 10,
    temperature: float = 1.0,
    entailment: str = "",
    cosine: float = 0.9,
    threshold: float = 0.5,
    form: str = "auto",
    max_tokens: int = 64,
    seed: int = 0,
    out: str | Path | None = None,
    cache: bool | str | Path | Cache = True,
) -> RunResult[SemanticEntropyRecord, SemanticEntropySummary]:
    """Semantic entropy of each prompt: M answers sampled at ``temperature``, clustered by
    meaning (``entailment``: an NLI model or a judge; default the embedder's cosine >=
    ``cosine``), entropy over the clusters; larger = less trustworthy.

    >>> result = semantic_entropy(["Capital of France?"], "fake/constant", "hash/default",
    ...                           m=4, cache=False)
    >>> result.records[0].score, result.records[0].n_clusters
    (0.0, 1)
    """
    settings = SemanticEntropySettings(m, temperature, max_tokens, seed, entailment, threshold,
                                       cosine, form)
    items = [Item(f"prompt-{i}", p) for i, p in enumerate(prompts, 1)]
    with api_context(cache, model) as (ctx, (spec,)):
        return run_semantic_entropy(items, spec, embedder, settings, ctx,
                                    None if out is None else Path(out), "prompts")
