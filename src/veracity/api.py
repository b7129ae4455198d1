"""The small public Python API."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.client import CachedEmbedder, LLMClient
from veracity.embed.base import Embedder
from veracity.methods.gamma import Form, GammaSettings, check_prompt, run_gamma, score_answers
from veracity.registry import load_embedder, load_model
from veracity.types import Item, Sampling


def _cache(cache: bool | str | Path | Cache) -> Cache | None:
    if isinstance(cache, Cache):
        return cache
    if cache is True:
        return Cache()
    if cache is False:
        return None
    return Cache(cache)


def _embedder(embedder: str | Embedder, cache: Cache | None) -> CachedEmbedder:
    return CachedEmbedder(load_embedder(embedder) if isinstance(embedder, str) else embedder, cache)


def gamma(
    prompts: str | Sequence[str],
    model: str | Backend = "llamacpp/default",
    embedder: str | Embedder = "st/default",
    n: int = 10,
    seed: int = 0,
    form: Form = "sin",
    ball: str = "ascii-control",
    max_tokens: int = 64,
    cache: bool | str | Path | Cache = True,
) -> list[dict[str, Any]]:
    """Harmonic gamma of each prompt's answer; one record per prompt.

    >>> veracity.gamma("What is 2+2?", model="fake/constant", embedder="hash/default",
    ...                cache=False)[0]["gamma"]
    0.0
    """
    texts = [prompts] if isinstance(prompts, str) else list(prompts)
    for index, prompt in enumerate(texts, 1):
        check_prompt(prompt, f"prompt {index}")
    store = _cache(cache)
    backend = load_model(model) if isinstance(model, str) else model
    client = LLMClient(backend, store)
    settings = GammaSettings(
        n=n, ball=ball, seed=seed, form=form, sampling=Sampling(temperature=0.0, max_tokens=max_tokens)
    )
    try:
        items = [Item(f"prompt-{i}", p) for i, p in enumerate(texts, 1)]
        return run_gamma(items, client, _embedder(embedder, store), settings)
    finally:
        if isinstance(model, str):
            client.close()


def score_gamma(
    answer: str,
    perturbed_answers: Sequence[str],
    embedder: str | Embedder = "st/default",
    form: Form = "sin",
) -> float | None:
    """Gamma of recorded outputs, no model needed; None if the answer is empty."""
    return score_answers([answer], [perturbed_answers], _embedder(embedder, None), form)[0]
