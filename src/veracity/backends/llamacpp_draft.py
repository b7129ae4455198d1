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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
    pass_cost: dict[int, float] = field(default_factory=dict)
    """A pass over that many tokens, in one-token passes, as timed (adaptive proposals only)."""


DEPTHS = 64
"""Draft positions whose acceptance is learned (deeper ones share the last estimate)."""
EXPLORE = 8
"""After this many passes that proposed nothing of a kind, one token of it is proposed."""
_EWMA = 0.05


@dataclass
class Proposer:
    """How many draft tokens to propose: those expected to pay for their batch rows.

    A pass over 1 + k tokens costs more than a pass over one; an accepted draft token saves a
    whole pass. The passes are timed as the decoder runs (a moving average per number of
    rows: on a CPU the second row costs far more than the ninth), and the chance that the
    token at each depth is accepted, given those before it were, is counted per kind of draft
    (the rest of the request's own draft, or a draft found by realignment); the length
    proposed is the one with the largest expected saving. Only for decoders where the answer
    cannot depend on what is proposed (a batch-invariant model): otherwise the answer would
    depend on earlier requests.
    """

    tested: dict[str, list[int]] = field(default_factory=dict)
    passed: dict[str, list[int]] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    """Moving average of a pass's seconds, by its number of rows."""
    idle: dict[str, int] = field(default_factory=dict)

    PRIOR = {"rest": (7, 3), "realigned": (1, 1)}
    """(accepted, rejected) pseudo-counts before any are seen, per kind."""
    PRIOR_ROW = 0.5
    """A row's cost, as a share of a one-row pass, where no pass of that size was timed."""

    def pass_cost(self, rows: int) -> float:
        """A pass over ``rows`` tokens, in one-row passes: as timed, else between the nearest
        sizes timed, else PRIOR_ROW a row past the largest."""
        one = self.seconds.get(1)
        if one is None or one <= 0:
            return 1 + self.PRIOR_ROW * (rows - 1)
        if rows in self.seconds:
            return self.seconds[rows] / one
        below = max(b for b in self.seconds if b < rows)
        above = [b for b in self.seconds if b > rows]
        if not above:
            return self.seconds[below] / one + self.PRIOR_ROW * (rows - below)
        high = min(above)
        share = (rows - below) / (high - below)
        return (self.seconds[below] + share * (self.seconds[high] - self.seconds[below])) / one

    def row_costs(self) -> dict[int, float]:
        """Each timed size's pass, in one-row passes (for run.json and the benches)."""
        one = self.seconds.get(1)
        return {} if not one else {b: round(self.seconds[b] / one, 3)
                                   for b in sorted(self.seconds)}

    def length(self, kind: str, limit: int) -> int:
        """The number of draft tokens of ``kind`` to propose now, at most ``limit``."""
        if limit <= 0:
            return 0
        good, bad = self.PRIOR.get(kind, (1, 1))
        tested = self.tested.get(kind, [])
        passed = self.passed.get(kind, [])
        reach, saved, best, best_gain = 1.0, 0.0, 0, 0.0
        for depth in range(min(limit, DEPTHS)):
            seen = tested[depth] if depth < len(tested) else 0
            kept = passed[depth] if depth < len(passed) else 0
            reach *= (kept + good) / (seen + good + bad)
            saved += reach
            gain = saved - (self.pass_cost(depth + 2) - self.pass_cost(1))
            if gain > best_gain:
                best, best_gain = depth + 1, gain
        if best == 0:  # now and then one token anyway, or the estimates never change
            self.idle[kind] = self.idle.get(kind, 0) + 1
            if self.idle[kind] >= EXPLORE:
                self.idle[kind] = 0
                return 1
            return 0
        return best if best < DEPTHS else limit

    def learn(self, kind: str, proposed: int, accepted: int) -> None:
        """Depths 0..accepted were tested (the last one rejected unless all passed)."""
        tested = self.tested.setdefault(kind, [0] * DEPTHS)
        passed = self.passed.setdefault(kind, [0] * DEPTHS)
        for depth in range(min(accepted + 1, proposed, DEPTHS)):
            tested[depth] += 1
            passed[depth] += depth < accepted

    def timed(self, rows: int, seconds: float) -> None:
        """A pass of ``rows`` tokens took ``seconds``."""
        before = self.seconds.get(rows)
        self.seconds[rows] = seconds if before is None else before + _EWMA * (seconds - before)


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
    proposer: Proposer | None = None,
) -> Decoded:
    """Greedy decoding from ``first`` (the model's choice after the prompt), verifying drafts.

    ``forward(tokens)`` evaluates tokens appended to the KV cache and returns the argmax after
    each; ``truncate(k)`` drops all but the first ``k`` tokens evaluated since the prompt
    (rejected draft tokens). ``more`` are further token sequences to draft from where the
    draft has nothing to propose. ``proposer``: how many tokens to propose (else a fixed
    schedule: fewer after a rejection, twice as many after a success). Stops as
    ``create_completion`` does: at an end-of-generation token, a stop string, or
    ``max_tokens`` (neither checked while the text ends inside a multi-byte character).
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
        cap, kind = min(max_batch - 1, max(room, 0)), ""
        if proposer is None:
            proposal = next_draft(out, draft, min(length, cap), more)
        else:  # asked first, so no time is spent searching for a draft that will not be used
            kind = "rest" if len(out) <= len(draft) and list(draft[: len(out)]) == out \
                else "realigned"
            wanted = proposer.length(kind, cap)
            proposal = next_draft(out, draft, wanted, more) if wanted else []
        evaluated = len(out) - 1  # tokens of the output already in the KV cache
        began = time.perf_counter()
        choices = forward([nxt, *proposal])
        if proposer is not None:
            proposer.timed(1 + len(proposal), time.perf_counter() - began)
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
                if proposer is not None:
                    proposer.learn(kind, accepted, accepted)
                return finished
        stats.accepted += accepted
        if proposer is not None and proposal:
            proposer.learn(kind, len(proposal), accepted)
        if proposal:  # a rejected draft token costs a batch row: propose less after one
            length = min(2 * length, max_batch - 1) if accepted == len(proposal) \
                else max(MIN_DRAFT, accepted + 1)
        truncate(evaluated + 1 + accepted)
        nxt = choices[accepted]
