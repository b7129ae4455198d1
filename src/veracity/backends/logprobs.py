"""Token log-probabilities from a local model's logits, for backends that compute them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from veracity.errors import DataError
from veracity.types import TokenLogprob


def log_softmax(logits: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Natural-log probabilities of each row of logits (the raw model distribution, before any
    temperature or sampling filter).

    >>> [round(float(v), 6) for v in log_softmax([0.0, 0.0])]
    [-0.693147, -0.693147]
    """
    row = np.asarray(logits, dtype=np.float64)
    shifted = row - row.max(axis=-1, keepdims=True)
    return np.asarray(shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True)),
                      dtype=np.float64)


def token_logprobs(rows: npt.ArrayLike, tokens: Sequence[int], top: int,
                   text_of: Callable[[int], str]) -> tuple[TokenLogprob, ...]:
    """Each token's log-probability under the logits row that predicted it (rows[i] predicts
    tokens[i]) and the ``top`` most likely alternatives there, most likely first."""
    out = []
    for row, token in zip(np.atleast_2d(np.asarray(rows, dtype=np.float64)), tokens,
                          strict=False):
        logp = log_softmax(row)
        best: list[int] = []
        if top > 0:
            k = min(top, logp.size)
            part = np.argpartition(-logp, k - 1)[:k]
            best = [int(i) for i in part[np.argsort(-logp[part], kind="stable")]]
        out.append(TokenLogprob(text_of(int(token)), float(logp[int(token)]),
                                tuple((text_of(i), float(logp[i])) for i in best)))
    return tuple(out)


def parse_tokens(value: Any, where: str) -> tuple[TokenLogprob, ...]:
    """Token log-probabilities as a recorded file holds them: a list with one entry per
    token, either an OpenAI chat object ``{"token", "logprob", "top_logprobs": [{"token",
    "logprob"}, ...]}`` or the cache's compact ``[token, logprob, [[alt, logprob], ...]]``."""
    if not isinstance(value, list):
        raise DataError(f"{where}: expected a list of tokens, got {type(value).__name__}")
    out = []
    for k, entry in enumerate(value):
        try:
            if isinstance(entry, dict):
                top = entry.get("top_logprobs") or []
                found = TokenLogprob(str(entry["token"]), float(entry["logprob"]),
                                     tuple((str(a["token"]), float(a["logprob"])) for a in top))
            else:
                found = TokenLogprob.from_json(entry)
        except (KeyError, TypeError, ValueError):
            raise DataError(f"{where}, token {k + 1}: expected {{token, logprob, top_logprobs}} "
                            "or [token, logprob, [[alternative, logprob], ...]]") from None
        values = [found.logprob, *(lp for _, lp in found.top)]
        if any(math.isnan(v) or v > 1e-9 for v in values):
            raise DataError(f"{where}, token {k + 1}: log-probabilities are numbers <= 0")
        out.append(found)
    return tuple(out)
