"""Whether a llama.cpp context computes a token the same however tokens are batched.

With flash attention every query row of a batch is computed on its own, by the same kernels as
a one-token decode, so on many CPUs a token's logits are bit-identical whether it is decoded
alone, verified inside a draft batch or evaluated in any prompt split. Standard attention
multiplies a whole batch's queries at once and rounds differently. This is a property of the
build, the CPU and the model's weight types, so it is measured, not assumed: on a context
where it holds, a verified draft gives exactly the sequential answer and any shared prompt
prefix can be reused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from llama_cpp import Llama

PROBE = ("The river rose after three days of rain, and the village moved its boats up the "
         "hill before the bridge closed.")
"""Text evaluated by the check (its first 12 tokens)."""
CHECKED = 4
"""Tokens whose logits are compared: the last ones, decoded one at a time on one side."""


def _logits(llm: Llama, tokens: list[int], splits: list[int]) -> np.ndarray:
    """The logits after each of the last ``CHECKED`` tokens, evaluating ``tokens`` in
    llama.cpp batches of the given sizes (the last repeated)."""
    n_vocab = int(llm.n_vocab())
    llm.reset()  # type: ignore[no-untyped-call]
    llm._ctx.kv_cache_clear()  # type: ignore[no-untyped-call]
    rows, start, k = [], 0, 0
    while start < len(tokens):
        part = tokens[start : start + splits[min(k, len(splits) - 1)]]
        llm._batch.set_batch(batch=part, n_past=start, logits_all=True)
        llm._ctx.decode(llm._batch)
        rows += [np.ctypeslib.as_array(llm._ctx.get_logits_ith(i), shape=(n_vocab,)).copy()
                 for i in range(len(part))]
        start, k = start + len(part), k + 1
    return np.stack(rows[-CHECKED:])


def batch_invariant(llm: Llama) -> bool:
    """Whether the probe's last tokens get bit-identical logits decoded one at a time, inside
    one batch, and in another split. Leaves the context empty."""
    tokens = list(llm.tokenize(PROBE.encode("utf-8"), add_bos=True, special=False))[:12]
    widest = min(int(llm.context_params.n_batch), int(llm.context_params.n_ubatch))
    lead = len(tokens) - CHECKED
    try:
        one_by_one = _logits(llm, tokens, [lead, 1])
        return all(np.array_equal(one_by_one, _logits(llm, tokens, splits))
                   for splits in ([min(len(tokens), widest)], [3, min(len(tokens) - 3, widest)]))
    finally:
        llm.reset()  # type: ignore[no-untyped-call]
        llm._ctx.kv_cache_clear()  # type: ignore[no-untyped-call]
