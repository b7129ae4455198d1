"""A scripted responder for the fake backend that answers the P(True) question with known
next-token probabilities: P("True") for each answer from a table."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping

from veracity.types import Generation, GenRequest, TokenLogprob

_PROPOSED = re.compile(r"Proposed answer: (.*)\n\nIs the proposed answer true", re.DOTALL)


def self_judge(p_true: Mapping[str, float],
               answers: Mapping[str, str] | None = None) -> Callable[[GenRequest], Generation]:
    """Replies " True" / " False" (whichever is likelier) to the built-in P(True) prompt, with
    alternatives " True" at ``p_true[answer]``, " False" at 0.9 of the rest and "Maybe" at the
    remainder; any other prompt is answered from ``answers`` (by question) or "unknown"."""

    def reply(request: GenRequest) -> Generation:
        prompt = request.messages[-1].content
        found = _PROPOSED.search(prompt)
        if found is None:
            return Generation((answers or {}).get(prompt, "unknown"))
        p = p_true[found.group(1)]
        false, other = 0.9 * (1 - p), 0.1 * (1 - p)
        top = tuple((t, math.log(v)) for t, v in ((" True", p), (" False", false),
                                                   ("Maybe", other)) if v > 0)
        top = tuple(sorted(top, key=lambda kv: -kv[1]))
        return Generation(top[0][0].strip(), logprobs=(TokenLogprob(top[0][0], top[0][1], top),))

    return reply
