"""Greedy decoding of one prompt inside a multi-sequence llama.cpp batch.

The numeric control's batch-composition variations: the target prompt is decoded as one
sequence of a ``llama_batch`` that also carries ``companions`` other sequences (filler prompts
or copies of the target), its tokens placed at slot ``position``. Every decode step evaluates
all live sequences together, so the target's arithmetic runs in other matrix shapes and beside
other rows of the shared KV cache, while its own tokens and positions are exactly those of a
lone decode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from veracity.errors import ConfigError

FILLERS = (
    "Name three colours of the rainbow.",
    "What is the boiling point of water at sea level?",
    "Write one sentence about the sea.",
    "How many legs does a spider have?",
    "Give a synonym for 'happy'.",
    "What is the capital of Italy?",
    "List two prime numbers.",
    "Describe a tree in five words.",
)
"""Companion prompts, fixed so that a variation depends on the target prompt alone."""

COMPANIONS = ("filler", "copy")


@dataclass(frozen=True)
class Layout:
    """A batch composition: ``companions`` other sequences, the target at slot ``position``."""

    companions: int
    position: int
    fill: str = "filler"

    def __post_init__(self) -> None:
        if self.fill not in COMPANIONS or self.companions < 0 \
                or not 0 <= self.position <= self.companions:
            raise ConfigError(
                f"batch layout needs companions >= 0, 0 <= position <= companions and fill in "
                f"{COMPANIONS}, got companions={self.companions}, position={self.position}, "
                f"fill={self.fill!r}")

    def sequences(self, target: list[int], filler: Sequence[list[int]]) -> list[list[int]]:
        """The batch's token sequences in slot order (the target at ``position``)."""
        others = [list(target) if self.fill == "copy" else list(filler[j % len(filler)])
                  for j in range(self.companions)]
        return [*others[: self.position], list(target), *others[self.position :]]


@dataclass
class Decoded:
    """The target's completion tokens and why decoding stopped."""

    tokens: list[int]
    finish_reason: str
    text: bytes


def decode_together(
    llm: Any,
    sequences: Sequence[list[int]],
    target: int,
    max_tokens: int,
    stop: Sequence[bytes],
    n_threads: int,
) -> Decoded:
    """Decode every sequence greedily in shared batches until the target one stops.

    ``llm`` is a loaded ``llama_cpp.Llama``; a fresh llama.cpp context with its settings
    (attention kernel, KV cache types), sized to this batch so that each step is one ubatch, is
    made on its model and freed afterwards. Stops like ``create_completion``: at an
    end-of-generation token, a stop string, or ``max_tokens``.
    """
    import llama_cpp
    from llama_cpp import _internals

    total = sum(len(s) for s in sequences)
    n_seq = len(sequences)
    width = max(total, n_seq)
    params = llama_cpp.llama_context_default_params()
    for name, _ in params._fields_:
        setattr(params, name, getattr(llm.context_params, name))
    params.n_ctx = -(-(total + n_seq * (max_tokens + 1)) // 256) * 256
    params.n_batch = params.n_ubatch = width
    params.n_seq_max = n_seq
    params.kv_unified = True
    params.n_threads = params.n_threads_batch = n_threads
    ctx: Any = _internals.LlamaContext(model=llm._model, params=params, verbose=False)
    batch: Any = _internals.LlamaBatch(n_tokens=width, embd=0, n_seq_max=1, verbose=False)
    vocab = llm._model.vocab
    n_vocab = llm.n_vocab()
    try:
        for seq_id, tokens in enumerate(sequences):
            batch.add_sequence(tokens, seq_id, False)
        ctx.decode(batch)
        rows = np.cumsum([len(s) for s in sequences]) - 1
        live = dict(enumerate(rows.tolist()))  # seq_id -> batch row holding its logits
        length = [len(s) for s in sequences]
        out: list[int] = []
        prompt = list(sequences[target])
        while True:
            nxt = {seq: int(np.ctypeslib.as_array(ctx.get_logits_ith(row), shape=(n_vocab,))
                            .argmax()) for seq, row in live.items()}
            token = nxt[target]
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                return Decoded(out, "stop", llm.detokenize(out, prev_tokens=prompt))
            out.append(token)
            text = llm.detokenize(out, prev_tokens=prompt)
            hit = [s for s in stop if s and s in text]
            if hit:
                return Decoded(out, "stop", text[: text.index(hit[0])])
            if len(out) >= max_tokens:
                return Decoded(out, "length", text)
            batch.reset()
            live = {}
            for seq in range(n_seq):
                if seq in nxt and not llama_cpp.llama_vocab_is_eog(vocab, nxt[seq]):
                    row = batch.batch.n_tokens
                    batch.batch.token[row] = nxt[seq]
                    batch.batch.pos[row] = length[seq]
                    batch.batch.n_seq_id[row] = 1
                    batch.batch.seq_id[row][0] = seq
                    batch.batch.logits[row] = True
                    batch.batch.n_tokens = row + 1
                    length[seq] += 1
                    live[seq] = row
            ctx.decode(batch)
    finally:
        batch.close()
        ctx.close()
