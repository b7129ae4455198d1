"""How well a trust signal separates right from wrong answers: the field's benchmark metrics.

Notation (as in the design notes, §3.4): n items, a risk score ``u_i`` per item (larger = less
trustworthy; a signal where larger means *more* trustworthy is negated first) and a label
``y_i`` = 1 when the answer is correct.

- AUROC for flagging wrong answers: P(u of a wrong answer > u of a right one), ties ½
  (Hanley & McNeil 1982).
- AUPRC: average precision with the wrong answers as the positive class (scikit-learn's
  ``average_precision_score``; Manning, Raghavan & Schütze 2008, §8.4).
- Risk–coverage (Geifman & El-Yaniv 2017; Geifman et al., ICLR 2019): keep the k items of
  lowest u; risk(k) = errors among them / k. AURC = mean of risk(k) over k = 1..n; E-AURC =
  AURC − the AURC of the oracle order (every correct answer kept first).
- PRR, the prediction–rejection ratio of LM-Polygraph (Malinin et al. 2017; Fadeeva et al.
  2023): Q(k) = mean y of the k kept items; A = mean of Q(k) over k = 1..n (the area under the
  rejection curve); PRR = (A_u − A_random) / (A_oracle − A_random) with A_random = mean y.
- ECE (Guo et al. 2017; Naeini et al. 2015) over 10 equal-width bins of the calibrated
  probability; Brier score (Brier 1950) = mean (p − y)².

Tied scores: the items of a tie group have no order of their own, so the risk–coverage curves
use the expected count of errors among the kept members of the group (each member kept with
equal chance), which makes AURC and PRR independent of the input order.

Calibration is cross-fitted: the items are split into k folds and each fold's probabilities
come from a model fitted on the other folds only (isotonic regression or Platt's logistic
map, scikit-learn). Intervals are percentile bootstraps over items; a method's difference to
another is bootstrapped on the same resamples (paired).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from veracity.errors import ConfigError, InvalidValueError
from veracity.jsontypes import JsonObject
from veracity.stats import auroc as _auroc_flagging

Array = npt.NDArray[np.float64]
Calibrator = Literal["isotonic", "platt"]
CALIBRATORS: tuple[Calibrator, ...] = ("isotonic", "platt")
METRICS = ("auroc", "prr", "auprc", "aurc", "e_aurc", "ece", "brier", "ece_platt", "brier_platt")
"""The keys of a metric table, in the order a table shows them: ``ece`` and ``brier`` after
isotonic calibration, ``ece_platt`` and ``brier_platt`` after Platt scaling."""
HIGHER_IS_BETTER = {"auroc": True, "prr": True, "auprc": True, "aurc": False, "e_aurc": False,
                    "ece": False, "brier": False, "ece_platt": False, "brier_platt": False}
_SUFFIX: dict[str, str] = {"isotonic": "", "platt": "_platt"}
ECE_BINS = 10


def _arrays(u: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array
            ) -> tuple[Array, Array]:
    risk = np.asarray(u, dtype=np.float64)
    labels = np.asarray(y, dtype=np.float64)
    if risk.shape != labels.shape or risk.ndim != 1:
        raise InvalidValueError("one score per label is needed")
    if not np.all(np.isfinite(risk)):
        raise InvalidValueError("scores must be finite numbers")
    if not np.all((labels == 0) | (labels == 1)):
        raise InvalidValueError("labels must be 0 (wrong) or 1 (correct)")
    return risk, labels


def auroc(u: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array) -> float:
    """AUROC of ``u`` for flagging wrong answers (y = 0), ties counted ½; NaN with one class."""
    risk, labels = _arrays(u, y)
    return _auroc_flagging(list(risk), list(labels == 0))


def auprc(u: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array) -> float:
    """Average precision of ``u`` with the wrong answers as the positive class: Σ over the
    distinct thresholds of (R_t − R_t−1)·P_t, tied scores one threshold (scikit-learn's
    ``average_precision_score``, computed here without its input checks, which dominate the
    time of a bootstrap); NaN when every answer is right (no positive to find)."""
    risk, labels = _arrays(u, y)
    if labels.size == 0 or labels.min() == 1:
        return math.nan
    order = np.argsort(-risk, kind="mergesort")
    ranked, wrong = risk[order], 1.0 - labels[order]
    last = np.r_[ranked[1:] != ranked[:-1], True]  # the end of each tie group
    found = np.cumsum(wrong)[last]
    flagged = np.arange(1, risk.size + 1, dtype=np.float64)[last]
    recall = found / found[-1]
    steps = np.diff(np.r_[0.0, recall])
    return float(np.sum(steps * found / flagged))


def kept_errors(u: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array) -> Array:
    """Expected errors among the k items of lowest u, for k = 1..n (ties: each member of a tie
    group kept with equal chance, so the count grows linearly through the group)."""
    risk, labels = _arrays(u, y)
    order = np.argsort(risk, kind="mergesort")
    sorted_risk, wrong = risk[order], 1.0 - labels[order]
    out = np.empty(risk.size)
    start, before = 0, 0.0
    while start < risk.size:
        stop = start
        while stop + 1 < risk.size and sorted_risk[stop + 1] == sorted_risk[start]:
            stop += 1
        size = stop - start + 1
        rate = wrong[start:stop + 1].sum() / size
        out[start:stop + 1] = before + rate * np.arange(1, size + 1)
        before += rate * size
        start = stop + 1
    return out


def risk_coverage(u: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array
                  ) -> tuple[Array, Array]:
    """Coverage k/n and risk(k) = errors among the k kept / k, for k = 1..n (sorted by u)."""
    errors = kept_errors(u, y)
    k = np.arange(1, errors.size + 1, dtype=np.float64)
    return k / max(errors.size, 1), errors / k


def aurc(u: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array) -> float:
    """Area under the risk–coverage curve: mean of risk(k) over k = 1..n (Geifman et al. 2019)."""
    _, risk = risk_coverage(u, y)
    return float(risk.mean()) if risk.size else math.nan


def oracle_aurc(y: Sequence[bool] | Sequence[int] | Array) -> float:
    """AURC of the order that keeps every correct answer first."""
    labels = np.asarray(y, dtype=np.float64)
    n, right = labels.size, labels.sum()
    k = np.arange(1, n + 1, dtype=np.float64)
    return float((np.maximum(0.0, k - right) / k).mean()) if n else math.nan


def e_aurc(u: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array) -> float:
    """Excess AURC: AURC − AURC of the oracle order (Geifman et al., ICLR 2019)."""
    return aurc(u, y) - oracle_aurc(y)


def prr(u: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array) -> float:
    """LM-Polygraph's prediction–rejection ratio: (A_u − A_random) / (A_oracle − A_random), A
    the mean over k of the accuracy of the k lowest-u items; NaN when all labels agree."""
    risk, labels = _arrays(u, y)
    if labels.size == 0 or labels.min() == labels.max():
        return math.nan
    area = 1.0 - aurc(risk, labels)
    oracle = 1.0 - oracle_aurc(labels)
    chance = float(labels.mean())
    return (area - chance) / (oracle - chance)


def ece(p: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array,
        bins: int = ECE_BINS) -> float:
    """Expected calibration error of P(correct) ``p``: Σ_b (n_b / n) |acc_b − conf_b| over
    ``bins`` equal-width bins of [0, 1] (the last bin closed)."""
    prob, labels = _arrays(p, y)
    if prob.size == 0:
        return math.nan
    index = np.clip((prob * bins).astype(int), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        inside = index == b
        if inside.any():
            total += inside.sum() / prob.size * abs(labels[inside].mean() - prob[inside].mean())
    return float(total)


def brier(p: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array) -> float:
    """Brier score of P(correct) ``p``: mean (p − y)²."""
    prob, labels = _arrays(p, y)
    return float(np.mean((prob - labels) ** 2)) if prob.size else math.nan


def reliability(p: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array,
                bins: int = ECE_BINS) -> list[dict[str, float | int]]:
    """Per equal-width bin: its bounds, item count, mean confidence and accuracy (for a
    reliability diagram)."""
    prob, labels = _arrays(p, y)
    index = np.clip((prob * bins).astype(int), 0, bins - 1)
    out: list[dict[str, float | int]] = []
    for b in range(bins):
        inside = index == b
        n = int(inside.sum())
        out.append({"lo": b / bins, "hi": (b + 1) / bins, "n": n,
                    "confidence": float(prob[inside].mean()) if n else math.nan,
                    "accuracy": float(labels[inside].mean()) if n else math.nan})
    return out


# ---- cross-fitted calibration ------------------------------------------------------------

Predictor = Callable[[Array], Array]
Fitter = Callable[[Array, Array], Predictor]
"""Fits a map from features (n, d) and labels (n,) to a predictor of P(correct) (m, d) -> (m,)."""


def fold_ids(y: Sequence[bool] | Sequence[int] | Array, folds: int = 5, seed: int = 0
             ) -> npt.NDArray[np.int64]:
    """The fold of each item: stratified by label when each class fills every fold, else plain
    shuffled folds (scikit-learn's StratifiedKFold / KFold)."""
    from sklearn.model_selection import KFold, StratifiedKFold

    labels = np.asarray(y, dtype=np.int64)
    n = labels.size
    if folds < 2:
        raise ConfigError("cross-fitting needs at least 2 folds")
    if n < folds:
        raise InvalidValueError(f"cross-fitting {folds} folds needs at least {folds} items, got {n}")
    counts = np.bincount(labels, minlength=2)
    splitter = (StratifiedKFold(folds, shuffle=True, random_state=seed)
                if counts.min() >= folds else KFold(folds, shuffle=True, random_state=seed))
    out = np.empty(n, dtype=np.int64)
    for fold, (_, test) in enumerate(splitter.split(np.zeros(n), labels)):
        out[test] = fold
    return out


def crossfit(features: Array, y: Sequence[bool] | Sequence[int] | Array, fit: Fitter,
             folds: int = 5, seed: int = 0) -> Array:
    """P(correct) of every item from a model fitted on the other folds only (never on the item
    itself). A training part with one class predicts that class's rate (0 or 1)."""
    x = np.asarray(features, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    labels = np.asarray(y, dtype=np.float64)
    ids = fold_ids(labels, folds, seed)
    out = np.empty(labels.size)
    for fold in range(folds):
        test, train = ids == fold, ids != fold
        if labels[train].min() == labels[train].max():
            out[test] = labels[train][0]
            continue
        out[test] = fit(x[train], labels[train])(x[test])
    return out


def isotonic_fitter(x: Array, y: Array) -> Predictor:
    """Isotonic regression of correctness on the risk score (non-increasing), clipped to the
    fitted range outside it (Zadrozny & Elkan 2002)."""
    from sklearn.isotonic import IsotonicRegression

    model = IsotonicRegression(increasing=False, y_min=0.0, y_max=1.0, out_of_bounds="clip")
    model.fit(x[:, 0], y)
    return lambda test: np.asarray(model.predict(test[:, 0]), dtype=np.float64)


def logistic_fitter(x: Array, y: Array) -> Predictor:
    """Logistic regression of correctness on standardised features: Platt scaling on one score
    (Platt 1999), the fused model on several."""
    from sklearn.linear_model import LogisticRegression

    centre, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    model = LogisticRegression(C=1.0, max_iter=1000)
    model.fit((x - centre) / scale, y.astype(np.int64))
    return lambda test: np.asarray(model.predict_proba((test - centre) / scale)[:, 1],
                                   dtype=np.float64)


FITTERS: dict[Calibrator, Fitter] = {"isotonic": isotonic_fitter, "platt": logistic_fitter}


def calibrated(u: Sequence[float] | Array, y: Sequence[bool] | Sequence[int] | Array,
               how: Calibrator, folds: int = 5, seed: int = 0) -> Array:
    """Cross-fitted P(correct) of each item from its risk score."""
    risk, labels = _arrays(u, y)
    return crossfit(risk, labels, FITTERS[how], folds, seed)


# ---- one table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A metric's value with its 95 % bootstrap interval, and the paired interval of its
    difference to a reference signal (NaN when there is none)."""

    value: float
    low: float
    high: float
    diff: float = math.nan
    diff_low: float = math.nan
    diff_high: float = math.nan

    def to_json(self) -> JsonObject:
        def clean(v: float) -> float | None:
            return None if math.isnan(v) else v

        return {"value": clean(self.value), "ci": [clean(self.low), clean(self.high)],
                "diff": clean(self.diff), "diff_ci": [clean(self.diff_low), clean(self.diff_high)]}


def _harmonic(n: int) -> Array:
    """H[k] = 1 + 1/2 + ... + 1/k for k = 0..n (H[0] = 0)."""
    out: Array = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n + 1, dtype=np.float64))])
    return out


def resampled_metrics(u: Array, y: Array, p: Mapping[Calibrator, Array], w: Array
                      ) -> dict[str, Array]:
    """Every metric of one signal on R weighted resamples at once: ``w`` (R, n) holds how
    often each item was drawn (rows summing to n). The same definitions as the functions
    above, written as sums over tie groups so no resample is expanded or sorted; NaN where a
    resample lacks a class the metric needs."""
    n = y.size
    total = w.sum(axis=1)
    wrong_w = w * (1.0 - y)
    n_wrong = wrong_w.sum(axis=1)
    n_right = total - n_wrong
    values, group = np.unique(u, return_inverse=True)  # ascending distinct scores
    g = values.size
    one_hot = np.zeros((n, g))
    one_hot[np.arange(n), group] = 1.0
    weight = w @ one_hot  # (R, G): draws per tie group
    errors = wrong_w @ one_hot
    out: dict[str, Array] = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        # AUROC: wrong answers over right ones, ties 1/2, by groups
        right_before = np.cumsum(weight - errors, axis=1) - (weight - errors)
        pairs = (errors * (right_before + 0.5 * (weight - errors))).sum(axis=1)
        out["auroc"] = np.where((n_wrong > 0) & (n_right > 0), pairs / (n_wrong * n_right), np.nan)
        # risk-coverage: within a group the kept errors grow linearly (see kept_errors)
        harmonic = _harmonic(int(round(total.max())) if total.size else 0)
        upto = np.cumsum(weight, axis=1)
        start = upto - weight
        errors_before = np.cumsum(errors, axis=1) - errors
        rate = np.where(weight > 0, errors / np.where(weight > 0, weight, 1.0), 0.0)
        hi, lo = upto.round().astype(int), start.round().astype(int)
        area = ((errors_before - rate * start) * (harmonic[hi] - harmonic[lo])
                + rate * weight).sum(axis=1)
        aurc_v = area / total
        right = n_right.round().astype(int)
        oracle = ((total - n_right) - n_right * (harmonic[total.round().astype(int)]
                                                  - harmonic[right])) / total
        out["aurc"] = aurc_v
        out["e_aurc"] = aurc_v - oracle
        chance = n_right / total
        out["prr"] = np.where((n_wrong > 0) & (n_right > 0),
                              ((1 - aurc_v) - chance) / ((1 - oracle) - chance), np.nan)
        # AUPRC: thresholds from the highest score down, one per tie group
        found = np.cumsum(errors[:, ::-1], axis=1)
        flagged = np.cumsum(weight[:, ::-1], axis=1)
        steps = errors[:, ::-1] / n_wrong[:, None]
        precision = np.where(flagged > 0, found / np.where(flagged > 0, flagged, 1.0), 0.0)
        out["auprc"] = np.where(n_wrong > 0, (steps * precision).sum(axis=1), np.nan)
        for how, prob in p.items():
            bins = np.clip((prob * ECE_BINS).astype(int), 0, ECE_BINS - 1)
            binned = np.zeros((n, ECE_BINS))
            binned[np.arange(n), bins] = 1.0
            out["ece" + _SUFFIX[how]] = np.abs((w * (y - prob)) @ binned).sum(axis=1) / total
            out["brier" + _SUFFIX[how]] = (w @ ((prob - y) ** 2)) / total
    return out


def metric_values(u: Array, y: Array, p: Mapping[Calibrator, Array]) -> dict[str, float]:
    """Every metric of one signal on its items; ECE and Brier per calibrator (see
    :data:`METRICS`)."""
    out = {"auroc": auroc(u, y), "prr": prr(u, y), "auprc": auprc(u, y), "aurc": aurc(u, y),
           "e_aurc": e_aurc(u, y)}
    for how, prob in p.items():
        out["ece" + _SUFFIX[how]] = ece(prob, y)
        out["brier" + _SUFFIX[how]] = brier(prob, y)
    return out


def bootstrap_weights(n: int, resamples: int, seed: int = 0) -> Array:
    """(resamples, n): how often each item is drawn in each resample (the same for every
    signal given the same seed, which pairs their differences)."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(resamples, n))
    rows = np.repeat(np.arange(resamples), n)
    counts = np.zeros((resamples, n))
    np.add.at(counts, (rows, picks.ravel()), 1.0)
    return counts


@dataclass(frozen=True)
class Table:
    """Every signal's metrics on one label source, with bootstrap intervals."""

    n: int
    n_wrong: int
    reference: str | None
    """The signal differences are taken to (the best baseline), or None."""
    rows: dict[str, dict[str, Estimate]]
    calibrated: dict[str, dict[Calibrator, list[float]]]
    """Each signal's cross-fitted P(correct) per item, per calibrator."""


def metric_table(
    scores: Mapping[str, Sequence[float] | Array],
    y: Sequence[bool] | Sequence[int] | Array,
    baselines: Sequence[str] = (),
    resamples: int = 2000,
    folds: int = 5,
    seed: int = 0,
    level: float = 0.95,
) -> Table:
    """The metrics of each signal (risk scores, one per item, all on the same items) against
    labels ``y``, with percentile-bootstrap intervals; differences to the baseline of highest
    AUROC are bootstrapped on the same resamples of items (paired)."""
    labels = np.asarray(y, dtype=np.float64)
    risks = {name: _arrays(u, labels)[0] for name, u in scores.items()}
    probs: dict[str, dict[Calibrator, Array]] = {
        name: {how: calibrated(u, labels, how, folds, seed) for how in CALIBRATORS}
        for name, u in risks.items()}
    points = {name: metric_values(risks[name], labels, probs[name]) for name in risks}
    candidates = [b for b in baselines if b in points and not math.isnan(points[b]["auroc"])]
    reference = max(candidates, key=lambda b: points[b]["auroc"]) if candidates else None
    weights = bootstrap_weights(labels.size, resamples, seed)
    boot = {name: resampled_metrics(risks[name], labels, probs[name], weights)
            for name in risks}
    tail = (1 - level) / 2

    def interval(values: Array) -> tuple[float, float]:
        kept = values[np.isfinite(values)]
        if kept.size == 0:
            return math.nan, math.nan
        return float(np.quantile(kept, tail)), float(np.quantile(kept, 1 - tail))

    rows: dict[str, dict[str, Estimate]] = {}
    for name in risks:
        rows[name] = {}
        for key, value in points[name].items():
            series = boot[name][key]
            low, high = interval(series)
            diff = d_low = d_high = math.nan
            if reference is not None and name != reference:
                other = boot[reference][key]
                diff = value - points[reference][key]
                d_low, d_high = interval(series - other)
            rows[name][key] = Estimate(value, low, high, diff, d_low, d_high)
    return Table(int(labels.size), int((labels == 0).sum()), reference, rows,
                 {name: {how: [float(v) for v in p] for how, p in probs[name].items()}
                  for name, p in probs.items()})


def fused_scores(scores: Mapping[str, Sequence[float] | Array],
                 y: Sequence[bool] | Sequence[int] | Array, folds: int = 5, seed: int = 0
                 ) -> Array:
    """Risk score of the fused signal: 1 − P(correct) from a logistic regression on every
    signal's score, cross-fitted (each item scored by a model fitted on the other folds)."""
    labels = np.asarray(y, dtype=np.float64)
    x = np.column_stack([_arrays(u, labels)[0] for u in scores.values()])
    return 1.0 - crossfit(x, labels, logistic_fitter, folds, seed)
