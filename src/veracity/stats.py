"""Small statistics helpers (numpy only), each tested on hand-computed numbers."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from veracity.errors import DataError, InvalidValueError


def finite(values: Sequence[float | None]) -> np.ndarray:
    """The values that are real numbers (None and NaN mean "unscored")."""
    arr = np.array([v for v in values if v is not None], dtype=np.float64)
    return arr[np.isfinite(arr)]


def mean_stderr(values: Sequence[float | None]) -> tuple[float, float]:
    """Mean and standard error of the mean (sample std / sqrt(n)); NaN when undefined."""
    arr = finite(values)
    if arr.size == 0:
        return math.nan, math.nan
    if arr.size == 1:
        return float(arr[0]), math.nan
    return float(arr.mean()), float(arr.std(ddof=1) / math.sqrt(arr.size))


_BOOTSTRAP_CELLS = 1 << 22
"""Resampled values drawn at once (32 MB of indices)."""


def bootstrap_ci(
    values: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean."""
    arr = finite(values)
    if arr.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    # resamples drawn a block of rows at a time: the same stream of draws and the same row
    # means as one (resamples, n) matrix, in memory that does not grow with n x resamples
    step = max(1, _BOOTSTRAP_CELLS // arr.size)
    for start in range(0, resamples, step):
        rows = min(step, resamples - start)
        means[start:start + rows] = arr[rng.integers(0, arr.size, size=(rows, arr.size))].mean(
            axis=1)
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def _betacf(a: float, b: float, x: float) -> float:
    # Lentz's continued fraction for the incomplete beta function (Numerical Recipes 6.4)
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_tailed_p(t: float, df: float) -> float:
    """Two-tailed p-value of Student's t with ``df`` degrees of freedom."""
    if not math.isfinite(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def pearson(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Pearson r and its two-tailed p-value (t = r sqrt(n-2) / sqrt(1-r^2), n-2 df)."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = xa.size
    if n < 3 or xa.std() == 0 or ya.std() == 0:
        return math.nan, math.nan
    r = float(np.corrcoef(xa, ya)[0, 1])
    r = max(-1.0, min(1.0, r))
    if abs(r) == 1.0:
        return r, 0.0
    t = r * math.sqrt(n - 2) / math.sqrt(1 - r * r)
    return r, t_two_tailed_p(t, n - 2)


def rankdata(values: Sequence[float]) -> np.ndarray:
    """Ranks starting at 1, ties given their average rank."""
    arr = np.asarray(values, dtype=np.float64)
    order = np.argsort(arr, kind="mergesort")
    ranks = np.empty(arr.size, dtype=np.float64)
    sorted_vals = arr[order]
    i = 0
    while i < arr.size:
        j = i
        while j + 1 < arr.size and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


EXACT_SPEARMAN_UP_TO = 8
"""Up to this many pairs the p-value is exact (all n! orders); the t-approximation is poor there."""


def spearman(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Spearman rho (Pearson on average ranks) and its two-tailed p-value: exact by
    permutation for small n, else the t-approximation."""
    rx, ry = rankdata(x), rankdata(y)
    rho, p = pearson(list(rx), list(ry))
    if math.isnan(rho) or rx.size > EXACT_SPEARMAN_UP_TO:
        return rho, p
    orders = np.array(list(itertools.permutations(ry)))
    centred, cx = orders - orders.mean(axis=1, keepdims=True), rx - rx.mean()
    every = (centred @ cx) / (np.sqrt((centred**2).sum(axis=1)) * np.sqrt((cx**2).sum()))
    return rho, float(np.mean(np.abs(every) >= abs(rho) - 1e-12))


def linear_fit(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope m and intercept b of y = m x + b."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xa.size < 2 or xa.std() == 0:
        return math.nan, math.nan
    m, b = np.polyfit(xa, ya, 1)
    return float(m), float(b)


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties 1/2."""
    s = np.asarray(scores, dtype=np.float64)
    lab = np.asarray(labels, dtype=bool)
    pos, neg = int(lab.sum()), int((~lab).sum())
    if pos == 0 or neg == 0:
        return math.nan
    ranks = rankdata(list(s))
    return float((ranks[lab].sum() - pos * (pos + 1) / 2) / (pos * neg))


@dataclass(frozen=True)
class Histogram:
    """Counts of values in the bins between consecutive ``edges``."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]

    @classmethod
    def of(cls, counts: npt.ArrayLike, edges: npt.ArrayLike) -> Histogram:
        """From numpy's ``histogram`` output."""
        return cls(tuple(float(e) for e in np.asarray(edges)),
                   tuple(int(c) for c in np.asarray(counts)))

    @classmethod
    def from_json(cls, data: Any) -> Histogram:
        """A histogram as results.json holds it."""
        if not isinstance(data, dict):
            raise DataError(f"histogram: expected a JSON object, got {type(data).__name__}")
        return cls(tuple(float(e) for e in data["edges"]), tuple(int(c) for c in data["counts"]))

    def to_json(self) -> dict[str, list[float]]:
        return {"edges": list(self.edges), "counts": list(self.counts)}


def histogram(values: Sequence[float | None], bins: int = 20, upper: float = 1.0) -> Histogram:
    """Counts over equal-width bins on [0, upper] (values above go to the last bin)."""
    arr = np.clip(finite(values), 0.0, upper)
    counts, edges = np.histogram(arr, bins=bins, range=(0.0, upper))
    return Histogram.of(counts, edges)


def fleiss_kappa(counts: Sequence[Sequence[float]]) -> float:
    """Fleiss' kappa from an items x categories table of how many raters chose each category.

    Every item needs the same number of raters, at least two. NaN when agreement by chance
    is already perfect (every rating in one category).
    """
    table = np.asarray(counts, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] == 0 or table.shape[1] == 0:
        raise InvalidValueError("fleiss_kappa needs a non-empty items x categories table")
    raters = table.sum(axis=1)
    r = float(raters[0])
    if r < 2 or not np.all(raters == r):
        raise InvalidValueError("fleiss_kappa: every item needs the same number (>= 2) of ratings")
    p_category = table.sum(axis=0) / (table.shape[0] * r)
    p_item = ((table**2).sum(axis=1) - r) / (r * (r - 1))
    chance = float((p_category**2).sum())
    if chance >= 1.0:
        return math.nan
    return float((p_item.mean() - chance) / (1.0 - chance))


def bootstrap_aurocs(
    score_sets: Sequence[Sequence[float] | np.ndarray], labels: Sequence[bool], resamples: int = 2000,
    seed: int = 0,
) -> np.ndarray:
    """AUROC of each score set on the same bootstrap resamples of the items: (resamples, k).

    Resampling items jointly keeps the score sets paired, so differences between them get a
    proper interval too. A resample without both classes gives NaN.
    """
    lab = np.asarray(labels, dtype=bool)
    n = lab.size
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(resamples, n))
    weights = np.bincount(
        (picks + np.arange(resamples)[:, None] * n).ravel(), minlength=resamples * n
    ).reshape(resamples, n).astype(np.float64)
    w_pos, w_neg = weights[:, lab], weights[:, ~lab]
    denominator = w_pos.sum(axis=1) * w_neg.sum(axis=1)
    out = np.full((resamples, len(score_sets)), np.nan)
    for k, scores in enumerate(score_sets):
        s = np.asarray(scores, dtype=np.float64)
        if s.size != n:
            raise InvalidValueError("every score set needs one score per label")
        # wins[p, q] = 1 if positive p outscores negative q, 1/2 on a tie
        wins = (s[lab][:, None] > s[~lab][None, :]) + 0.5 * (s[lab][:, None] == s[~lab][None, :])
        numerator = np.einsum("rp,pq,rq->r", w_pos, wins, w_neg)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, k] = np.where(denominator > 0, numerator / denominator, np.nan)
    return out


def percentile_ci(values: Sequence[float] | np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates (NaN replicates are dropped)."""
    arr = finite(list(np.asarray(values, dtype=np.float64)))
    if arr.size == 0:
        return math.nan, math.nan
    tail = (1 - level) / 2
    return float(np.quantile(arr, tail)), float(np.quantile(arr, 1 - tail))


def binned_means(
    x: Sequence[float], y: Sequence[float], edges: Sequence[float]
) -> list[dict[str, float | int]]:
    """Mean and standard error of y within each [lo, hi) bin of x (the last bin is closed)."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    e = np.asarray(edges, dtype=np.float64)
    index = np.clip(np.searchsorted(e, xa, side="right") - 1, 0, e.size - 2)
    out: list[dict[str, float | int]] = []
    for b in range(e.size - 1):
        mean, se = mean_stderr(list(ya[index == b]))
        out.append({"lo": float(e[b]), "hi": float(e[b + 1]), "n": int((index == b).sum()),
                    "mean": mean, "stderr": se})
    return out
