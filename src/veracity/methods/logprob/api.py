"""The log-probability baseline's public Python API: ``veracity.logprob``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.methods.logprob.core import LogprobSettings
from veracity.methods.logprob.records import LogprobRecord, LogprobSummary
from veracity.methods.logprob.run import run_logprob
from veracity.runs.common import api_context
from veracity.runs.result import RunResult
from veracity.types import Item


def logprob(
    prompts: Sequence[str],
    model: str | Backend = "llamacpp/default",
    max_tokens: int = 64,
    top_k: int = 5,
    signal: str = "mean_logprob",
    out: str | Path | None = None,
    cache: bool | str | Path | Cache = True,
) -> RunResult[LogprobRecord, LogprobSummary]:
    """Log-probability signals of each prompt's greedy answer, from its own call: mean token
    log-probability, minimum token probability, mean top-k entropy and perplexity; ``score``
    holds ``signal``.

    >>> result = logprob(["Capital of France?"], "fake/stable", cache=False)
    >>> record = result.records[0]
    >>> record.score == record.mean_logprob and record.n_tokens > 0
    True
    """
    settings = LogprobSettings(max_tokens, top_k, signal)
    items = [Item(f"prompt-{i}", p) for i, p in enumerate(prompts, 1)]
    with api_context(cache, model) as (ctx, (spec,)):
        return run_logprob(items, spec, settings, ctx, None if out is None else Path(out),
                           "prompts")
