"""Comparison of deception runs across models: the paper's Figures A1-A11, its per-question
examples and its Appendix D case studies, drawn from the numbers of
:mod:`veracity.methods.deception.compare.core`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from veracity.data.model_info import ModelInfo
from veracity.errors import DataError
from veracity.methods.deception.compare.core import (
    CONTRASTS,
    CORRECTNESS,
    MIN_MODELS,
    RANDOM_GUESS,
    CaseStudy,
    ModelRecords,
    ModelSummary,
    Relation,
    case_studies,
    compare,
)
from veracity.methods.deception.compare.paper import stated
from veracity.methods.deception.records import (
    DeceptionAnswer,
    DeceptionRecord,
    DeceptionResults,
)
from veracity.methods.deception.report import run_labels
from veracity.records import read_records
from veracity.report.html import esc, figure, fmt, json_block, pyplot, table
from veracity.store import RunDir

_NORMAL, _MISLEADING = "#4c72b0", "#dd8452"
_CORRECT, _INCORRECT, _OFF = "#55a868", "#c44e52", "#bbbbbb"
MMLU = "mmlu"
"""The model-info column §5.1 sets the normal accuracy beside (Table 1's 5-shot MMLU)."""
EXAMPLES_PER_GROUP = 3
"""Per-question view: how many items of each correctness group are shown per model."""
CORRECTNESS_TITLES = {"only_normal": "only the normal answer is correct",
                  "only_misleading": "only the misleading answer is correct",
                  "both": "both answers are correct", "neither": "neither answer is correct"}


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def _susceptibility_cell(value: float | None, unbounded: bool) -> float | str | None:
    return "∞" if unbounded else value


def _bars(summaries: Sequence[ModelSummary], series: Sequence[tuple[str, str, list[float]]],
          ylabel: str, hline: tuple[float, str] | None = None, alt: str = "") -> str:
    """Grouped vertical bars, one group per model."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.5, 0.9 * len(summaries) + 2.5), 3.6))
    x = np.arange(len(summaries))
    width = 0.8 / len(series)
    for k, (name, colour, values) in enumerate(series):
        ax.bar(x - 0.4 + width * (k + 0.5), values, width=width, color=colour, label=name)
    if hline is not None:
        ax.axhline(hline[0], color="#555", linestyle="--", linewidth=1, label=hline[1])
    ax.set_xticks(x, [s.label for s in summaries], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return figure(fig, alt)


def _accuracy(summaries: Sequence[ModelSummary]) -> str:
    chance = 100 * RANDOM_GUESS
    html = _bars(summaries, [
        ("normal", _NORMAL, [100 * s.normal_accuracy for s in summaries]),
        ("misleading", _MISLEADING, [100 * s.misleading_accuracy for s in summaries]),
    ], "accuracy %", (chance, f"random guess ({chance:.0f} %)"), "overall accuracy per model")
    rows = [[s.label, s.n_items, _pct(s.normal_accuracy), _pct(s.misleading_accuracy),
             _pct(s.normal_accuracy - s.misleading_accuracy)] for s in summaries]
    return html + table(["model", "items", "normal %", "misleading %", "drop (points)"], rows, 2)


def _susceptibility(summaries: Sequence[ModelSummary]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.5, 0.9 * len(summaries) + 2.5), 3.6))
    x = np.arange(len(summaries))
    values = [s.susceptibility if s.susceptibility is not None else 0.0 for s in summaries]
    ax.bar(x, values, color=_MISLEADING)
    top = max([1.0, *values])
    for i, s in enumerate(summaries):
        if s.susceptibility is None:  # no bar: say why on the axis
            ax.text(i, 0.02 * top, "∞" if s.susceptibility_unbounded else "—", ha="center",
                    va="bottom", fontsize=11)
    ax.axhline(1.0, color="#555", linestyle="--", linewidth=1, label="1 = not misled")
    ax.set_xticks(x, [s.label for s in summaries], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("susceptibility (lower is better)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    rows = [[s.label, _susceptibility_cell(s.susceptibility, s.susceptibility_unbounded),
             s.susceptibility_pooled, s.susceptibility_subject_weighted,
             sum(t.counts for t in s.subjects), len(s.subjects)] for s in summaries]
    return figure(fig, "overall susceptibility per model") + table(
        ["model", "susceptibility (bars)", "pooled: Σc_n / Σc_m",
         "subject-weighted: Σ(t_s/T′)·(c_n^s/c_m^s)", "subjects counted", "subjects"],
        rows, 3) + ("<p class='muted'>Bars show each run's headline formula "
                    "(<code>--susceptibility</code>, pooled by default); an empty cell is "
                    "undefined or ∞.</p>")


def _panels(count: int, n_rows_each: int) -> tuple[Any, list[Any]]:
    plt = pyplot()
    cols = min(count, 4)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols + 1.5, rows * (0.2 * n_rows_each + 1.2)),
                             squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[count:]:
        ax.axis("off")
    return fig, flat[:count]


def _subject_susceptibility(summaries: Sequence[ModelSummary]) -> str:
    from matplotlib.patches import Patch

    n_subjects = max(len(s.subjects) for s in summaries)
    fig, axes = _panels(len(summaries), n_subjects)
    rows = []
    for ax, s in zip(axes, summaries, strict=True):
        y = np.arange(len(s.subjects))
        values = [t.value if t.value is not None else 0.0 for t in s.subjects]
        ax.barh(y, values, color=[_MISLEADING if t.counts else _OFF for t in s.subjects])
        for i, t in enumerate(s.subjects):
            if t.value is None:
                ax.text(0, i, " ∞" if t.unbounded else " —", va="center", fontsize=7,
                        color="#000000" if t.counts else "#888888")
        ax.axvline(1.0, color="#555", linestyle="--", linewidth=1)
        ax.set_yticks(y, [t.subject for t in s.subjects], fontsize=6)
        ax.invert_yaxis()
        ax.set_title(s.label, fontsize=9)
        rows += [[s.label, t.subject, _pct(t.normal_accuracy), t.normal_correct, t.misleading_correct,
                  _susceptibility_cell(t.value, t.unbounded), "yes" if t.counts else "no"]
                 for t in s.subjects]
    threshold = ", ".join(sorted({f"{100 * s.threshold:g} %" for s in summaries}))
    fig.legend(handles=[Patch(color=_MISLEADING, label="counts"),
                        Patch(color=_OFF, label=f"normal accuracy ≤ {threshold}: does not count")],
               fontsize=7, loc="lower center", ncol=2, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout()
    return figure(fig, "susceptibility per subject") + (
        "<details><summary>numbers per subject</summary>" + table(
            ["model", "subject", "normal %", "normal correct", "misleading correct",
             "susceptibility", "counts"], rows, 3) + "</details>")


def _consistency(summaries: Sequence[ModelSummary]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.5, 0.9 * len(summaries) + 2.5), 3.6))
    x = np.arange(len(summaries))
    correct = [100 * s.consistent_correct for s in summaries]
    ax.bar(x, correct, color=_CORRECT, label="consistent, correct")
    ax.bar(x, [100 * s.consistent_incorrect for s in summaries], bottom=correct, color=_INCORRECT,
           label="consistent, incorrect")
    ax.set_xticks(x, [s.label for s in summaries], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("% of items", fontsize=8)
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7)
    fig.tight_layout()
    rows = [[s.label, _pct(s.consistency), _pct(s.consistent_correct), _pct(s.consistent_incorrect)]
            for s in summaries]
    return figure(fig, "consistency per model") + table(
        ["model", "consistency %", "consistent correct %", "consistent incorrect %"], rows, 2)


def _subject_consistency(summaries: Sequence[ModelSummary]) -> str:
    n_subjects = max(len(s.consistency_by_subject) for s in summaries)
    fig, axes = _panels(len(summaries), n_subjects)
    for ax, s in zip(axes, summaries, strict=True):
        subjects = sorted(s.consistency_by_subject)
        y = np.arange(len(subjects))
        correct = [100 * s.consistency_by_subject[t][0] for t in subjects]
        ax.barh(y, correct, color=_CORRECT, label="consistent, correct")
        ax.barh(y, [100 * s.consistency_by_subject[t][1] for t in subjects], left=correct,
                color=_INCORRECT, label="consistent, incorrect")
        ax.set_xlim(0, 100)
        ax.set_yticks(y, subjects, fontsize=6)
        ax.invert_yaxis()
        ax.set_title(s.label, fontsize=9)
        ax.set_xlabel("% of the subject's items", fontsize=7)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return figure(fig, "consistency per subject")


def _errors(summaries: Sequence[ModelSummary]) -> str:
    html = _bars(summaries, [
        ("normal", _NORMAL, [100 * s.error_rate_normal for s in summaries]),
        ("misleading", _MISLEADING, [100 * s.error_rate_misleading for s in summaries]),
    ], "invalid answers %", alt="error rate per model")
    rows = [[s.label, _pct(s.error_rate_normal), _pct(s.error_rate_misleading),
             _pct(s.truncation_rate_normal), _pct(s.truncation_rate_misleading)]
            for s in summaries]
    return html + table(["model", "error normal %", "error misleading %",
                         "of which truncated, normal %", "of which truncated, misleading %"],
                        rows, 2) + (
        "<p class='muted'>Truncated: the reasoning ran out of <code>--max-tokens</code> before "
        "the JSON answer closed (recorded answers do not say why one is invalid: 0 there).</p>")


def _title(rel: Relation) -> str:
    return f"{rel.key}: {rel.y_label} vs {rel.x_label}"


def _stated(found: Sequence[Relation]) -> str:
    """Each drawn relation in words, with what the paper's text says of it."""
    lines = []
    for rel in found:
        if not rel.enough:
            continue
        fit = rel.fit()
        paper = stated(rel.key, rel.x_label)
        said = f"; {paper.text()}" if paper is not None else ""
        lines.append(f"<li>{esc(_title(rel))}: Pearson r = {fmt(fit['r'], 3)}, "
                     f"p = {fmt(fit['p'], 3)}, n = {rel.n}{esc(said)}</li>")
    return f"<ul class='relations'>{''.join(lines)}</ul>" if lines else ""


def _beside_mmlu(summaries: Sequence[ModelSummary], info: ModelInfo | None) -> str:
    """§5.1: the normal (reasoning) accuracy beside the model info's 5-shot MMLU score."""
    if info is None or MMLU not in info.columns:
        return ""
    rows = []
    for s in summaries:
        mmlu = info.value(s.model, MMLU)
        normal = 100 * s.normal_accuracy
        rows.append([s.label, normal, mmlu, None if mmlu is None else normal - mmlu])
    return ("<h3>Normal accuracy beside 5-shot MMLU (§5.1)</h3>"
            + table(["model", "normal accuracy % (1-shot, reasoning first)", "MMLU % (model info)",
                     "difference (points)"], rows, 2)
            + "<p class='muted'>MMLU's own score reads the option letter's probability after "
              "five examples; the normal accuracy here has the model write its reasoning "
              "first, which the paper finds lowers most models' score.</p>")


def _relations(found: Sequence[Relation]) -> str:
    drawn = [rel for rel in found if rel.enough]
    rows = []
    for rel in found:
        fit = rel.fit()
        status = "drawn" if rel.enough else f"not enough data ({rel.n} of {MIN_MODELS} models)"
        if rel.enough and math.isnan(fit["r"]):
            status = "drawn; r undefined (an axis is constant)"
        left_out = "; ".join(f"{label}: {why}" for label, why in rel.excluded.items())
        rows.append([_title(rel), rel.n, fit["r"], fit["p"], fit["slope"], fit["intercept"], status,
                     left_out])
    html = table(["relation", "models", "Pearson r", "p (two-tailed)", "slope", "intercept",
                  "status", "left out"], rows, 4)
    if not drawn:
        return html
    plt = pyplot()
    cols = min(len(drawn), 3)
    n_rows = math.ceil(len(drawn) / cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(5.0 * cols, 4.2 * n_rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[len(drawn):]:
        ax.axis("off")
    for ax, rel in zip(flat, drawn, strict=False):
        fit = rel.fit()
        ax.scatter(rel.xs, rel.ys, s=22, color=_NORMAL)
        for label, x, y in zip(rel.labels, rel.xs, rel.ys, strict=True):
            ax.annotate(label, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        if not math.isnan(fit["slope"]):
            line = np.array([min(rel.xs), max(rel.xs)])
            ax.plot(line, fit["slope"] * line + fit["intercept"], color=_MISLEADING, linewidth=1.2)
        ax.set_xlabel(rel.x_label, fontsize=8)
        ax.set_ylabel(rel.y_label, fontsize=8)
        ax.set_title(f"{rel.key}: r = {fmt(fit['r'], 3)}, p = {fmt(fit['p'], 3)}, n = {rel.n}",
                     fontsize=9)
    fig.tight_layout()
    return figure(fig, "relations across models") + _stated(found) + html


def _side(title: str, side: DeceptionAnswer, opening: str | None = None) -> str:
    reasoning = side.reasoning
    shown = esc(reasoning) if reasoning else "<span class='muted'>(no parsable reasoning)</span>"
    head = f"<b>{esc(title)}</b>: answer <b>{esc(side.answer)}</b>"
    lead = (f"<div class='muted'>opening: <span class='mono'>{esc(opening)}</span></div>"
            if opening else "")
    return f"<td>{head}{lead}<div class='mono'>{shown}</div></td>"


def _example(record: DeceptionRecord) -> str:
    options = "<br>".join(f"{esc(letter)}. {esc(text)}"
                          for letter, text in zip("ABCD", record.options, strict=False))
    question = (f"<td><b>{esc(record.id)}</b> ({esc(record.subject)})<br>"
                f"{esc(record.question)}<br>{options}<br>gold: <b>{esc(record.gold)}</b></td>")
    return ("<tr>" + question + _side("normal", record.normal)
            + _side("misleading", record.misleading, record.misleading_start) + "</tr>")


def _per_question(summaries: Sequence[ModelSummary],
                  records: Sequence[Sequence[DeceptionRecord]]) -> str:
    rows = [[s.label, *(len(s.by_correctness[o]) for o in CORRECTNESS)] for s in summaries]
    html = table(["model", *(CORRECTNESS_TITLES[o] for o in CORRECTNESS)], rows)
    for s, recs in zip(summaries, records, strict=True):
        parts = []
        for o in CORRECTNESS:
            picked = s.by_correctness[o][:EXAMPLES_PER_GROUP]
            if not picked:
                continue
            body = "".join(_example(recs[i]) for i in picked)
            shown = f"{len(picked)} of {len(s.by_correctness[o])}"
            parts.append(f"<h4>{esc(CORRECTNESS_TITLES[o])} ({shown})</h4>"
                         "<table><thead><tr><th>question</th><th>normal</th><th>misleading</th>"
                         f"</tr></thead><tbody>{body}</tbody></table>")
        html += f"<details><summary>{esc(s.label)}: examples</summary>{''.join(parts)}</details>"
    return html


CONTRAST_TITLES = {"a_resists_b_misled": "A resists, B misled",
                   "b_resists_a_misled": "B resists, A misled", "same": "same group",
                   "other": "other"}
CASES_SHOWN = 5
"""Case studies listed in the page per direction (all are in the interactive view)."""


def _cases(title: str, cases: Sequence[CaseStudy], labels: tuple[str, str]) -> str:
    rows = []
    for case in cases[:CASES_SHOWN]:
        rows.append(_example(case.a).replace(
            "</tr>", _side(f"{labels[1]}: normal", case.b.normal)
            + _side(f"{labels[1]}: misleading", case.b.misleading) + "</tr>"))
    if not rows:
        return f"<h4>{esc(title)}: none</h4>"
    return (f"<h4>{esc(title)} ({len(rows)} of {len(cases)})</h4><table><thead><tr>"
            f"<th>question</th><th>{esc(labels[0])}: normal</th><th>{esc(labels[0])}: "
            f"misleading</th><th>{esc(labels[1])}: normal</th><th>{esc(labels[1])}: "
            f"misleading</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _case_studies(inputs: Sequence[ModelRecords]) -> str:
    """The first two runs' case studies in the page, and the interactive view over the
    "Every item" table for any two runs, filtered by subject and correctness groups."""
    if len(inputs) < 2:
        return "<p class='muted'>Give two or more runs to contrast them question by question.</p>"
    a, b = inputs[0], inputs[1]
    cases = case_studies(a.records, b.records)
    counts = {(ga, gb): 0 for ga in CORRECTNESS for gb in CORRECTNESS}
    for case in cases:
        counts[(case.group_a, case.group_b)] += 1
    grid = table([f"A = {a.label} \\ B = {b.label}", *(CORRECTNESS_TITLES[g] for g in CORRECTNESS)],
                 [[CORRECTNESS_TITLES[ga], *(counts[(ga, gb)] for gb in CORRECTNESS)]
                  for ga in CORRECTNESS])
    spec = {"items": "deception-items", "runs": [{"label": r.label} for r in inputs],
            "default_pair": [0, 1], "groups": CORRECTNESS_TITLES, "contrasts": CONTRAST_TITLES}
    picked = {c: [case for case in cases if case.contrast == c] for c in CONTRASTS}
    return (
        f"<p>{len(cases)} questions answered by both <b>{esc(a.label)}</b> (A) and "
        f"<b>{esc(b.label)}</b> (B); rows: A's group, columns: B's group.</p>" + grid
        + _cases(CONTRAST_TITLES["a_resists_b_misled"], picked["a_resists_b_misled"],
                 (a.label, b.label))
        + _cases(CONTRAST_TITLES["b_resists_a_misled"], picked["b_resists_a_misled"],
                 (a.label, b.label))
        + "<p class='muted'>Pick any two runs below; filter by subject, by each run's group "
          "and by the contrast (\"A resists, B misled\": A answered correctly with and without "
          "the misleading opening, B only without it). Click a row for both models' answers "
          "side by side.</p>"
        + "<div class='vcases' data-src=\"deception-cases\"></div>"
        + json_block("deception-cases", spec)
    )


def section(runs: list[RunDir], info: ModelInfo | None = None) -> str:
    """HTML comparing deception runs (live and recorded alike); ``info`` adds model size and
    external scores to the relations."""
    labels = run_labels(runs)
    inputs = []
    for run, label in zip(runs, labels, strict=True):
        results = DeceptionResults.from_json(run.results)
        typed = read_records(DeceptionRecord, list(run.samples()))
        inputs.append(ModelRecords(label, results.model, typed, results.threshold,
                                   results.susceptibility_method))
    try:
        summaries, found = compare(inputs, info)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"deception runs cannot be compared: malformed samples ({exc})") from None
    return "".join([
        "<h3>Accuracy per model (A1/A2)</h3>", _accuracy(summaries),
        _beside_mmlu(summaries, info),
        "<h3>Susceptibility per model (A3)</h3>", _susceptibility(summaries),
        "<h3>Susceptibility per subject (A4)</h3>", _subject_susceptibility(summaries),
        "<h3>Consistency per model (A5)</h3>", _consistency(summaries),
        "<h3>Consistency per subject (A6)</h3>", _subject_consistency(summaries),
        "<h3>Invalid answers per model (A7)</h3>", _errors(summaries),
        "<h3>Relations across models (A8-A11)</h3>", _relations(found),
        "<p class='muted'>Each point is a model; the line is the least-squares fit; p is "
        "two-tailed (t = r·√(n−2)/√(1−r²), n−2 degrees of freedom). Runs with ∞ or undefined "
        "susceptibility, or without a value in the model info, are left out of that relation.</p>",
        "<h3>Per question</h3>", _per_question(summaries, [m.records for m in inputs]),
        "<h3>Case studies: two models on the same questions (Appendix D)</h3>",
        _case_studies(inputs),
    ])
