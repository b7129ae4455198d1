"""Greedy decoding that verifies a draft answer instead of generating it token by token.

γ asks the same question N + 1 times; a stable answer's perturbed answers mostly repeat the
centre answer y0. Checking a known continuation is far cheaper than producing it: one forward
pass over ``[next token] + draft`` gives the model's greedy choice after every draft token at
once, and the draft is kept up to the first disagreement (speculative decoding with the draft
taken from y0, the way prompt-lookup decoding takes it from the prompt). After a disagreement
decoding goes on one token at a time and drafts again from y0 as soon as the last tokens
produced occur in y0 (realignment).

The result is the greedy answer. With flash attention (which ``decode=draft`` uses) a token
checked inside a batch is computed by the same kernels as a one-token decode, bit for bit where
the load-time check (:mod:`veracity.backends.llamacpp_exact`) says so; elsewhere a near-tied
choice can flip. The decoder is part of the model's identity, and the benches measure how often
answers differ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

MATCH = 3
"""Tokens at the end of the output that must occur in the draft to draft again from there."""
MIN_DRAFT = 4
"""Draft tokens proposed at least, even after rejections."""


@dataclass
class DraftStats:
    """What a draft-verified decode did (for the benches and run.json)."""

    proposed: int = 0
    accepted: int = 0
    forward_passes: int = 0


@dataclass(frozen=True)
class Decoded:
    tokens: list[int]
    finish_reason: str
    text: bytes


def next_draft(out: Sequence[int], draft: Sequence[int], limit: int,
               more: Sequence[Sequence[int]] = ()) -> list[int]:
    """The draft's tokens expected after ``out``: the rest of the draft while ``out`` is its
    prefix, else what follows the latest place where ``out``'s last MATCH tokens occur in the
    draft, else in each of ``more`` in turn (other answers, the prompt).

    >>> next_draft([5, 6], [5, 6, 7, 8], 10)
    [7, 8]
    >>> next_draft([9, 4, 6, 7], [5, 4, 6, 7, 8, 1], 10)
    [8, 1]
    >>> next_draft([9, 4], [5, 6, 7], 10)
    []
    >>> next_draft([], [5, 6, 7], 2)
    [5, 6]
    >>> next_draft([1, 4, 6, 7], [5, 6, 7], 10, more=[[3, 3], [4, 6, 7, 2]])
    [2]
    """
    if limit <= 0:
        return []
    if len(out) <= len(draft) and list(draft[: len(out)]) == list(out):
        return list(draft[len(out) : len(out) + limit])
    if len(out) < MATCH:
        return []
    tail = list(out[-MATCH:])
    for source in (draft, *more):
        for start in range(len(source) - MATCH - 1, -1, -1):
            if list(source[start : start + MATCH]) == tail:
                return list(source[start + MATCH : start + MATCH + limit])
    return []


Forward = Callable[[list[int]], list[int]]
"""Evaluate tokens after what is already in the KV cache; the greedy choice after each one."""


def multibyte_wait(text: bytes, waiting: int) -> int:
    """Tokens still to wait before checking stops: as llama-cpp-python's ``create_completion``
    does while the text ends inside a multi-byte UTF-8 character (its quirks included, so that
    both decoders stop on the same token).

    >>> multibyte_wait(b"ab" + "é".encode()[:1], 0)
    1
    >>> multibyte_wait(b"abc", 0)
    0
    """
    for index, char in enumerate(text[-3:]):
        k = 3 - index
        for num, pattern in ((2, 192), (3, 224), (4, 240)):
            if num > k and pattern & char == pattern:
                waiting = num - k
    return waiting


def draft_decode(
    first: int,
    draft: Sequence[int],
    forward: Forward,
    truncate: Callable[[int], None],
    is_eog: Callable[[int], bool],
    detokenize: Callable[[list[int]], bytes],
    stop: Sequence[bytes],
    max_tokens: int,
    max_batch: int,
    stats: DraftStats | None = None,
    more: Sequence[Sequence[int]] = (),
) -> Decoded:
    """Greedy decoding from ``first`` (the model's choice after the prompt), verifying drafts.

    ``forward(tokens)`` evaluates tokens appended to the KV cache and returns the argmax after
    each; ``truncate(k)`` drops all but the first ``k`` tokens evaluated since the prompt
    (rejected draft tokens). ``more`` are further token sequences to draft from where the
    draft has nothing to propose. Stops as ``create_completion`` does: at an end-of-generation
    token, a stop string, or ``max_tokens`` (neither checked while the text ends inside a
    multi-byte character).
    """
    stats = stats if stats is not None else DraftStats()
    out: list[int] = []
    waiting = 0

    def append(token: int) -> Decoded | None:
        """Add a token the model chose; the finished answer when it ends here."""
        nonlocal waiting
        if is_eog(token):
            return Decoded(out, "stop", detokenize(out))
        out.append(token)
        text = detokenize(out)
        waiting = multibyte_wait(text, waiting)
        if waiting > 0:
            waiting -= 1
            return None
        hit = [s for s in stop if s and s in text]
        if hit:
            return Decoded(out, "stop", text[: text.index(hit[0])])
        if len(out) >= max_tokens:
            return Decoded(out, "length", text)
        return None

    nxt = first
    length = max_batch - 1  # draft tokens to propose: halved on a rejection, doubled on success
    while True:
        finished = append(nxt)
        if finished is not None:
            return finished
        room = max_tokens - len(out) if waiting == 0 else max_batch
        proposal = next_draft(out, draft, min(length, max_batch - 1, max(room, 0)), more)
        evaluated = len(out) - 1  # tokens of the output already in the KV cache
        choices = forward([nxt, *proposal])
        stats.forward_passes += 1
        stats.proposed += len(proposal)
        accepted = 0
        for token, choice in zip(proposal, choices, strict=False):
            if choice != token:
                break
            accepted += 1
            finished = append(token)
            if finished is not None:
                stats.accepted += accepted
                return finished
        stats.accepted += accepted
        if proposal:  # a rejected draft token costs a batch row: propose less after one
            length = min(2 * length, max_batch - 1) if accepted == len(proposal) \
                else max(MIN_DRAFT, accepted + 1)
        truncate(evaluated + 1 + accepted)
        nxt = choices[accepted]
