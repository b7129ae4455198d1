"""Report parts for calibration (curve, band, reliability diagram) and the numeric control."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from veracity.methods.gamma.calibration.core import Calibration, describe_key
from veracity.methods.gamma.records import ControlSummary
from veracity.report.html import figure, page, plain_text_labels, pyplot, table


def calibration_table(curves: list[dict[str, Any]]) -> str:
    rows = []
    for c in curves:
        t, h = c["thresholds"], c["holdout"]
        rows.append([describe_key(c["key"]), c["n"], c["n_correct"] / c["n"] if c["n"] else None,
                     t["low"], t["precision"], t["target_precision"], t["high"], t["recall"],
                     t["target_recall"], h["ece"], h["n_eval"]])
    return table(
        ["made for", "answers", "accuracy", "trustworthy: γ <", "precision", "target",
         "untrustworthy: γ ≥", "recall", "target", "held-out ECE", "held-out answers"],
        rows, digits=4,
    ) + ("<p class='muted'>Isotonic regression of correctness on γ (non-increasing). Precision "
         "and recall are on the answers the curve was fitted on; the expected calibration error "
         "on answers held out of a separate fit.</p>")


def curve_plot(curves: list[dict[str, Any]]) -> str:
    """P(correct) against γ: fitted curve, bootstrap band, the answers, the thresholds."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    rng = np.random.default_rng(0)
    for c in curves:
        label = describe_key(c["key"]) if len(curves) > 1 else "isotonic fit"
        line = ax.plot(c["x"], c["y"], drawstyle="default", linewidth=1.6, label=label)[0]
        ax.fill_between(c["band_grid"], c["band_low"], c["band_high"], alpha=0.2,
                        color=line.get_color(), label="95% bootstrap band")
        points = np.asarray(c["points"], dtype=np.float64).reshape(-1, 2)
        jitter = rng.uniform(-0.03, 0.03, len(points))
        ax.scatter(points[:, 0], points[:, 1] + jitter, s=6, alpha=0.35, color=line.get_color())
        ax.axvline(c["thresholds"]["low"], color=line.get_color(), linestyle=":", linewidth=1)
        ax.axvline(c["thresholds"]["high"], color=line.get_color(), linestyle="--", linewidth=1)
    ax.set_xlabel("γ  (dotted: trustworthy below; dashed: untrustworthy from)", fontsize=8)
    ax.set_ylabel("P(correct)")
    ax.set_ylim(-0.08, 1.08)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return figure(fig, "calibration curve")


def reliability_plot(curves: list[dict[str, Any]]) -> str:
    """Predicted vs observed accuracy per bin of predicted P(correct), on held-out answers."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    ax.plot([0, 1], [0, 1], color="#999", linestyle="--", linewidth=0.8, label="perfect")
    for c in curves:
        bins = [b for b in c["holdout"]["bins"] if b["n"]]
        x = [b["predicted"] for b in bins]
        y = [b["observed"] for b in bins]
        label = f"ECE {c['holdout']['ece']:.3f}" if c["holdout"]["ece"] is not None else "ECE —"
        if len(curves) > 1:
            label = f"{describe_key(c['key'])}: {label}"
        line = ax.plot(x, y, marker="o", label=label)[0]
        for xi, yi, b in zip(x, y, bins, strict=True):
            ax.annotate(str(b["n"]), (xi, yi), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=line.get_color())
    ax.set_xlabel("predicted P(correct) (held out; numbers: answers)", fontsize=8)
    ax.set_ylabel("observed accuracy", fontsize=8)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return figure(fig, "reliability diagram")


def calibration_section(curves: list[dict[str, Any]]) -> str:
    return "".join([calibration_table(curves), "<h3>Calibration curve</h3>", curve_plot(curves),
                    "<h3>Reliability diagram (held out)</h3>", reliability_plot(curves)])


def write_calibration_report(calibration: Calibration, out: Path) -> Path:
    """A self-contained HTML page for a calibration file."""
    curves = [c.to_dict() for c in calibration.curves]
    with plain_text_labels():
        body = calibration_section(curves)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page("veracity calibration", [body]), encoding="utf-8")
    return out


def control_table(labelled: Sequence[tuple[str, ControlSummary]]) -> str:
    rows = []
    for label, c in labelled:
        kinds = "/".join(sorted({str(v.get("kind")) for v in c.variations}))
        rows.append([label, c.n_scored, c.mean_gamma, c.stderr_gamma, c.mean_gamma_null,
                     c.stderr_gamma_null, c.gamma_null_p95, _percent(c.share_above_null_p95),
                     _percent(c.share_above_own_null), _percent(c.share_null_identical),
                     f"{c.n} {kinds}"])
    return table(
        ["run", "items", "mean γ", "± s.e.", "mean γ_null", "± s.e.", "γ_null 95th pct.",
         "% γ > null p95", "% γ > own γ_null", "% null answers identical", "paths"],
        rows,
    ) + ("<p class='muted'>γ_null: γ of the unperturbed prompt answered along other compute "
         "paths (no input token changed), scored exactly as γ. Variations are listed in run.json "
         "(config.control).</p>")


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def control_plot(labelled: list[tuple[str, list[tuple[float, float]]]]) -> str:
    """γ against γ_null per item."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.4, 4.0))
    top = 0.0
    for label, pairs in labelled:
        if pairs:
            arr = np.asarray(pairs, dtype=np.float64)
            ax.scatter(arr[:, 1], arr[:, 0], s=10, alpha=0.6, label=label)
            top = max(top, float(arr.max()))
    top = top or 1.0
    ax.plot([0, top], [0, top], color="#999", linestyle="--", linewidth=0.8)
    ax.set_xlabel("γ_null (numerical noise alone)", fontsize=8)
    ax.set_ylabel("γ (perturbed prompts)", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return figure(fig, "gamma against gamma_null")
