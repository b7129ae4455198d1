"""Draft-verified greedy decoding for ``hf/...`` causal models (``decode=draft``).

The same acceptance logic as llama.cpp's (:mod:`veracity.backends.llamacpp_draft`): one forward
pass over ``[next token] + draft`` with the model's KV cache gives its greedy choice after every
draft token, the agreeing prefix is kept and the cache cropped to it. Each drafted request is
decoded alone (batch of one), so its answer does not depend on the other prompts of a batch.
"""

from __future__ import annotations

from typing import Any

from veracity.backends.llamacpp_draft import DraftStats, draft_decode
from veracity.types import Generation, GenRequest

MAX_BATCH = 32
"""Tokens verified per forward pass at most (the next token and up to 31 draft tokens)."""


def draft_generate(model: Any, tokenizer: Any, torch: Any, ids: list[int], request: GenRequest,
                   eos: list[int], device: str, stats: DraftStats) -> Generation:
    """The greedy answer to the prompt ``ids``, verifying ``request.draft`` in batches."""
    from transformers import DynamicCache

    cache = DynamicCache()
    s = request.sampling

    def logits_argmax(tokens: list[int]) -> list[int]:
        out = model(input_ids=torch.tensor([tokens], dtype=torch.long, device=device),
                    past_key_values=cache, use_cache=True)
        return [int(t) for t in out.logits[0].argmax(-1).tolist()]

    def truncate(kept: int) -> None:
        extra = cache.get_seq_length() - (len(ids) + kept)
        if extra > 0:
            cache.crop(-extra)  # this transformers crops by the number of tokens removed

    def detokenize(out: list[int]) -> bytes:
        return str(tokenizer.decode(out, skip_special_tokens=True)).encode("utf-8")

    draft: list[int] = []
    if request.draft:
        draft = [*(int(t) for t in tokenizer(request.draft, add_special_tokens=False)["input_ids"]),
                 eos[0]]
    with torch.inference_mode():
        first = logits_argmax(ids)[-1]
        done = draft_decode(first, draft, logits_argmax, truncate, is_eog=lambda t: t in eos,
                            detokenize=detokenize, stop=[t.encode("utf-8") for t in s.stop if t],
                            max_tokens=s.max_tokens, max_batch=MAX_BATCH, stats=stats)
    return Generation(text=done.text.decode("utf-8", "ignore"), finish_reason=done.finish_reason,
                      prompt_tokens=len(ids), completion_tokens=len(done.tokens))
