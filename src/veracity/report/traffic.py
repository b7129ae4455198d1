"""``veracity report --traffic FILE``: the gateway's traffic log as a self-contained HTML report."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from veracity.errors import DataError
from veracity.report.html import esc, figure, fmt, page, plain_text_labels, pyplot, table
from veracity.report.traffic_stream import TrafficSummary, fmean, median
from veracity.text import display_safe
from veracity.traffic import iter_traffic

SHOWN = 50
VERDICTS = ("trustworthy", "uncertain", "untrustworthy", "unscored")


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _summary(summary: TrafficSummary) -> str:
    rows = []
    for model, m in summary.models.items():
        rows.append([model, m.exchanges, len(m.gammas), fmean(m.gammas), median(m.gammas),
                     fmean(m.chances), *(m.verdicts.get(v, 0) for v in VERDICTS),
                     median(m.latency), ", ".join(sorted(m.embedders))])
    return table(["model", "exchanges", "scored", "mean γ", "median γ", "mean P(correct)", *VERDICTS,
                  "median total ms", "embedder"], rows)


def _decisions_and_cost(summary: TrafficSummary) -> str:
    rows = []
    for model, m in summary.models.items():
        scored = len(m.gammas)
        rows.append([model, *(m.decisions.get(d, 0) for d in ("answer", "abstain", "escalate")),
                     m.tokens / scored if scored else None,
                     1000 * m.cost / m.priced if m.priced else None])
    return table(["model", "answer", "abstain", "escalate", "tokens per scored answer",
                  "USD per 1,000 scored answers"], rows)


def _over_time(summary: TrafficSummary) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for model, m in summary.models.items():
        if m.gammas:
            when = (np.frombuffer(m.times, dtype=np.float64) * 1e6).astype("datetime64[us]")
            ax.plot(when, np.frombuffer(m.gammas, dtype=np.float64), marker=".",
                    linestyle="none", label=model)
    ax.set_ylabel("γ")
    ax.set_xlabel("time (UTC)")
    if any(m.gammas for m in summary.models.values()):
        ax.legend(fontsize=8)
    fig.autofmt_xdate()
    return figure(fig, "gamma over time")


def _distribution(summary: TrafficSummary) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for model, m in summary.models.items():
        if m.gammas:
            ax.hist(np.frombuffer(m.gammas, dtype=np.float64), bins=20, range=(0, 1.0), alpha=0.6,
                    label=model)
    ax.set_xlabel("γ")
    ax.set_ylabel("answers")
    if any(m.gammas for m in summary.models.values()):
        ax.legend(fontsize=8)
    return figure(fig, "gamma distribution per model")


def _worst(summary: TrafficSummary) -> str:
    rows = []
    for e in summary.worst():
        answers = e.score.get("perturbed_answers")
        pairs = zip(_perturbations(e.score), answers if isinstance(answers, list) else [],
                    strict=False)
        perturbed = "".join(f"<li><code>{esc(p)}</code> → {esc(a)}</li>" for p, a in pairs)
        rows.append(
            f"<tr><td class='num'>{fmt(e.gamma)}</td><td class='num'>{fmt(e.p_correct)}</td>"
            f"<td>{esc(e.verdict)}</td><td>{esc(e.model)}</td>"
            f"<td>{esc(_when(e.time))}</td><td>{esc(e.prompt)}</td><td>{esc(e.answer)}<details>"
            f"<summary>perturbed answers</summary><ul>{perturbed}</ul></details></td></tr>"
        )
    return (f"<table><thead><tr><th>γ</th><th>P(correct)</th><th>verdict</th><th>model</th>"
            f"<th>time</th><th>prompt</th>"
            f"<th>answer</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _perturbations(score: dict[str, Any]) -> list[str]:
    """How each perturbed prompt differs from the prompt (a log from before the gateway kept
    edits instead of whole prompts has the prompts themselves)."""
    edits = score.get("perturbed_edits")
    if not isinstance(edits, list):
        return [str(p) for p in score.get("perturbed_prompts") or []]
    shown = []
    for change in edits:
        if not isinstance(change, dict):
            continue
        cut = f", {change.get('cut')} cut" if change.get("cut") else ""
        shown.append(f"at {change.get('at')}{cut}: +{display_safe(repr(change.get('insert', '')))}")
    return shown


def _calibration(summary: TrafficSummary) -> str:
    """Which calibrations gave P(correct), and a warning for forced ones."""
    used = summary.calibrations
    if not used:
        return "<p class='muted'>No calibration: P(correct) is not estimated.</p>"
    items = "".join(
        f"<li>{esc(source)}{' <strong>(forced: made for another setup)</strong>' if forced else ''}"
        f" — made for {esc(', '.join(f'{k}={v}' for k, v in (info.get('key') or {}).items()))}</li>"
        for (source, forced), info in used.items())
    return f"<p>P(correct) and the verdict thresholds come from:</p><ul>{items}</ul>"


def _errors(summary: TrafficSummary) -> str:
    counts = summary.errors
    if not counts:
        return "<p class='muted'>none</p>"
    return table(["reason", "exchanges"], [[reason, n] for reason, n in counts.most_common(20)])


def build_traffic_report(path: Path, out: Path, title: str = "veracity traffic") -> Path:
    """Write one HTML file from a gateway traffic log, read as a stream."""
    summary = TrafficSummary(shown=SHOWN)
    for entry in iter_traffic(path):
        summary.add(entry)
    if not summary.count or summary.first is None or summary.last is None:
        raise DataError(f"{path} holds no exchanges yet")
    settings = summary.latest
    thresholds = settings.get("thresholds") or {}
    intro = (f"<p>{summary.count} exchanges from {esc(_when(summary.first))} to "
             f"{esc(_when(summary.last))}. Latest "
             f"settings: form {esc(settings.get('form'))}, ball {esc(settings.get('ball'))}, "
             f"n {esc(settings.get('n'))}, thresholds {fmt(thresholds.get('low'))} / "
             f"{fmt(thresholds.get('high'))} ({esc(thresholds.get('source'))}). γ depends on the "
             "embedder: compare models scored with the same one.</p>" + _calibration(summary))
    with plain_text_labels():
        sections = [intro, "<h2>Per model</h2>", _summary(summary),
                    "<h2>Decisions and the cost of scoring</h2>", _decisions_and_cost(summary),
                    "<h2>γ over time</h2>",
                    _over_time(summary), "<h2>γ distribution per model</h2>",
                    _distribution(summary),
                    f"<h2>Least trustworthy answers (highest γ, at most {SHOWN})</h2>",
                    _worst(summary), "<h2>Not scored</h2>", _errors(summary)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(title, sections), encoding="utf-8")
    return out
