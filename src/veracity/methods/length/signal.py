"""Answer length for ``veracity benchmark``: the shared greedy answer's tokens, no call."""

from __future__ import annotations

from veracity.method import Signal, SignalRequest
from veracity.methods.length.core import answer_length
from veracity.runs.common import Context


def signal(ctx: Context, request: SignalRequest) -> list[Signal]:
    """Tokens of each greedy answer; longer = less trustworthy (the field's convention)."""
    values = tuple(float(answer_length(a)[0]) if a is not None and a.text.strip() else None
                   for a in request.answers)
    return [Signal("length", values, higher_is_better=False, baseline=True,
                   settings={"counted": "model tokens, else words and punctuation"})]
