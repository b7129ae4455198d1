"""Greedy decoding of several prompts together in multi-sequence llama.cpp batches.

:func:`decode_all` decodes every prompt of a group at once (``decode=batch``): each step
evaluates one token of every live sequence in a single forward pass, whose rows cost a fraction
of a lone one-token pass on a CPU. Where the attention kernel is batch-invariant (flash, probed
at load) a sequence's logits do not depend on the others, so the answers are those of
sequential decoding.

:func:`decode_together` makes the numeric control's batch-composition variations: the target
prompt is decoded as one sequence of a ``llama_batch`` that also carries ``companions`` other
sequences (filler prompts or copies of the target), its tokens placed at slot ``position``.
Every decode step evaluates all live sequences together, so the target's arithmetic runs in
other matrix shapes and beside other rows of the shared KV cache, while its own tokens and
positions are exactly those of a lone decode.
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


def _context(llm: Any, sequences: Sequence[list[int]], max_tokens: int, n_threads: int,
             unified: bool) -> tuple[Any, Any]:
    """A fresh llama.cpp context on ``llm``'s model with its settings (attention kernel, KV
    cache types), room for every sequence and ``max_tokens`` more each, and a batch as wide
    as the prompts (each step is then one ubatch)."""
    import llama_cpp
    from llama_cpp import _internals

    total = sum(len(s) for s in sequences)
    n_seq = len(sequences)
    width = max(total, n_seq)
    params = llama_cpp.llama_context_default_params()
    for name, _ in params._fields_:
        setattr(params, name, getattr(llm.context_params, name))
    if unified:
        params.n_ctx = -(-(total + n_seq * (max_tokens + 1)) // 256) * 256
    else:  # each sequence gets a stream of n_ctx / n_seq cells of its own
        longest = max(len(s) for s in sequences) + max_tokens + 1
        params.n_ctx = n_seq * (-(-longest // 256) * 256)
    params.n_batch = params.n_ubatch = width
    params.n_seq_max = n_seq
    params.kv_unified = unified
    params.n_threads = params.n_threads_batch = n_threads
    ctx: Any = _internals.LlamaContext(model=llm._model, params=params, verbose=False)
    try:
        batch: Any = _internals.LlamaBatch(n_tokens=width, embd=0, n_seq_max=1, verbose=False)
    except BaseException:
        ctx.close()
        raise
    return ctx, batch


def _step(ctx: Any, batch: Any, tokens: dict[int, int], length: list[int]) -> dict[int, int]:
    """Evaluate one next token of each sequence in ``tokens`` (sequence -> token) as one batch,
    each at its sequence's next position; returns the batch row holding each one's logits."""
    batch.reset()
    live = {}
    for seq, token in tokens.items():
        row = batch.batch.n_tokens
        batch.batch.token[row] = token
        batch.batch.pos[row] = length[seq]
        batch.batch.n_seq_id[row] = 1
        batch.batch.seq_id[row][0] = seq
        batch.batch.logits[row] = True
        batch.batch.n_tokens = row + 1
        length[seq] += 1
        live[seq] = row
    ctx.decode(batch)
    return live


def shared_prefix(sequences: Sequence[list[int]]) -> int:
    """Tokens every sequence starts with, leaving each at least one of its own (whose logits
    give its first answer token).

    >>> shared_prefix([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]])
    2
    >>> shared_prefix([[1, 2], [1, 2]]), shared_prefix([[7, 8]])
    (1, 0)
    """
    if len(sequences) < 2:
        return 0
    limit = min(len(s) for s in sequences) - 1
    shared = 0
    while shared < limit and all(s[shared] == sequences[0][shared] for s in sequences):
        shared += 1
    return shared


def _prefill(ctx: Any, batch: Any, sequences: Sequence[list[int]]) -> dict[int, int]:
    """Evaluate every prompt; the prefix they share is evaluated once, in sequence 0, and its
    KV cells copied to the other sequences' streams (with a batch-invariant kernel the cells
    are the ones each would have computed). Returns the batch row of each sequence's logits."""
    import llama_cpp

    shared = shared_prefix(sequences)
    if shared:
        batch.add_sequence(sequences[0][:shared], 0, False)
        ctx.decode(batch)
        memory = llama_cpp.llama_get_memory(ctx.ctx)
        for seq in range(1, len(sequences)):
            llama_cpp.llama_memory_seq_cp(memory, 0, seq, -1, -1)
    batch.reset()
    rows = {}
    for seq, tokens in enumerate(sequences):
        for pos in range(shared, len(tokens)):
            row = batch.batch.n_tokens
            batch.batch.token[row] = tokens[pos]
            batch.batch.pos[row] = pos
            batch.batch.n_seq_id[row] = 1
            batch.batch.seq_id[row][0] = seq
            batch.batch.logits[row] = pos == len(tokens) - 1
            batch.batch.n_tokens = row + 1
        rows[seq] = batch.batch.n_tokens - 1
    ctx.decode(batch)
    return rows


def decode_all(
    llm: Any,
    sequences: Sequence[list[int]],
    max_tokens: Sequence[int],
    stops: Sequence[Sequence[bytes]],
    n_threads: int,
) -> list[Decoded]:
    """Decode every sequence greedily, all together, each until it stops as
    ``create_completion`` stops: at an end-of-generation token, one of its stop strings, or
    its ``max_tokens``. Each sequence has a KV stream of its own (as in a lone decode); the
    context is made for the group and freed afterwards."""
    import llama_cpp

    n_seq = len(sequences)
    if n_seq == 0:
        return []
    ctx, batch = _context(llm, sequences, max(max_tokens), n_threads, unified=False)
    vocab = llm._model.vocab
    n_vocab = llm.n_vocab()
    done: dict[int, Decoded] = {}
    out: list[list[int]] = [[] for _ in sequences]
    length = [len(s) for s in sequences]
    try:
        live = _prefill(ctx, batch, sequences)
        while live:
            step: dict[int, int] = {}
            for seq, row in live.items():
                token = int(np.ctypeslib.as_array(ctx.get_logits_ith(row), shape=(n_vocab,))
                            .argmax())
                prompt = sequences[seq]
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    done[seq] = Decoded(out[seq], "stop", llm.detokenize(out[seq], prev_tokens=prompt))
                    continue
                out[seq].append(token)
                text = llm.detokenize(out[seq], prev_tokens=prompt)
                hit = [s for s in stops[seq] if s and s in text]
                if hit:
                    done[seq] = Decoded(out[seq], "stop", text[: min(text.index(h) for h in hit)])
                elif len(out[seq]) >= max_tokens[seq]:
                    done[seq] = Decoded(out[seq], "length", text)
                else:
                    step[seq] = token
            if not step:
                break
            live = _step(ctx, batch, step, length)
    finally:
        batch.close()
        ctx.close()
    return [done[seq] for seq in range(n_seq)]


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

    n_seq = len(sequences)
    ctx, batch = _context(llm, sequences, max_tokens, n_threads, unified=True)
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
            live = _step(ctx, batch, {seq: nxt[seq] for seq in range(n_seq) if seq in nxt
                                      and not llama_cpp.llama_vocab_is_eog(vocab, nxt[seq])},
                         length)
    finally:
        batch.close()
        ctx.close()
