"""The gateway's decisions: which requests are scored (``--score-rate``, the policy's
sampling) and what happens to a scored answer (``--policy FILE``; :mod:`veracity.decisions.policy`).

Without a policy every answer's decision is ``answer``. ``abstain`` flags the answer (the
decision in the ``veracity`` object and the ``X-Veracity-Decision`` header) or withholds it
(its text replaced by the policy's message); ``escalate`` asks the policy's second upstream
and scores that answer in turn.
"""

from __future__ import annotations

import copy
import math

from veracity.backends.logprobs import parse_tokens
from veracity.decisions.policy import Decided, Policy, sampled
from veracity.errors import DataError
from veracity.methods.logprob.core import mean_logprob
from veracity.serve.wire import ChatCompletion


def answer_logprob(data: ChatCompletion) -> float | None:
    """The mean token log-probability of the first choice, when the upstream returned its
    tokens' log-probabilities (OpenAI's ``choices[0].logprobs.content``); else None."""
    try:
        content = data["choices"][0]["logprobs"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    try:
        value = mean_logprob([t.logprob for t in parse_tokens(content, "the upstream's logprobs")])
    except DataError:
        return None
    return value if math.isfinite(value) else None


def without_logprobs(data: ChatCompletion) -> ChatCompletion:
    """The response without the log-probabilities the gateway asked for on its own."""
    out = copy.copy(data)
    out["choices"] = [{k: v for k, v in c.items() if k != "logprobs"} if isinstance(c, dict) else c
                      for c in data.get("choices") or []]
    return out


class Decisions:
    """The policy as the gateway applies it."""

    def __init__(self, policy: Policy | None, score_rate: float | None) -> None:
        self.policy = policy
        default = 1.0 if score_rate is None else score_rate
        if policy is not None and score_rate is None and policy.sampling.rate is not None:
            default = policy.sampling.rate
        self.default_rate = default
        self.models = {} if policy is None else dict(policy.sampling.models)
        self.routes = {} if policy is None else dict(policy.sampling.routes)
        self.everything = default >= 1.0 and all(
            r >= 1.0 for r in (*self.models.values(), *self.routes.values()))
        rule = None if policy is None else policy.rule
        self.needs_logprobs = rule is not None and rule.score in ("logprob", "both")
        """The gateway asks the upstream for the answer's log-probabilities (no extra call)."""
        self.needs_gamma = rule is None or rule.score != "logprob"
        """False when the policy decides on log-probabilities alone: no perturbed call."""

    def rate_for(self, model: str, route: str | None = None) -> float:
        if route is not None and route in self.routes:
            return self.routes[route]
        return self.models.get(model, self.default_rate)

    def scored(self, request_id: str, model: str, route: str | None = None) -> bool:
        """Whether this request is scored (the same id always gets the same answer); a route
        named by the client's ``X-Veracity-Route`` header has its own rate in the policy."""
        return self.everything or sampled(request_id, self.rate_for(model, route))

    def decide(self, gamma: float | None, logprob: float | None, escalated: bool = False) -> Decided:
        if self.policy is None:
            return Decided("answer", "no policy")
        if escalated:
            return self.policy.decide_escalated(gamma, logprob)
        return self.policy.decide(gamma, logprob)

    def withheld(self, data: ChatCompletion) -> ChatCompletion | None:
        """The response with its answer replaced by the policy's message when the policy
        withholds; None when it only flags."""
        if self.policy is None or self.policy.abstain.action != "withhold":
            return None
        out = copy.copy(data)
        choices = []
        for choice in data.get("choices") or []:
            if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                choice = {**choice, "message": {**choice["message"],
                                                "content": self.policy.abstain.message}}
                choice.pop("logprobs", None)
            choices.append(choice)
        out["choices"] = choices
        return out
