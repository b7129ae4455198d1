"""The log-probability family for ``veracity benchmark``: from the shared greedy answers' own
tokens (no call); for an answer that came without them (taken from the cache of an earlier
run), the same greedy request with log-probabilities, one call, charged to this method."""

from __future__ import annotations

from veracity.method import Signal, SignalRequest, SignalUnavailable
from veracity.methods.logprob.core import SIGNALS, LogprobSettings, greedy_request, logprob_scores
from veracity.runs.common import Context
from veracity.types import Generation

ROWS = {"mean_logprob": "logprob.mean", "min_prob": "logprob.min",
        "mean_entropy": "logprob.entropy", "perplexity": "logprob.perplexity"}
"""The leaderboard row of each signal."""


def signal(ctx: Context, request: SignalRequest) -> list[Signal]:
    """Mean log-probability, minimum token probability, mean top-k entropy and perplexity."""
    settings = LogprobSettings(max_tokens=request.sampling.max_tokens)
    answers = list(request.answers)
    missing = [k for k, a in enumerate(answers) if a is not None and a.logprobs is None]
    if missing:
        client = ctx.client(request.model) if request.model is not None else None
        if client is None or not client.backend.capabilities.logprobs or request.budget < 2:
            # these answers stay unscored; the others are scored from their own tokens
            for k in missing:
                answers[k] = None
            if all(a is None for a in answers):
                raise SignalUnavailable(_why_none(
                    request, None if client is None else client.backend.capabilities.logprobs))
        else:
            replies = client.generate_each(
                [greedy_request(request.items[k].question, settings) for k in missing],
                stage="benchmark: logprob of the greedy answers")
            for k, reply in zip(missing, replies, strict=True):
                answers[k] = reply if isinstance(reply, Generation) else None
    scores = [logprob_scores(a.logprobs) if a is not None and a.logprobs and a.text.strip()
              else None for a in answers]
    # every row, even one no answer gave (e.g. no entropy without top-k alternatives): the
    # benchmark lists it as unscored, and a run in chunks has the same rows in each
    return [Signal(row, tuple(s.value(name) if s is not None else None for s in scores),
                   higher_is_better=SIGNALS[name], baseline=True,
                   settings={"top_k": settings.top_k})
            for name, row in ROWS.items()]


def _why_none(request: SignalRequest, logprobs: bool | None) -> str:
    """Why no answer could be scored (``logprobs``: the backend has them; None: no model)."""
    if logprobs is None:
        return "the recorded answers carry no token log-probabilities"
    if not logprobs:
        return f"{request.model} returns no token log-probabilities"
    return ("the cached greedy answers carry no log-probabilities and a budget of 1 leaves no "
            "call to ask for them")
