"""Report section for gamma runs: summary table, histograms per model x dataset, answers."""

from __future__ import annotations

from typing import Any

import numpy as np

from veracity.report.calibration import calibration_section, control_plot, control_table
from veracity.report.html import esc, figure, fmt, pyplot, table
from veracity.store import RunDir

_SHOWN_ITEMS = 50


def _label(results: dict[str, Any]) -> str:
    return f"{results['model']} × {results['dataset']}"


def _summary(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        r = run.results
        agg = r["aggregate"]
        rows.append([
            _label(r), agg["n_items"], agg["mean"], agg["stderr"], agg["median"],
            None if agg["share_below_threshold"] is None else 100 * agg["share_below_threshold"],
            r["model"], r["embedder"], r["settings"]["form"], r["settings"]["ball"],
            r["settings"]["n"],
        ])
    return table(
        ["run", "items", "mean γ", "± s.e.", "median γ", "% γ < threshold", "model", "embedder",
         "γ form", "ball", "N"],
        rows,
    ) + "<p class='muted'>threshold: γ < 0.05 unless the run says otherwise " \
        "(γ depends on the embedder: compare runs that share one).</p>"


def _histograms(runs: list[RunDir]) -> str:
    plt = pyplot()
    cols = min(3, len(runs))
    rows = (len(runs) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for ax, run in zip(axes.flat, runs, strict=False):
        r = run.results
        values = [s["gamma"] for s in run.samples() if s.get("gamma") is not None]
        upper = 1.0 if r["settings"]["form"] == "sin" else float(np.sqrt(2))
        ax.hist(values, bins=20, range=(0, upper), color="#4c72b0", edgecolor="white")
        ax.axvline(r["aggregate"]["threshold"], color="#c44e52", linestyle="--", linewidth=1)
        ax.set_title(_label(r), fontsize=9)
        ax.set_xlabel(f"γ ({r['settings']['form']}, {r['embedder']})", fontsize=8)
        ax.set_ylabel("answers", fontsize=8)
    fig.tight_layout()
    return figure(fig, "gamma histograms")


def _answers(run: RunDir) -> str:
    samples = sorted(run.samples(), key=lambda s: -(s.get("gamma") or 0.0))
    rows = []
    for s in samples[:_SHOWN_ITEMS]:
        perturbed = "".join(
            f"<li><code>{esc(p)}</code> → {esc(a)}</li>"
            for p, a in zip(s.get("perturbed_prompts") or [""] * len(s["perturbed_answers"]),
                            s["perturbed_answers"], strict=False)
        )
        error = f"<p class='error'>not scored: {esc(s['error'])}</p>" if s.get("error") else ""
        extra = "".join(f"<br><span class='muted'>{name} {fmt(s.get(key))}</span>"
                        for name, key in (("γ_null", "gamma_null"), ("P(correct)", "p_correct"))
                        if key in s)
        rows.append(
            f"<tr><td class='num'>{fmt(s.get('gamma'))}{extra}</td><td>{esc(s['prompt'])}</td>"
            f"<td>{esc(s['answer'])}{error}<details><summary>{len(s['perturbed_answers'])} perturbed"
            f"</summary><ul>{perturbed}</ul></details></td></tr>"
        )
    return (
        f"<details><summary>{esc(_label(run.results))}: answers, highest γ first "
        f"(at most {_SHOWN_ITEMS})</summary><table><thead><tr><th>γ</th><th>prompt</th>"
        f"<th>answer</th></tr></thead><tbody>{''.join(rows)}</tbody></table></details>"
    )


def _control(runs: list[RunDir]) -> str:
    with_control = [run for run in runs if run.results.get("control")]
    if not with_control:
        return ""
    summaries = [(_label(run.results), run.results["control"]) for run in with_control]
    pairs = [(_label(run.results), [(s["gamma"], s["gamma_null"]) for s in run.samples()
                                    if s.get("gamma") is not None
                                    and s.get("gamma_null") is not None])
             for run in with_control]
    return "".join(["<h3>Numeric control: γ against numerical noise</h3>",
                    control_table(summaries), control_plot(pairs)])


def _calibration(runs: list[RunDir]) -> str:
    used = [run.results["calibration"] for run in runs if run.results.get("calibration")]
    if not used:
        return ""
    forced = [f"<p class='error'>{esc(u['source'])} was made for another setup and used with "
              f"--force: {esc(u.get('differs'))}</p>" for u in used if u.get("forced")]
    return "".join(["<h3>Calibration used: P(correct) from γ</h3>", *forced,
                    calibration_section([u["curve"] for u in used])])


def section(runs: list[RunDir]) -> str:
    """HTML for a group of gamma runs."""
    parts = [_summary(runs), "<h3>γ distribution per model × dataset</h3>", _histograms(runs),
             _control(runs), _calibration(runs)]
    parts.append("<h3>Answers</h3>")
    parts.extend(_answers(run) for run in runs)
    return "".join(parts)
