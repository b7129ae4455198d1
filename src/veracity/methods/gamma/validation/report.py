"""Report sections for validation.json (γ vs labels, beside a baseline) and ratings.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from veracity.errors import DataError
from veracity.report.html import figure, fmt, pyplot, table
from veracity.store import RunDir


def _read(run: RunDir, name: str) -> dict[str, Any]:
    target = run.path / name
    try:
        value: dict[str, Any] = json.loads(target.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{target} is not valid JSON: {exc}") from None
    return value


def _label(v: dict[str, Any]) -> str:
    kind, sep, rest = str(v.get("dataset")).partition(":")
    dataset = f"{kind}:{Path(rest).name}" if sep else kind
    return f"{v.get('model')} × {dataset}"


def _ci(block: dict[str, Any] | None) -> str:
    if block is None:
        return "—"
    low, high = block["ci"]
    return f"{fmt(block['auroc'])} [{fmt(low)}, {fmt(high)}]"


def _auroc_table(found: list[dict[str, Any]]) -> str:
    rows = []
    for v in found:
        acc = v["accuracy"]
        base = v.get("baseline_settings") or {}
        rows.append([
            _label(v), ", ".join(f"{n} {rule}" for rule, n in v["labels"]["rules"].items()),
            v["gamma"]["n"], v["gamma"]["n_incorrect"], acc["all"]["accuracy"],
            acc["below_threshold"]["accuracy"], acc["below_threshold"]["n"],
            _ci(v["gamma"]),
            _ci(v["baseline"]) + (f" (M={base['m']}, T={base['temperature']})" if base else ""),
            _ci(v["difference"]), _ci(v.get("gamma_minus_null")),
        ])
    thresholds = sorted({v["accuracy"]["threshold"] for v in found})
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


def _accuracy_plot(found: list[dict[str, Any]]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for v in found:
        bins = [b for b in v["bins"] if b["n"]]
        x = [(b["lo"] + b["hi"]) / 2 for b in bins]
        y = [b["accuracy"] for b in bins]
        err = [b["stderr"] if b["stderr"] is not None else 0.0 for b in bins]
        line = ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=_label(v))
        for xi, yi, b in zip(x, y, bins, strict=True):
            ax.annotate(str(b["n"]), (xi, yi), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=line[0].get_color())
        ax.axhline(v["accuracy"]["all"]["accuracy"], linestyle=":", linewidth=1,
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


def _roc_plot(found: list[dict[str, Any]]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    for v in found:
        items = [i for i in v["items"] if i["correct"] is not None and i["gamma"] is not None
                 and (v["baseline"] is None or i["baseline"] is not None)]
        wrong = np.array([not i["correct"] for i in items], dtype=bool)
        curves = [("γ", np.array([i["gamma"] for i in items], dtype=np.float64))]
        if v["baseline"] is not None:
            curves.append(("1 − self-consistency",
                           1.0 - np.array([i["baseline"] for i in items], dtype=np.float64)))
        for name, scores in curves:
            if scores.size:
                fp, tp = _roc(scores, wrong)
                label = name if len(found) == 1 else f"{name}: {_label(v)}"
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
    found = [_read(run, "validation.json") for run in runs]
    return "".join([
        _auroc_table(found),
        "<h3>Accuracy against γ</h3>", _accuracy_plot(found),
        "<h3>ROC curves</h3>", _roc_plot(found),
    ])


def _ratings_table(found: list[dict[str, Any]]) -> str:
    rows = []
    for r in found:
        rows.append([
            _label(r), len(r["raters"]), r["n_rated"], r["fleiss_kappa"], r["kappa_items"],
            r["mean_rating"], r["mean_rating_stderr"], r["mean_rating_below_threshold"],
            r["mean_rating_below_threshold_stderr"],
            None if r["share_below_threshold"] is None else 100 * r["share_below_threshold"],
            r["fit"]["slope"], r["fit"]["intercept"], r["pearson"]["r"],
        ])
    return table(
        ["run", "raters", "rated answers", "Fleiss' κ", "κ answers", "R", "± s.e.",
         "R (γ < thr.)", "± s.e.", "% γ < thr.", "slope m", "intercept b", "Pearson r"],
        rows,
    ) + ("<p class='muted'>R: mean over answers of the raters' mean rating (0–5). κ over the "
         "answers every rater rated, ratings as categories. m, b: least-squares line through the "
         "mean rating per γ bin.</p>")


def _figure_one(found: list[dict[str, Any]]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for r in found:
        bins = [b for b in r["bins"] if b["n"]]
        x = np.array([b["centre"] for b in bins])
        y = [b["mean"] for b in bins]
        err = [b["stderr"] if b["stderr"] is not None else 0.0 for b in bins]
        line = ax.errorbar(x, y, yerr=err, marker="o", linestyle="none", capsize=3,
                           label=_label(r))
        m, b = r["fit"]["slope"], r["fit"]["intercept"]
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
    found = [_read(run, "ratings.json") for run in runs]
    return "".join([_ratings_table(found), "<h3>Mean rating per γ bin (Figure 1)</h3>",
                    _figure_one(found)])
