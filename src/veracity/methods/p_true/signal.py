"""P(True) for ``veracity benchmark``: one call per question asking the model whether its
shared greedy answer is true."""

from __future__ import annotations

from veracity.method import Signal, SignalRequest, SignalUnavailable
from veracity.methods.p_true.core import PTrueSettings
from veracity.methods.p_true.run import judge_answers
from veracity.runs.common import Context


def signal(ctx: Context, request: SignalRequest) -> list[Signal]:
    """P("True") from the next-token alternatives (or the parsed verdict); higher = more
    trustworthy."""
    if request.budget < 2:
        raise SignalUnavailable("P(True) needs a budget of at least 2 calls (one to ask)")
    if request.model is None:
        raise SignalUnavailable("P(True) asks the model about its answer: no model for a "
                                "recorded file (give --model)")
    settings = PTrueSettings(max_tokens=request.sampling.max_tokens)
    answers = [a.text.strip() if a is not None else "" for a in request.answers]
    records = judge_answers(list(request.items), answers, settings, ctx, request.model)
    return [Signal("p-true", tuple(r.score for r in records), higher_is_better=True,
                   baseline=True, settings=settings.describe())]
