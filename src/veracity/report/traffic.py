"""``veracity report --traffic FILE``: the gateway's traffic log as a self-contained HTML report."""

from __future__ import annotations

import statistics
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from veracity.errors import DataError
from veracity.report.html import esc, figure, fmt, page, plain_text_labels, pyplot, table
from veracity.text import display_safe
from veracity.traffic import Entry, read_traffic

SHOWN = 50
VERDICTS = ("trustworthy", "uncertain", "untrustworthy", "unscored")


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _by_model(entries: list[Entry]) -> dict[str, list[Entry]]:
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.model, []).append(e)
    return groups


def _summary(groups: dict[str, list[Entry]]) -> str:
    rows = []
    for model, group in groups.items():
        gammas = [e.gamma for e in group if e.gamma is not None]
        verdicts = Counter(e.verdict for e in group)
        latency = [e.total_ms for e in group if e.total_ms is not None]
        embedders = sorted({str(e.score.get("embedder")) for e in group})
        chances = [e.p_correct for e in group if e.p_correct is not None]
        rows.append([model, len(group), len(gammas),
                     statistics.fmean(gammas) if gammas else None,
                     statistics.median(gammas) if gammas else None,
                     statistics.fmean(chances) if chances else None,
                     *(verdicts.get(v, 0) for v in VERDICTS),
                     statistics.median(latency) if latency else None, ", ".join(embedders)])
    return table(["model", "exchanges", "scored", "mean γ", "median γ", "mean P(correct)", *VERDICTS,
                  "median total ms", "embedder"], rows)


def _over_time(groups: dict[str, list[Entry]]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for model, group in groups.items():
        points = [(datetime.fromtimestamp(e.time, tz=timezone.utc), e.gamma)
                  for e in group if e.gamma is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker=".", linestyle="none", label=model)
    ax.set_ylabel("γ")
    ax.set_xlabel("time (UTC)")
    if any(e.gamma is not None for g in groups.values() for e in g):
        ax.legend(fontsize=8)
    fig.autofmt_xdate()
    return figure(fig, "gamma over time")


def _distribution(groups: dict[str, list[Entry]]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for model, group in groups.items():
        values = [e.gamma for e in group if e.gamma is not None]
        if values:
            ax.hist(values, bins=20, range=(0, 1.0), alpha=0.6, label=model)
    ax.set_xlabel("γ")
    ax.set_ylabel("answers")
    if any(e.gamma is not None for g in groups.values() for e in g):
        ax.legend(fontsize=8)
    return figure(fig, "gamma distribution per model")


def _worst(entries: list[Entry]) -> str:
    scored = sorted((e for e in entries if e.gamma is not None), key=lambda e: -(e.gamma or 0.0))
    rows = []
    for e in scored[:SHOWN]:
        pairs = zip(_perturbations(e.score), e.score.get("perturbed_answers") or [], strict=False)
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


def _calibration(entries: list[Entry]) -> str:
    """Which calibrations gave P(correct), and a warning for forced ones."""
    used = {}
    for e in entries:
        info = e.score.get("calibration")
        if isinstance(info, dict):
            used[(str(info.get("source")), bool(info.get("forced")))] = info
    if not used:
        return "<p class='muted'>No calibration: P(correct) is not estimated.</p>"
    items = "".join(
        f"<li>{esc(source)}{' <strong>(forced: made for another setup)</strong>' if forced else ''}"
        f" — made for {esc(', '.join(f'{k}={v}' for k, v in (info.get('key') or {}).items()))}</li>"
        for (source, forced), info in used.items())
    return f"<p>P(correct) and the verdict thresholds come from:</p><ul>{items}</ul>"


def _errors(entries: list[Entry]) -> str:
    counts = Counter(e.error for e in entries if e.error)
    if not counts:
        return "<p class='muted'>none</p>"
    return table(["reason", "exchanges"], [[reason, n] for reason, n in counts.most_common(20)])


def build_traffic_report(path: Path, out: Path, title: str = "veracity traffic") -> Path:
    """Write one HTML file from a gateway traffic log."""
    entries = read_traffic(path)
    if not entries:
        raise DataError(f"{path} holds no exchanges yet")
    groups = _by_model(entries)
    first, last = entries[0].time, entries[-1].time
    settings = entries[-1].score
    thresholds = settings.get("thresholds") or {}
    intro = (f"<p>{len(entries)} exchanges from {esc(_when(first))} to {esc(_when(last))}. Latest "
             f"settings: form {esc(settings.get('form'))}, ball {esc(settings.get('ball'))}, "
             f"n {esc(settings.get('n'))}, thresholds {fmt(thresholds.get('low'))} / "
             f"{fmt(thresholds.get('high'))} ({esc(thresholds.get('source'))}). γ depends on the "
             "embedder: compare models scored with the same one.</p>" + _calibration(entries))
    with plain_text_labels():
        sections = [intro, "<h2>Per model</h2>", _summary(groups), "<h2>γ over time</h2>",
                    _over_time(groups), "<h2>γ distribution per model</h2>", _distribution(groups),
                    f"<h2>Least trustworthy answers (highest γ, at most {SHOWN})</h2>", _worst(entries),
                    "<h2>Not scored</h2>", _errors(entries)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(title, sections), encoding="utf-8")
    return out
