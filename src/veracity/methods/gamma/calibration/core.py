"""Calibration of gamma: a monotone map from gamma to P(correct), fitted on labelled runs.

Per (model, embedder, form, ball, N) an isotonic regression of "answer correct" on gamma
(scikit-learn, non-increasing, clipped outside the data), bootstrap bands around it, and the
verdict thresholds: ``low`` is the largest gamma cut whose "trustworthy" set (gamma < low)
reaches the target precision, ``high`` the largest cut whose "untrustworthy" set
(gamma >= high) still flags the target recall of the incorrect answers. Its reliability is
measured on a held-out half (expected calibration error). Applying a fitted curve needs only
numpy: it is the same piecewise-linear interpolation scikit-learn's ``predict`` does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from veracity.errors import ConfigError, DataError
from veracity.jsontypes import JsonObject

FORMAT = "veracity-calibration"
VERSION = 1
KEY_FIELDS = ("model", "embedder", "form", "ball", "n")
"""What a calibration is made for; gamma's scale depends on every one of them."""


def fit_isotonic(gammas: Sequence[float], correct: Sequence[bool]) -> tuple[list[float], list[float]]:
    """Breakpoints (x, y) of the non-increasing isotonic fit of correct (0/1) on gamma."""
    try:
        from sklearn.isotonic import IsotonicRegression
    except ImportError:
        raise ConfigError("calibration needs scikit-learn: pip install 'veracity[calibrate]'") from None
    x = np.asarray(gammas, dtype=np.float64)
    y = np.asarray(correct, dtype=np.float64)
    if x.size == 0:
        raise DataError("no labelled answers with a gamma to calibrate on")
    model = IsotonicRegression(increasing=False, y_min=0.0, y_max=1.0, out_of_bounds="clip")
    model.fit(x, y)
    return [float(v) for v in model.X_thresholds_], [float(v) for v in model.y_thresholds_]


def interpolate(x: Sequence[float], y: Sequence[float], values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The fitted curve at ``values`` (constant beyond the first and last breakpoints)."""
    found: npt.NDArray[np.float64] = np.interp(
        np.asarray(values, dtype=np.float64), np.asarray(x, dtype=np.float64),
        np.asarray(y, dtype=np.float64))
    return found


def bootstrap_band(
    gammas: Sequence[float], correct: Sequence[bool], grid: Sequence[float], resamples: int = 200,
    level: float = 0.95, seed: int = 0,
) -> tuple[list[float], list[float]]:
    """Percentile band of the isotonic curve on ``grid``, refitting on resampled answers."""
    x = np.asarray(gammas, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    rng = np.random.default_rng(seed)
    curves = np.empty((resamples, len(grid)))
    for r in range(resamples):
        pick = rng.integers(0, x.size, x.size)
        bx, by = fit_isotonic(list(x[pick]), list(y[pick]))
        curves[r] = interpolate(bx, by, grid)
    tail = (1.0 - level) / 2.0
    return ([float(v) for v in np.quantile(curves, tail, axis=0)],
            [float(v) for v in np.quantile(curves, 1.0 - tail, axis=0)])


def choose_thresholds(
    gammas: Sequence[float], correct: Sequence[bool], target_precision: float, target_recall: float
) -> JsonObject:
    """Verdict thresholds from labelled answers, with what they achieve on them.

    ``low``: the largest cut t with precision(correct | gamma < t) >= target_precision (0 when
    none reaches it: nothing is called trustworthy). ``high``: the largest cut t with
    recall(gamma >= t | incorrect) >= target_recall. When the two cross, ``low`` is lowered to
    ``high``: flagging the incorrect answers comes first.
    """
    g = np.asarray(gammas, dtype=np.float64)
    ok = np.asarray(correct, dtype=bool)
    cuts = np.unique(np.r_[g, np.nextafter(g.max(), math.inf)]) if g.size else np.array([0.0])
    low = 0.0
    for cut in cuts:
        chosen = g < cut
        if chosen.any() and ok[chosen].mean() >= target_precision:
            low = float(cut)
    wrong = int((~ok).sum())
    high = float(cuts[0] if wrong else cuts[-1])  # nothing incorrect: nothing to flag
    for cut in cuts:
        if wrong and ((g >= cut) & ~ok).sum() / wrong >= target_recall:
            high = float(cut)
    low = min(low, high)
    trusted, flagged = g < low, g >= high
    return {
        "low": low,
        "high": high,
        "target_precision": target_precision,
        "target_recall": target_recall,
        "precision_reached": bool(trusted.any() and ok[trusted].mean() >= target_precision),
        "precision": float(ok[trusted].mean()) if trusted.any() else math.nan,
        "share_trustworthy": float(trusted.mean()) if g.size else math.nan,
        "recall": float((flagged & ~ok).sum() / wrong) if wrong else math.nan,
        "share_untrustworthy": float(flagged.mean()) if g.size else math.nan,
    }


def reliability(predicted: Sequence[float], correct: Sequence[bool], bins: int = 10) -> JsonObject:
    """Reliability diagram bins over [0, 1] of predicted P(correct), and the expected
    calibration error sum_b (n_b / n) |accuracy_b - mean prediction_b|."""
    p = np.asarray(predicted, dtype=np.float64)
    ok = np.asarray(correct, dtype=np.float64)
    index = np.clip((p * bins).astype(int), 0, bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        inside = index == b
        count = int(inside.sum())
        mean_p = float(p[inside].mean()) if count else math.nan
        accuracy = float(ok[inside].mean()) if count else math.nan
        if count:
            ece += count / p.size * abs(accuracy - mean_p)
        rows.append({"lo": b / bins, "hi": (b + 1) / bins, "n": count, "predicted": mean_p,
                     "observed": accuracy})
    return {"bins": rows, "ece": ece if p.size else math.nan, "n": int(p.size)}


def holdout_reliability(
    gammas: Sequence[float], correct: Sequence[bool], fraction: float = 0.5, bins: int = 10,
    seed: int = 0,
) -> JsonObject:
    """Fit on a random part, measure reliability (ECE) on the held-out rest."""
    g = np.asarray(gammas, dtype=np.float64)
    ok = np.asarray(correct, dtype=bool)
    order = np.random.default_rng(seed).permutation(g.size)
    held = order[: int(round(fraction * g.size))]
    fit = order[int(round(fraction * g.size)):]
    if held.size == 0 or fit.size == 0:
        return {"fraction": fraction, "seed": seed, "n_fit": int(fit.size), "n_eval": int(held.size),
                "ece": math.nan, "bins": [], "n": 0}
    x, y = fit_isotonic(list(g[fit]), list(ok[fit]))
    found = reliability(list(interpolate(x, y, g[held])), list(ok[held]), bins)
    return {"fraction": fraction, "seed": seed, "n_fit": int(fit.size), "n_eval": int(held.size),
            **found}


@dataclass(frozen=True)
class Curve:
    """One fitted map from gamma to P(correct), for one (model, embedder, form, ball, N)."""

    key: dict[str, Any]
    x: list[float]
    y: list[float]
    band_grid: list[float]
    band_low: list[float]
    band_high: list[float]
    thresholds: dict[str, Any]
    holdout: dict[str, Any]
    n: int
    n_correct: int
    points: list[list[float]]
    """(gamma, correct) of every answer it was fitted on, for plots."""
    runs: list[str]

    def p_correct(self, gamma: float | None) -> float | None:
        if gamma is None or math.isnan(gamma):
            return None
        return float(interpolate(self.x, self.y, [gamma])[0])

    def band(self, gamma: float | None) -> tuple[float, float] | None:
        if gamma is None or math.isnan(gamma):
            return None
        low = interpolate(self.band_grid, self.band_low, [gamma])[0]
        high = interpolate(self.band_grid, self.band_high, [gamma])[0]
        return float(low), float(high)

    def verdict_thresholds(self) -> tuple[float, float]:
        return float(self.thresholds["low"]), float(self.thresholds["high"])

    def to_dict(self) -> JsonObject:
        return asdict(self)


def fit_curve(
    key: dict[str, Any], gammas: Sequence[float], correct: Sequence[bool], runs: Sequence[str],
    target_precision: float = 0.9, target_recall: float = 0.9, resamples: int = 200,
    holdout: float = 0.5, bins: int = 10, seed: int = 0,
) -> Curve:
    """Isotonic curve on all answers, its bootstrap band, thresholds and held-out reliability."""
    if len(gammas) != len(correct):
        raise DataError("calibration needs one label per gamma")
    x, y = fit_isotonic(gammas, correct)
    top = max(max(gammas), 1e-6)
    grid = [float(v) for v in np.linspace(0.0, top, 41)]
    low, high = bootstrap_band(gammas, correct, grid, resamples, seed=seed)
    return Curve(
        key=dict(key), x=x, y=y, band_grid=grid, band_low=low, band_high=high,
        thresholds=choose_thresholds(gammas, correct, target_precision, target_recall),
        holdout=holdout_reliability(gammas, correct, holdout, bins, seed),
        n=len(gammas), n_correct=int(sum(bool(c) for c in correct)),
        points=[[float(g), float(bool(c))] for g, c in zip(gammas, correct, strict=True)],
        runs=list(runs),
    )


def describe_key(key: dict[str, Any]) -> str:
    return ", ".join(f"{name}={key.get(name)}" for name in KEY_FIELDS)


@dataclass(frozen=True)
class Calibration:
    """A calibration file: one curve per (model, embedder, form, ball, N)."""

    curves: list[Curve]
    source: str = ""
    settings: dict[str, Any] | None = None

    def to_dict(self) -> JsonObject:
        return {"format": FORMAT, "version": VERSION, "settings": self.settings or {},
                "curves": [c.to_dict() for c in self.curves]}

    def select(self, key: dict[str, Any], force: bool = False) -> tuple[Curve, dict[str, Any]]:
        """The curve made for ``key``; another one only with ``force``.

        Returns the curve and what is recorded about the choice (``forced`` and the fields
        that differ). A mismatch without ``force`` is a ConfigError naming both sides.
        """
        wanted = {name: key.get(name) for name in KEY_FIELDS}
        for curve in self.curves:
            if all(curve.key.get(name) == wanted[name] for name in KEY_FIELDS):
                return curve, {"source": self.source, "key": curve.key, "forced": False}
        best = max(self.curves, key=lambda c: sum(c.key.get(f) == wanted[f] for f in KEY_FIELDS))
        differ = {f: {"calibration": best.key.get(f), "here": wanted[f]} for f in KEY_FIELDS
                  if best.key.get(f) != wanted[f]}
        if not force:
            made = "; ".join(describe_key(c.key) for c in self.curves)
            fields = ", ".join(f"{f} ({d['calibration']} vs {d['here']})" for f, d in differ.items())
            raise ConfigError(
                f"calibration {self.source or ''} was made for {made}, not for "
                f"{describe_key(wanted)}: {fields} differ. Fit one on labelled runs of this setup "
                "(veracity calibrate), or pass --force (force=True) to use it anyway; that is "
                "recorded with the results."
            )
        return best, {"source": self.source, "key": best.key, "forced": True, "differs": differ}


def _curve(raw: Any, where: str) -> Curve:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: a curve must be a JSON object")
    names = set(Curve.__dataclass_fields__)
    missing = sorted(names - set(raw))
    if missing:
        raise DataError(f"{where}: missing {', '.join(missing)}")
    curve = Curve(**{name: raw[name] for name in names})
    if not isinstance(curve.key, dict) or len(curve.x) != len(curve.y) or not curve.x:
        raise DataError(f"{where}: key must be an object and x, y equally long, non-empty lists")
    if len(curve.band_grid) != len(curve.band_low) or len(curve.band_grid) != len(curve.band_high):
        raise DataError(f"{where}: band_grid, band_low and band_high must be equally long")
    for name in ("low", "high"):
        if not isinstance(curve.thresholds.get(name), int | float):
            raise DataError(f"{where}: thresholds.{name} must be a number")
    return curve


def read_calibration(path: Path | str) -> Calibration:
    """A calibration file written by ``veracity calibrate``; clear errors when it is not one."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"calibration file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is not a JSON calibration file: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise DataError(f"{path} is not a veracity calibration file (no \"format\": \"{FORMAT}\")")
    if raw.get("version") != VERSION:
        raise DataError(f"{path}: calibration version {raw.get('version')} is not {VERSION}")
    curves = raw.get("curves")
    if not isinstance(curves, list) or not curves:
        raise DataError(f"{path}: no curves")
    return Calibration([_curve(c, f"{path}, curve {k + 1}") for k, c in enumerate(curves)],
                       source=str(path), settings=raw.get("settings") or {})


def as_calibration(value: Calibration | Path | str) -> Calibration:
    return value if isinstance(value, Calibration) else read_calibration(value)
