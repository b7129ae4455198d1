"""``veracity gamma --estimate``: the calls and tokens a run will make, before making any; and,
after a run, the tokens and money per scored answer (``--prices``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from veracity.methods.gamma.core import GammaSettings
from veracity.perturb import perturb
from veracity.prices import Prices
from veracity.types import Item

CHARS_PER_TOKEN = 4.0
"""A rough rule for English text with common tokenizers; the real count depends on the model
and its chat template (which adds tokens of its own)."""


def estimate_lines(items: Sequence[Item], settings: GammaSettings, model: str,
                   prices: Prices | None) -> list[str]:
    """What a γ run over ``items`` will ask the model (an upper bound: cached answers are not
    asked again), as lines for people."""
    calls = 0
    prompt_chars = 0
    for item in items:
        prompts = [item.question, *perturb(item.question, settings.n, settings.ball, settings.seed)] \
            if settings.ball != "paraphrase" else [item.question] * (settings.n + 1)
        calls += len(prompts)
        prompt_chars += sum(len(p) for p in prompts)
    prompt_tokens = math.ceil(prompt_chars / CHARS_PER_TOKEN)
    completion_tokens = calls * settings.sampling.max_tokens
    lines = [f"estimate for {len(items)} questions, N = {settings.n}, model {model}:",
             f"  model calls: {calls} at most ({len(items)} answers + {calls - len(items)} perturbed; "
             "cached ones are not sent again)",
             f"  prompt tokens: ≈ {prompt_tokens} (the prompts' characters / {CHARS_PER_TOKEN:g}; "
             "the chat template adds more)",
             f"  completion tokens: ≤ {completion_tokens} (--max-tokens {settings.sampling.max_tokens} "
             "a call)"]
    if settings.ball == "paraphrase" or settings.paraphraser:
        lines.append("  plus the paraphraser's calls (one per question and perturbed prompt)")
    if settings.control:
        lines.append(f"  plus the --control {settings.control} calls")
    if prices is not None:
        cost = prices.cost(model, prompt_tokens, completion_tokens)
        lines.append(f"  cost: ≤ USD {cost:.4f} at {prices.source}" if cost is not None else
                     f"  cost: {prices.source} prices neither {model} nor a default")
    return lines


def spent_line(scored: int, completion_tokens: int, prompt_chars: int, model: str,
               prices: Prices | None) -> str:
    """Tokens (and USD) per scored answer of a finished run: completion tokens as the model
    reported them, prompt tokens estimated from the prompts' characters."""
    if not scored:
        return "tokens: no answer scored"
    prompt_tokens = math.ceil(prompt_chars / CHARS_PER_TOKEN)
    line = (f"tokens per scored answer: {completion_tokens / scored:.1f} completion (counted) + "
            f"≈ {prompt_tokens / scored:.1f} prompt (estimated)")
    if prices is not None:
        cost = prices.cost(model, prompt_tokens, completion_tokens)
        if cost is not None:
            line += f"; ≈ USD {1000 * cost / scored:.4f} per 1,000 scored answers"
    return line
