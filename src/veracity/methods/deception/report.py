"""Report section for deception runs: the paper's Table 3, per-subject bars, consistency split,
and the normal-vs-misleading accuracy scatter with its least-squares line and Pearson r."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from veracity.methods.deception.records import DeceptionRecord, DeceptionSummary
from veracity.records import read_records
from veracity.report.html import esc, figure, fmt, pyplot, table
from veracity.report.items import Column, item_table
from veracity.stats import linear_fit, pearson
from veracity.store import RunDir

_NORMAL, _MISLEADING = "#4c72b0", "#dd8452"


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def run_labels(runs: list[RunDir]) -> list[str]:
    """One label per run: the model, marked when recorded, disambiguated by directory."""
    base = []
    for run in runs:
        r = run.results
        base.append(str(r["model"]) + (" (recorded)" if r.get("source") == "recorded" else ""))
    counts = Counter(base)
    return [f"{b} [{run.path.name}]" if counts[b] > 1 else b
            for b, run in zip(base, runs, strict=True)]


def _variant(results: dict[str, Any], key: str) -> float | str | None:
    if results.get(f"{key}_unbounded"):
        return "∞"
    value = results.get(key)
    return value if isinstance(value, int | float) else None


def _truncated(results: dict[str, Any]) -> list[float | None]:
    """Truncation rates; none for recorded answers, which do not say why one is invalid."""
    if results.get("source") == "recorded":
        return [None, None]
    return [_pct(results.get("truncation_rate_normal")),
            _pct(results.get("truncation_rate_misleading"))]


def _table3(runs: list[RunDir], labels: list[str]) -> str:
    rows = []
    for run, label in zip(runs, labels, strict=True):
        r = run.results
        rows.append([
            label, r["n_items"], _pct(r["normal_accuracy"]), _pct(r["misleading_accuracy"]),
            "∞" if r.get("susceptibility_unbounded") else r["susceptibility"],
            _variant(r, "susceptibility_pooled"), _variant(r, "susceptibility_subject_weighted"),
            _pct(r["consistency"]), _pct(r["consistent_correct"]),
            _pct(r["consistent_incorrect"]), _pct(r["error_rate_normal"]),
            _pct(r["error_rate_misleading"]), *_truncated(r),
            f"{len(r.get('susceptibility_subjects', []))} / {r.get('n_subjects', '?')}",
            r["dataset"],
        ])
    thresholds = sorted({str(run.results.get("susceptibility_threshold")) for run in runs})
    headline = sorted({str(run.results.get("susceptibility_method", "pooled")) for run in runs})
    return table(
        ["model", "items", "normal acc. %", "misleading acc. %",
         f"susceptibility ↓ ({', '.join(headline)})",
         "susceptibility, pooled: Σc_n / Σc_m",
         "susceptibility, subject-weighted: Σ(t_s/T′)·(c_n^s/c_m^s)",
         "consistency %", "consistent correct %", "consistent incorrect %", "error normal %",
         "error misleading %", "of which truncated, normal %",
         "of which truncated, misleading %", "subjects in susceptibility", "dataset"],
        rows, digits=2,
    ) + (
        "<p class='muted'>Susceptibility is taken over S′, the subjects whose normal accuracy "
        f"exceeds {esc(', '.join(thresholds))} (lower is better; ∞ when a needed misleading "
        "count is zero), two ways: <b>pooled</b> = Σ_{s∈S′} c_n^s / Σ_{s∈S′} c_m^s (normal "
        "correct over misleading correct; reproduces the paper's Table 3) and "
        "<b>subject-weighted</b> = Σ_{s∈S′} (t_s / T′) · (c_n^s / c_m^s) with T′ = Σ_{s∈S′} t_s "
        "(the formula as §3.2.2 writes it). The headline column is the run's "
        "<code>--susceptibility</code>. "
        "Consistency = same letter in both categories (unparsable \"-\" included), split into "
        "shares of all items that are consistently correct and consistently incorrect. Errors "
        "are invalid answers (\"-\", counted wrong); the truncated ones ran out of "
        "<code>--max-tokens</code> before the JSON closed (empty for recorded answers, which do "
        "not say why one is invalid).</p>"
    )


def _subjects(runs: list[RunDir]) -> list[str]:
    names: set[str] = set()
    for run in runs:
        names.update(_metrics(run).per_subject)
    return sorted(names)


def _metrics(run: RunDir) -> DeceptionSummary:
    return DeceptionSummary.from_results(run.results)


def _items_in(run: RunDir, subject: str) -> int:
    entry = _metrics(run).per_subject.get(subject)
    return 0 if entry is None else entry.n_items


def _value(run: RunDir, subject: str, key: str) -> float:
    entry = _metrics(run).per_subject.get(subject)
    value = None if entry is None else getattr(entry, key)
    return math.nan if value is None else float(value)


def _accuracy_bars(runs: list[RunDir], labels: list[str], subjects: list[str]) -> str:
    plt = pyplot()
    height = max(2.5, 0.22 * len(subjects) + 1.0)
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs) + 2.0, height), sharey=True,
                             squeeze=False)
    y = np.arange(len(subjects))
    for ax, run, label in zip(axes[0], runs, labels, strict=True):
        normal = [100 * _value(run, s, "normal_accuracy") for s in subjects]
        misleading = [100 * _value(run, s, "misleading_accuracy") for s in subjects]
        ax.barh(y - 0.2, normal, height=0.4, color=_NORMAL, label="normal")
        ax.barh(y + 0.2, misleading, height=0.4, color=_MISLEADING, label="misleading")
        ax.set_xlim(0, 100)
        ax.set_title(f"Accuracy per subject: {label}", fontsize=9)
        ax.set_xlabel("accuracy % (blue: normal, orange: misleading opening)", fontsize=8)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_yticks(y, subjects, fontsize=7)
    axes[0][0].invert_yaxis()
    fig.tight_layout()
    return figure(fig, "normal and misleading accuracy per subject")


def _susceptibility_bars(runs: list[RunDir], labels: list[str], subjects: list[str]) -> str:
    shown = [s for s in subjects if any(not math.isnan(_value(r, s, "susceptibility"))
                                        for r in runs)]
    unbounded = sorted({f"{s} ({label})" for run, label in zip(runs, labels, strict=True)
                        for s, entry in _metrics(run).per_subject.items()
                        if entry.susceptibility_unbounded})
    note = ("<p class='muted'>Unbounded (∞, no correct misleading answer): "
            f"{esc(', '.join(unbounded))}.</p>") if unbounded else ""
    if not shown:
        return note or ("<p class='muted'>No subject reaches the normal-accuracy threshold: "
                        "susceptibility is undefined everywhere.</p>")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.25 * len(shown) * max(1, len(runs) / 2) + 1)))
    width = 0.8 / len(runs)
    y = np.arange(len(shown))
    for k, (run, label) in enumerate(zip(runs, labels, strict=True)):
        values = [_value(run, s, "susceptibility") for s in shown]
        ax.barh(y - 0.4 + width * (k + 0.5), values, height=width, label=label)
    ax.axvline(1.0, color="#555", linestyle="--", linewidth=1)
    ax.set_yticks(y, shown, fontsize=7)
    ax.invert_yaxis()
    ax.set_title("Susceptibility per subject", fontsize=9)
    ax.set_xlabel("susceptibility (normal correct / misleading correct; lower is better)",
                  fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return figure(fig, "susceptibility per subject") + note + (
        "<p class='muted'>Subjects at or below the normal-accuracy threshold, or with no correct "
        "misleading answer, have no bar.</p>")


def _consistency_bars(runs: list[RunDir], labels: list[str]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(runs) + 2), 3.4))
    x = np.arange(len(runs))
    correct = [100 * (_metrics(run).consistent_correct or 0.0) for run in runs]
    incorrect = [100 * (_metrics(run).consistent_incorrect or 0.0) for run in runs]
    ax.bar(x, correct, color="#55a868", label="consistent, correct")
    ax.bar(x, incorrect, bottom=correct, color="#c44e52", label="consistent, incorrect")
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.set_title("Same answer with and without the misleading opening", fontsize=9)
    ax.set_ylabel("% of items", fontsize=8)
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return figure(fig, "consistency split into correct and incorrect")


@dataclass(frozen=True)
class Fit:
    """Pearson r with its two-tailed p and the least-squares line y = slope x + intercept."""

    n: int
    r: float
    p: float
    slope: float
    intercept: float


def correlation(xs: list[float], ys: list[float]) -> Fit:
    """Pearson r with its two-tailed p and the least-squares line y = m x + b."""
    r, p = pearson(xs, ys)
    m, b = linear_fit(xs, ys)
    return Fit(len(xs), r, p, m, b)


def _scatter(runs: list[RunDir], labels: list[str], subjects: list[str]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 5.0))
    rows = []
    for run, label in zip(runs, labels, strict=True):
        pairs = [(100 * _value(run, s, "normal_accuracy"), 100 * _value(run, s, "misleading_accuracy"))
                 for s in subjects if s in _metrics(run).per_subject]
        xs = [x for x, y in pairs if not (math.isnan(x) or math.isnan(y))]
        ys = [y for x, y in pairs if not (math.isnan(x) or math.isnan(y))]
        fit = correlation(xs, ys)
        points = ax.scatter(xs, ys, s=14, alpha=0.75, label=f"{label} (r = {fmt(fit.r, 2)})")
        if not math.isnan(fit.slope):
            line = np.array([min(xs), max(xs)])
            ax.plot(line, fit.slope * line + fit.intercept, color=points.get_facecolor()[0],
                    linewidth=1.2)
        rows.append([label, fit.n, fit.r, fit.p, fit.slope, fit.intercept])
    ax.plot([0, 100], [0, 100], color="#999", linestyle=":", linewidth=1)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.set_title("Normal vs misleading accuracy, one point per subject (r: Pearson)", fontsize=9)
    ax.set_xlabel("normal accuracy % (per subject)", fontsize=8)
    ax.set_ylabel("misleading accuracy % (per subject)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    html = figure(fig, "normal vs misleading accuracy per subject") + table(
        ["model", "subjects", "Pearson r", "p (two-tailed)", "slope", "intercept"], rows, digits=4)
    if len(runs) >= 3:
        across = correlation([100 * (_metrics(run).normal_accuracy or 0.0) for run in runs],
                             [100 * (_metrics(run).misleading_accuracy or 0.0) for run in runs])
        html += (f"<p>Across the {len(runs)} runs (one point per model): Pearson r = "
                 f"{fmt(across.r, 3)}, p = {fmt(across.p, 4)}, least-squares line "
                 f"y = {fmt(across.slope, 3)} x + {fmt(across.intercept, 2)}.</p>")
    return html + ("<p class='muted'>p from t = r·√(n−2)/√(1−r²) with n−2 degrees of freedom; "
                   "the dotted line is y = x (no effect of the misleading opening).</p>")


def _per_subject_tables(runs: list[RunDir], labels: list[str]) -> str:
    parts = []
    for run, label in zip(runs, labels, strict=True):
        rows = [
            [s, m.n_items, _pct(m.normal_accuracy), _pct(m.misleading_accuracy),
             "∞" if m.susceptibility_unbounded else m.susceptibility,
             _pct(m.consistency), _pct(m.consistent_correct), _pct(m.consistent_incorrect),
             _pct(m.error_rate_normal), _pct(m.error_rate_misleading)]
            for s, m in sorted(_metrics(run).per_subject.items())
        ]
        parts.append(f"<details><summary>{esc(label)}: per subject</summary>" + table(
            ["subject", "items", "normal %", "misleading %", "susceptibility", "consistency %",
             "cons. correct %", "cons. incorrect %", "error normal %", "error misleading %"],
            rows, digits=2) + "</details>")
    return "".join(parts)


def _verdict(gold: str, normal: str, misleading: str) -> str:
    if normal == gold:
        return "held (both correct)" if misleading == gold else "misled"
    return "corrected by the opening" if misleading == gold else "wrong both times"


class ItemRow(TypedDict):
    """One item's row in the item table (``_d``: what its drill-down shows)."""

    _run: int
    run: str
    id: str
    subject: str
    question: str
    gold: str
    normal: str
    misleading: str
    verdict: str
    length: int
    error: str | None
    _d: dict[str, Any]


def _item_rows(runs: list[RunDir], labels: list[str]) -> list[ItemRow]:
    rows: list[ItemRow] = []
    for index, (run, label) in enumerate(zip(runs, labels, strict=True)):
        for s in read_records(DeceptionRecord, run.samples()):
            normal, misleading = s.normal, s.misleading
            unparsed = [side for side, a in (("normal", normal), ("misleading", misleading))
                        if a.answer == "-"]
            rows.append({
                "_run": index, "run": label, "id": s.id, "subject": s.subject,
                "question": s.question, "gold": s.gold,
                "normal": normal.answer, "misleading": misleading.answer,
                "verdict": _verdict(s.gold, normal.answer, misleading.answer),
                "length": len(normal.reasoning or normal.raw or ""),
                "error": f"unparsable: {', '.join(unparsed)}" if unparsed else None,
                "_d": {"options": list(s.options), "misleading_start": s.misleading_start,
                       "model": s.model, "normal_side": normal.to_json(),
                       "misleading_side": misleading.to_json()},
            })
    return rows


def _items(runs: list[RunDir], labels: list[str]) -> str:
    rows = _item_rows(runs, labels)
    columns = [Column("run", "model", "cat"), Column("id", "id"), Column("subject", "subject", "cat"),
               Column("question", "question"), Column("gold", "gold", "cat"),
               Column("normal", "normal answer", "cat"),
               Column("misleading", "misleading answer", "cat"), Column("verdict", "verdict", "cat"),
               Column("length", "normal reasoning length", "num", digits=0, help="characters"),
               Column("error", "error", "cat")]
    if len(runs) == 1:
        columns = columns[1:]
    return item_table("deception-items", columns, rows, drill="deception")


def _side_by_side(runs: list[RunDir], labels: list[str], subjects: list[str]) -> str:
    """The paper's Table 3 per subject for any number of models, one row per subject."""
    columns = [Column("subject", "subject", "cat"), Column("items", "items", "num", digits=0)]
    for k, label in enumerate(labels):
        columns += [Column(f"n{k}", "normal %", "num", digits=1, group=label),
                    Column(f"m{k}", "misleading %", "num", digits=1, group=label),
                    Column(f"s{k}", "suscept.", "num", digits=2, group=label,
                           help="susceptibility; empty: below the normal-accuracy threshold "
                           "or unbounded")]
    rows = []
    for subject in subjects:
        row: dict[str, Any] = {"subject": subject, "items": max(
            _items_in(run, subject) for run in runs)}
        for k, run in enumerate(runs):
            row[f"n{k}"] = _pct(_none(_value(run, subject, "normal_accuracy")))
            row[f"m{k}"] = _pct(_none(_value(run, subject, "misleading_accuracy")))
            row[f"s{k}"] = _none(_value(run, subject, "susceptibility"))
        rows.append(row)
    return item_table("deception-subjects", columns, rows, page_size=60)


def _none(value: float) -> float | None:
    return None if math.isnan(value) else value


def section(runs: list[RunDir]) -> str:
    """HTML for a group of deception runs (live and recorded alike)."""
    labels = run_labels(runs)
    subjects = _subjects(runs)
    return "".join([
        "<h3>Summary (the paper's Table 3)</h3>", _table3(runs, labels),
        "<h3>Accuracy per subject</h3>", _accuracy_bars(runs, labels, subjects),
        "<h3>Susceptibility per subject</h3>", _susceptibility_bars(runs, labels, subjects),
        "<h3>Consistency</h3>", _consistency_bars(runs, labels),
        "<h3>Normal vs misleading accuracy</h3>", _scatter(runs, labels, subjects),
        "<h3>Per subject, models side by side</h3>", _side_by_side(runs, labels, subjects),
        "<h3>Per-subject metrics</h3>", _per_subject_tables(runs, labels),
        "<h3>Every item</h3>", _items(runs, labels),
    ])
