"""Token log-probabilities from a local model's logits, for backends that compute them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

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
