"""Report sections for validation.json (γ vs labels, beside a baseline) and ratings.json."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from veracity.errors import DataError
from veracity.report.html import esc, figure, fmt, pyplot, table
from veracity.store import RATINGS_FILE, VALIDATION_FILE, RunDir


def _read(run: RunDir, name: str) -> dict[str, Any]:
    target = run.path / name
    try:
        value = json.loads(target.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{target} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise DataError(f"{target}: expected a JSON object")
    return value


def _label(v: Mapping[str, Any]) -> str:
    kind, sep, rest = str(v.get("dataset")).partition(":")
    dataset = f"{kind}:{Path(rest).name}" if sep else kind
    return f"{v.get('model')} × {dataset}"


@dataclass(frozen=True)
class Block:
    """An AUROC (or a difference of two) with its interval, as validation.json holds it."""

    auroc: float | None
    ci: tuple[float | None, float | None]
    n: int | None = None
    n_incorrect: int | None = None

    @classmethod
    def read(cls, found: Any) -> Block | None:
        if found is None:
            return None
        low, high = found["ci"]
        return cls(found["auroc"], (low, high), found.get("n"), found.get("n_incorrect"))


@dataclass(frozen=True)
class Bin:
    """A γ bin's accuracy (null when the bin is empty)."""

    lo: float
    hi: float
    n: int
    accuracy: float | None
    stderr: float | None


@dataclass(frozen=True)
class ScoredItem:
    correct: bool | None
    gamma: float | None
    baseline: float | None


@dataclass(frozen=True)
class Validation:
    """What the report shows of one run's validation.json (numbers as stored: null for NaN)."""

    label: str
    rules: dict[str, int]
    gamma: Block
    baseline: Block | None
    difference: Block | None
    gamma_minus_null: Block | None
    baseline_m: int | None
    baseline_temperature: float | None
    threshold: float
    accuracy_all: float | None
    accuracy_below: float | None
    n_below: int
    bins: list[Bin]
    items: list[ScoredItem]

    @classmethod
    def read(cls, run: RunDir) -> Validation:
        v = _read(run, VALIDATION_FILE)
        acc, base = v["accuracy"], v.get("baseline_settings") or {}
        gamma = Block.read(v["gamma"])
        assert gamma is not None
        return cls(
            label=_label(v), rules=dict(v["labels"]["rules"]), gamma=gamma,
            baseline=Block.read(v["baseline"]), difference=Block.read(v["difference"]),
            gamma_minus_null=Block.read(v.get("gamma_minus_null")),
            baseline_m=base.get("m"), baseline_temperature=base.get("temperature"),
            threshold=acc["threshold"], accuracy_all=acc["all"]["accuracy"],
            accuracy_below=acc["below_threshold"]["accuracy"], n_below=acc["below_threshold"]["n"],
            bins=[Bin(b["lo"], b["hi"], b["n"], b["accuracy"], b["stderr"])
                  for b in v["bins"]],
            items=[ScoredItem(i["correct"], i["gamma"], i["baseline"]) for i in v["items"]],
        )


def _ci(block: Block | None) -> str:
    if block is None:
        return "—"
    low, high = block.ci
    return f"{fmt(block.auroc)} [{fmt(low)}, {fmt(high)}]"


def _auroc_table(found: list[Validation]) -> str:
    rows = []
    for v in found:
        rows.append([
            v.label, ", ".join(f"{n} {rule}" for rule, n in v.rules.items()),
            v.gamma.n, v.gamma.n_incorrect, v.accuracy_all, v.accuracy_below, v.n_below,
            _ci(v.gamma),
            _ci(v.baseline) + (f" (M={v.baseline_m}, T={v.baseline_temperature})"
                               if v.baseline_m is not None else ""),
            _ci(v.difference), _ci(v.gamma_minus_null),
        ])
    thresholds = sorted({v.threshold for v in found})
    return table(
        ["run", "labels", "answers", "incorrect", "accuracy (all)",
         f"accuracy (γ < {', '.join(map(str, thresholds))})", "n (γ < thr.)",
         "AUROC γ [95% CI]", "AUROC self-consistency [95% CI]", "γ − baseline [95% CI]",
         "AUROC γ − γ_null [95% CI]"],
        rows,
    ) + (
        "<p class='muted'>AUROC for flagging incorrect answers: γ as is, the baseline as "
        "1 − its normalized cosine (UQLM's cosine scorer on M sampled answers). 0.5 = chance. "
        "Percentile bootstrap over questions, paired between γ and the baseline; computed on "
        "the answers both could score. γ − γ_null: runs with the numeric control.</p>"
    )


def headline(runs: list[RunDir]) -> str:
    """For the runs validated against labels, on the report's first screen: how well γ
    separates right from wrong answers, and against which baseline."""
    lines = []
    for run in runs:
        if not (run.path / VALIDATION_FILE).is_file():
            continue
        v = Validation.read(run)
        rules = ", ".join(f"{n} {rule}" for rule, n in v.rules.items())
        against = ("; no baseline was scored" if v.baseline is None else
                   f"; self-consistency baseline (M={v.baseline_m}, T={v.baseline_temperature})"
                   f" {esc(_ci(v.baseline))}; γ − baseline {esc(_ci(v.difference))}")
        lines.append(f"<li><b>{esc(v.label)}</b>: AUROC of γ for flagging wrong answers "
                     f"{esc(_ci(v.gamma))} on {v.gamma.n} answers "
                     f"({v.gamma.n_incorrect} wrong; labels: {esc(rules)}){against}. "
                     "0.5 = chance; details under “Validation against labels”.</li>")
    return f"<ul class='verdict'>{''.join(lines)}</ul>" if lines else ""


def _accuracy_plot(found: list[Validation]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for v in found:
        bins = [b for b in v.bins if b.n]
        x = [(b.lo + b.hi) / 2 for b in bins]
        y = [b.accuracy for b in bins]
        err = [b.stderr if b.stderr is not None else 0.0 for b in bins]
        line = ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=v.label)
        for xi, yi, b in zip(x, y, bins, strict=True):
            ax.annotate(str(b.n), (xi, yi), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=line[0].get_color())
        ax.axhline(v.accuracy_all, linestyle=":", linewidth=1,
                   color=line[0].get_color())
    ax.set_xlabel("γ (bin centre)")
    ax.set_ylabel("share of answers judged correct")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Accuracy vs γ (numbers: answers per bin; dotted: overall)", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return figure(fig, "binned accuracy against gamma")


def _roc(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-scores, kind="mergesort")
    s, p = scores[order], positive[order]
    cut = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]  # last index of each distinct score
    tp = np.r_[0, np.cumsum(p)[cut]] / max(p.sum(), 1)
    fp = np.r_[0, np.cumsum(~p)[cut]] / max((~p).sum(), 1)
    return fp, tp


def _roc_plot(found: list[Validation]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    for v in found:
        items = [i for i in v.items if i.correct is not None and i.gamma is not None
                 and (v.baseline is None or i.baseline is not None)]
        wrong = np.array([not i.correct for i in items], dtype=bool)
        curves = [("γ", np.array([i.gamma for i in items], dtype=np.float64))]
        if v.baseline is not None:
            curves.append(("1 − self-consistency",
                           1.0 - np.array([i.baseline for i in items], dtype=np.float64)))
        for name, scores in curves:
            if scores.size:
                fp, tp = _roc(scores, wrong)
                label = name if len(found) == 1 else f"{name}: {v.label}"
                ax.plot(fp, tp, label=label, linewidth=1.2)
    ax.plot([0, 1], [0, 1], color="#999", linestyle="--", linewidth=0.8)
    ax.set_title("ROC: flagging incorrect answers", fontsize=9)
    ax.set_xlabel("false positive rate (correct answers flagged)", fontsize=8)
    ax.set_ylabel("true positive rate (incorrect answers flagged)", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return figure(fig, "ROC curves")


def section(runs: list[RunDir]) -> str:
    """HTML for the runs that hold a validation.json."""
    found = [Validation.read(run) for run in runs]
    return "".join([
        _auroc_table(found),
        "<h3>Accuracy against γ</h3>", _accuracy_plot(found),
        "<h3>ROC curves</h3>", _roc_plot(found),
    ])


@dataclass(frozen=True)
class RatingBin:
    centre: float
    n: int
    mean: float | None
    stderr: float | None


@dataclass(frozen=True)
class Ratings:
    """What the report shows of one run's ratings.json (numbers as stored: null for NaN)."""

    label: str
    n_raters: int
    n_rated: int
    fleiss_kappa: float | None
    kappa_items: int | None
    mean_rating: float | None
    mean_rating_stderr: float | None
    mean_rating_below_threshold: float | None
    mean_rating_below_threshold_stderr: float | None
    share_below_threshold: float | None
    slope: float | None
    intercept: float | None
    pearson_r: float | None
    bins: list[RatingBin]

    @classmethod
    def read(cls, run: RunDir) -> Ratings:
        r = _read(run, RATINGS_FILE)
        return cls(
            _label(r), len(r["raters"]), r["n_rated"], r["fleiss_kappa"], r["kappa_items"],
            r["mean_rating"], r["mean_rating_stderr"], r["mean_rating_below_threshold"],
            r["mean_rating_below_threshold_stderr"], r["share_below_threshold"],
            r["fit"]["slope"], r["fit"]["intercept"], r["pearson"]["r"],
            [RatingBin(b["centre"], b["n"], b["mean"], b["stderr"]) for b in r["bins"]])


def _ratings_table(found: list[Ratings]) -> str:
    rows = []
    for r in found:
        rows.append([
            r.label, r.n_raters, r.n_rated, r.fleiss_kappa, r.kappa_items,
            r.mean_rating, r.mean_rating_stderr, r.mean_rating_below_threshold,
            r.mean_rating_below_threshold_stderr,
            None if r.share_below_threshold is None else 100 * r.share_below_threshold,
            r.slope, r.intercept, r.pearson_r,
        ])
    return table(
        ["run", "raters", "rated answers", "Fleiss' κ", "κ answers", "R", "± s.e.",
         "R (γ < thr.)", "± s.e.", "% γ < thr.", "slope m", "intercept b", "Pearson r"],
        rows,
    ) + ("<p class='muted'>R: mean over answers of the raters' mean rating (0–5). κ over the "
         "answers every rater rated, ratings as categories. m, b: least-squares line through the "
         "mean rating per γ bin.</p>")


def _figure_one(found: list[Ratings]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for r in found:
        bins = [b for b in r.bins if b.n]
        x = np.array([b.centre for b in bins])
        y = [b.mean for b in bins]
        err = [b.stderr if b.stderr is not None else 0.0 for b in bins]
        line = ax.errorbar(x, y, yerr=err, marker="o", linestyle="none", capsize=3,
                           label=r.label)
        m, b = r.slope, r.intercept
        if m is not None and b is not None and x.size:
            ax.plot(x, m * x + b, color=line[0].get_color(), linewidth=1,
                    label=f"fit: {m:.2f} γ + {b:.2f}")
    ax.set_xlabel("γ (bin centre)")
    ax.set_title("Figure 1: mean human rating per γ bin, with the fitted line", fontsize=9)
    ax.set_ylabel("mean human rating (0–5)")
    ax.set_ylim(-0.2, 5.2)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return figure(fig, "mean rating per gamma bin")


def ratings_section(runs: list[RunDir]) -> str:
    """HTML for the runs that hold a ratings.json: the summary and the paper's Figure 1."""
    found = [Ratings.read(run) for run in runs]
    return "".join([_ratings_table(found), "<h3>Mean rating per γ bin (Figure 1)</h3>",
                    _figure_one(found)])
