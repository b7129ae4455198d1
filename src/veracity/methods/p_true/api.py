"""The P(True) baseline's public Python API: ``veracity.p_true``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.methods.p_true.core import PTrueSettings, load_prompt
from veracity.methods.p_true.records import PTrueRecord, PTrueSummary
from veracity.methods.p_true.run import run_p_true
from veracity.runs.common import api_context
from veracity.runs.result import RunResult
from veracity.types import Item


def p_true(
    prompts: Sequence[str],
    model: str | Backend = "llamacpp/default",
    max_tokens: int = 64,
    top_k: int = 20,
    prompt_file: str | Path | None = None,
    out: str | Path | None = None,
    cache: bool | str | Path | Cache = True,
) -> RunResult[PTrueRecord, PTrueSummary]:
    """P(True) of each prompt's greedy answer: the model, shown the question and its answer,
    is asked whether the answer is true; the score is its probability of "True".

    >>> result = p_true(["Capital of France?"], "fake/stable", cache=False)
    >>> result.records[0].error
    'the reply names neither True nor False'
    """
    template, source = load_prompt(prompt_file)
    settings = PTrueSettings(max_tokens, top_k, prompt=template, prompt_source=source)
    items = [Item(f"prompt-{i}", p) for i, p in enumerate(prompts, 1)]
    with api_context(cache, model) as (ctx, (spec,)):
        return run_p_true(items, spec, settings, ctx, None if out is None else Path(out),
                          "prompts")
