"""The self-consistency baseline's public Python API: ``veracity.consistency``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.methods.consistency.core import ConsistencySettings
from veracity.methods.consistency.records import ConsistencyRecord, ConsistencySummary
from veracity.methods.consistency.run import run_consistency
from veracity.runs.common import api_context
from veracity.runs.result import RunResult
from veracity.types import Item


def consistency(
    prompts: Sequence[str],
    model: str | Backend = "llamacpp/default",
    embedder: str = "st/default",
    m: int = 5,
    temperature: float = 0.7,
    max_tokens: int = 64,
    seed: int = 0,
    out: str | Path | None = None,
    cache: bool | str | Path | Cache = True,
) -> RunResult[ConsistencyRecord, ConsistencySummary]:
    """Self-consistency of each prompt's answer: M samples at ``temperature`` against the
    greedy answer; score in [0, 1], higher = more consistent.

    >>> result = consistency(["Capital of France?"], "fake/echo", "hash/default", m=3, cache=False)
    >>> round(result.records[0].score, 6)
    1.0
    """
    settings = ConsistencySettings(m, temperature, max_tokens, seed)
    items = [Item(f"prompt-{i}", p) for i, p in enumerate(prompts, 1)]
    with api_context(cache, model) as (ctx, (spec,)):
        return run_consistency(items, spec, embedder, settings, ctx,
                               None if out is None else Path(out), "prompts")
