"""The benchmark's report section: the verdict first, then the leaderboard per label source,
risk–coverage curves, reliability diagrams after calibration, costs, and every item."""

from __future__ import annotations

import json
import math

from veracity.jsontypes import JsonObject
from veracity.methods.benchmark.records import (
    FUSED,
    BenchmarkRecord,
    BenchmarkSummary,
    LabelTable,
)
from veracity.metrics import METRICS, Estimate
from veracity.records import read_records
from veracity.report.html import esc, figure, fmt, pyplot, table
from veracity.report.items import Column, item_table
from veracity.store import RunDir

_NAMES = {"auroc": "AUROC ↑", "prr": "PRR ↑", "auprc": "AUPRC ↑", "aurc": "AURC ↓",
          "e_aurc": "E-AURC ↓", "ece": "ECE iso ↓", "brier": "Brier iso ↓",
          "ece_platt": "ECE Platt ↓", "brier_platt": "Brier Platt ↓"}


def _summary(run: RunDir) -> BenchmarkSummary:
    found = json.loads((run.path / "benchmark.json").read_text(encoding="utf-8"))
    return BenchmarkSummary.from_json(found)


def _est(est: Estimate) -> str:
    if math.isnan(est.value):
        return "—"
    return f"{fmt(est.value)} [{fmt(est.low)}, {fmt(est.high)}]"


def _diff(est: Estimate) -> str:
    if math.isnan(est.diff):
        return ""
    return f"{est.diff:+.3f} [{fmt(est.diff_low)}, {fmt(est.diff_high)}]"


def verdict(summary: BenchmarkSummary) -> str:
    """One sentence per label source: which signal separates right from wrong answers best,
    how well, and against which baseline."""
    lines = []
    for source, entry in summary.tables.items():
        best = entry.winner
        if best is None:
            lines.append(f"<li>labels <b>{esc(source)}</b>: no table "
                         f"({esc(entry.problem or '')})</li>")
            continue
        row = entry.rows[best]["auroc"]
        ref = entry.reference
        against = ""
        if ref and ref != best:
            against = f"; vs the best baseline {esc(ref)}: ΔAUROC {esc(_diff(row))}"
        elif ref == best:
            against = " (itself the best baseline)"
        fused = entry.rows.get(FUSED)
        fusion = f"; fused: {esc(_est(fused['auroc']))}" if fused else ""
        lines.append(f"<li>labels <b>{esc(source)}</b> ({entry.n} answers, "
                     f"{entry.n_wrong} wrong): best signal <b>{esc(best)}</b>, AUROC "
                     f"{esc(_est(row))}{against}{fusion}</li>")
    return f"<ul class='verdict'>{''.join(lines)}</ul>"


def _leaderboard(source: str, entry: LabelTable) -> str:
    rows = []
    for name, row in entry.rows.items():
        rows.append([name, *(_est(row[k]) for k in METRICS), _diff(row["auroc"]),
                     _diff(row["prr"])])
    ref = entry.reference or "—"
    headers = ["signal", *(_NAMES[k] for k in METRICS), f"ΔAUROC vs {ref}", f"ΔPRR vs {ref}"]
    return (f"<h3>Labels: {esc(source)}</h3><p class='muted'>{entry.n} of "
            f"{entry.n_items} answers scored by every signal and labelled, {entry.n_wrong} "
            "wrong; 95 % bootstrap intervals; differences paired on the same resamples.</p>"
            + table(headers, rows))


def _curves(source: str, entry: LabelTable) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, risk in entry.curves.items():
        n = len(risk)
        ax.plot([(k + 1) / n for k in range(n)], list(risk), label=name,
                linestyle="--" if name == FUSED else "-")
    ax.set_xlabel("share of answers kept (lowest risk first)")
    ax.set_ylabel("error rate among kept")
    ax.invert_xaxis()
    ax.legend(fontsize=7)
    return figure(fig, f"risk–coverage curves, labels {source}")


def _reliability(source: str, entry: LabelTable) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.5), sharey=True)
    for ax, how in zip(axes, ("isotonic", "platt"), strict=True):
        ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8)
        for name, by in entry.reliability.items():
            bins = [b for b in by[how] if b["n"]]
            ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], marker="o",
                    markersize=3, label=name)
        ax.set_title(f"after {how} calibration (cross-fitted)", fontsize=9)
        ax.set_xlabel("predicted P(correct)")
    axes[0].set_ylabel("share correct")
    axes[1].legend(fontsize=7)
    return figure(fig, f"reliability diagrams, labels {source}")


def _costs(summary: BenchmarkSummary) -> str:
    rows = [[name, c.per_question(summary.n_items), c.model_calls, c.generated_tokens,
             c.wall_seconds, c.embed_seconds, c.scorer_seconds]
            for name, c in summary.costs.items()]
    return ("<h3>Cost per method</h3>" + table(
        ["method", "calls / question", "model calls", "generated tokens", "wall s",
         "embedder s", "NLI s"], rows, digits=2))


def _items(runs: list[RunDir]) -> str:
    rows: list[dict[str, object]] = []
    signals: list[str] = []
    sources: list[str] = []
    for run in runs:
        for record in read_records(BenchmarkRecord, run.samples()):
            signals += [s for s in record.scores if s not in signals]
            sources += [s for s in record.labels if s not in sources]
            rows.append({"run": run.path.name, "id": record.id, "prompt": record.prompt,
                         "answer": record.answer,
                         **{f"s:{k}": v for k, v in record.scores.items()},
                         **{f"l:{k}": ("right" if v else "wrong") if v is not None else None
                            for k, v in record.labels.items()}})
    for row in rows:  # a signal that could not score an answer: an empty cell
        row.update({f"s:{s}": None for s in signals if f"s:{s}" not in row})
    columns = [Column("id", "id"), Column("prompt", "prompt"), Column("answer", "greedy answer"),
               *(Column(f"s:{s}", s, "num", group="scores") for s in signals),
               *(Column(f"l:{s}", s, "cat", group="labels") for s in sources)]
    if len(runs) > 1:
        columns.insert(0, Column("run", "run", "cat"))
    return "<h3>Every answer</h3>" + item_table("benchmark-items", columns, rows)


def section(runs: list[RunDir]) -> str:
    """Verdict, leaderboards, curves and diagrams per label source, costs, warnings, items."""
    html = []
    for run in runs:
        summary = _summary(run)
        html.append(f"<p><b>{esc(run.path.name)}</b>: {esc(summary.model)} on "
                    f"{esc(summary.dataset)}, budget {summary.settings.budget} "
                    "calls per question</p>")
        html.append(verdict(summary))
        for note in summary.warnings:
            html.append(f"<p class='warn'>⚠ {esc(note)}</p>")
        for skipped in summary.skipped:
            html.append(f"<p class='muted'>left out: {esc(skipped.method)}: "
                        f"{esc(skipped.reason)}</p>")
        for source, entry in summary.tables.items():
            if entry.problem is not None:
                continue
            html.append(_leaderboard(source, entry))
            html.append(_curves(source, entry))
            html.append(_reliability(source, entry))
        html.append(_costs(summary))
    return "".join(html) + _items(runs)


def compare(runs: list[RunDir]) -> JsonObject:
    """``veracity report --json`` for benchmark runs: each run's metric tables."""
    return {str(run.path): {source: entry.to_json().get("metrics", {}) for source, entry in
                            _summary(run).tables.items()} for run in runs}
