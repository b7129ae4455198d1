"""The log-probability family of trust signals, computed from the greedy answer's own tokens.

For an answer of tokens t_1..t_L with natural-log probabilities l_k = log p(t_k | prompt, t_<k)
(definitions as in LM-Polygraph's white-box estimators and UQLM's white-box scorers; design
§3.4):

- mean token log-probability  (1/L) Σ_k l_k                       higher = more trustworthy
- minimum token probability   min_k exp(l_k)                      higher = more trustworthy
- mean token entropy          (1/L) Σ_k H_k                       lower  = more trustworthy
- perplexity                  exp(−(1/L) Σ_k l_k)                 lower  = more trustworthy

H_k is the entropy of the next-token distribution at position k. A backend returns only the k
most likely alternatives at each position, so H_k is the entropy of those alternatives with their
probabilities renormalised to sum to 1 (the chosen token is added when it is not among them). It
equals the full entropy when the alternatives hold all the mass, and is a different number from
it otherwise: compare entropies only at the same top-k. Pure functions over numbers; no model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from veracity.errors import ConfigError, DataError
from veracity.types import GenRequest, Sampling, TokenLogprob

SIGNALS: dict[str, bool] = {
    "mean_logprob": True,
    "min_prob": True,
    "mean_entropy": False,
    "perplexity": False,
}
"""Each signal and whether a larger value means a more trustworthy answer."""

PRIMARY = "mean_logprob"
"""The signal a run is judged by (and the benchmark's row for this method by default)."""


def _finite(logprobs: Sequence[float]) -> np.ndarray:
    values = np.asarray(logprobs, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise DataError("token log-probabilities: need at least one token")
    if np.isnan(values).any() or (values > 1e-9).any():
        raise DataError("token log-probabilities must be numbers <= 0 (natural logs)")
    return np.minimum(values, 0.0)


def mean_logprob(logprobs: Sequence[float]) -> float:
    """Mean of the tokens' log-probabilities (−inf when a token had probability 0).

    >>> round(mean_logprob([math.log(0.5), math.log(0.25)]), 6) == round(math.log(0.5 ** 1.5), 6)
    True
    """
    return float(_finite(logprobs).mean())


def min_prob(logprobs: Sequence[float]) -> float:
    """The smallest token probability.

    >>> min_prob([math.log(0.5), math.log(0.25)])
    0.25
    """
    return float(np.exp(_finite(logprobs).min()))


def perplexity(logprobs: Sequence[float]) -> float:
    """exp(−mean log p): 1 for a certain answer, inf when a token had probability 0.

    >>> round(perplexity([math.log(0.5), math.log(0.5)]), 9)
    2.0
    """
    with np.errstate(over="ignore"):
        return float(np.exp(-mean_logprob(logprobs)))


def topk_entropy(alternatives: Sequence[float]) -> float:
    """Entropy (nats) of a position's alternatives given by log-probability, renormalised to
    sum to 1. Alternatives with probability 0 add nothing.

    >>> round(topk_entropy([math.log(0.25), math.log(0.25)]), 6) == round(math.log(2), 6)
    True
    """
    values = _finite(alternatives)
    if np.isneginf(values).all():
        raise DataError("token alternatives: every alternative has probability 0")
    shifted = values - values.max()
    q = np.exp(shifted) / np.exp(shifted).sum()
    kept = q[q > 0]
    return float(max(0.0, -(kept * np.log(kept)).sum()))


def position_entropy(token: TokenLogprob) -> float | None:
    """H_k at one position from its alternatives (with the chosen token added when missing);
    None when the backend returned no alternatives."""
    if not token.top:
        return None
    values = [lp for _, lp in token.top]
    if token.token not in {t for t, _ in token.top}:
        values.append(token.logprob)
    return topk_entropy(values)


def mean_entropy(tokens: Sequence[TokenLogprob]) -> float | None:
    """Mean of H_k over the positions; None when any position came without alternatives (a
    mean over some positions only would not be comparable across answers)."""
    each = [position_entropy(t) for t in tokens]
    if not each or any(h is None for h in each):
        return None
    return float(np.mean(np.asarray(each, dtype=np.float64)))


@dataclass(frozen=True)
class LogprobScores:
    """The log-probability signals of one answer."""

    n_tokens: int
    mean_logprob: float
    min_prob: float
    perplexity: float
    mean_entropy: float | None
    """None when the backend returned no top-k alternatives (``top_k`` = 0)."""

    def value(self, signal: str) -> float | None:
        """One signal by name (a key of :data:`SIGNALS`)."""
        if signal not in SIGNALS:
            raise DataError(f"unknown log-probability signal '{signal}'; "
                            f"known: {', '.join(SIGNALS)}")
        found: float | None = getattr(self, signal)
        return found

    def uncertainty(self, signal: str = PRIMARY) -> float | None:
        """The signal as an uncertainty u (larger = less trustworthy): negated when a larger
        value of it means more trustworthy (design §3.4)."""
        found = self.value(signal)
        if found is None:
            return None
        return -found if SIGNALS[signal] else found


def logprob_scores(tokens: Sequence[TokenLogprob]) -> LogprobScores | None:
    """Every signal of one answer's tokens; None for an answer with no tokens.

    >>> s = logprob_scores([TokenLogprob("Paris", math.log(0.5),
    ...                                  (("Paris", math.log(0.5)), ("Lyon", math.log(0.5))))])
    >>> s.n_tokens, s.min_prob, round(s.perplexity, 9), round(s.mean_entropy, 6) == round(math.log(2), 6)
    (1, 0.5, 2.0, True)
    """
    if not tokens:
        return None
    logprobs = [t.logprob for t in tokens]
    return LogprobScores(len(tokens), mean_logprob(logprobs), min_prob(logprobs),
                         perplexity(logprobs), mean_entropy(tokens))


def sequence_logprob(tokens: Sequence[TokenLogprob]) -> float:
    """Sum of the tokens' log-probabilities: log p(answer | prompt)."""
    return float(math.fsum(t.logprob for t in tokens))


@dataclass(frozen=True)
class LogprobSettings:
    """How the greedy answer is asked for; every field is recorded with the results."""

    max_tokens: int = 64
    top_k: int = 5
    """Alternatives returned at each position (for the entropy); 0 = none (no entropy)."""
    signal: str = PRIMARY
    """The signal a run's ``score`` holds (any key of :data:`SIGNALS`)."""

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError("the logprob baseline needs max_tokens >= 1")
        if not 0 <= self.top_k <= 20:
            raise ConfigError("top_k: 0 to 20 alternatives per token (OpenAI's limit is 20)")
        if self.signal not in SIGNALS:
            raise ConfigError(f"unknown log-probability signal '{self.signal}'; known: "
                            f"{', '.join(SIGNALS)}")

    @property
    def higher_is_better(self) -> bool:
        return SIGNALS[self.signal]

    def describe(self) -> dict[str, object]:
        return {"max_tokens": self.max_tokens, "top_k": self.top_k, "signal": self.signal,
                "higher_is_better": self.higher_is_better,
                "entropy": "over the top-k alternatives, renormalised"}


def greedy_request(question: str, settings: LogprobSettings) -> GenRequest:
    """The greedy answer's request, with its token log-probabilities: the one call this
    baseline makes (another method's greedy answer is the same call when it asks the same)."""
    return GenRequest.user(question, Sampling(temperature=0.0, max_tokens=settings.max_tokens),
                           logprobs=settings.top_k)
