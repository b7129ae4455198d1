"""The length baseline's public Python API: ``veracity.length``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.methods.length.core import LengthSettings
from veracity.methods.length.records import LengthRecord, LengthSummary
from veracity.methods.length.run import run_length
from veracity.runs.common import api_context
from veracity.runs.result import RunResult
from veracity.types import Item


def length(
    prompts: Sequence[str],
    model: str | Backend = "llamacpp/default",
    max_tokens: int = 64,
    out: str | Path | None = None,
    cache: bool | str | Path | Cache = True,
) -> RunResult[LengthRecord, LengthSummary]:
    """Length in tokens of each prompt's greedy answer (larger = less trustworthy).

    >>> result = length(["Capital of France?"], "fake/constant", cache=False)
    >>> result.records[0].score
    1.0
    """
    settings = LengthSettings(max_tokens)
    items = [Item(f"prompt-{i}", p) for i, p in enumerate(prompts, 1)]
    with api_context(cache, model) as (ctx, (spec,)):
        return run_length(items, spec, settings, ctx, None if out is None else Path(out),
                          "prompts")
