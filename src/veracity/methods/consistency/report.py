"""The self-consistency section of ``veracity report``: summary per run, score histogram,
every question with its drill-down (the samples beside the greedy answer), and validation."""

from __future__ import annotations

import json
from typing import Any

from veracity.methods.consistency.records import ConsistencyRecord, ConsistencySummary
from veracity.records import read_records
from veracity.report.html import esc, figure, fmt, pyplot, table
from veracity.report.items import Column, item_table
from veracity.store import VALIDATION_FILE, RunDir


def _summary(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        r = ConsistencySummary.from_json(run.results)
        rows.append([str(run.path.name), r.model, r.dataset, r.m, r.temperature, r.n_scored,
                     r.n_unscored, f"{fmt(r.mean_score, 4)} ± {fmt(r.stderr, 4)}"])
    return table(["run", "model", "dataset", "M", "T", "scored", "unscored", "mean score ± SE"],
                 rows)


def _histogram(runs: list[RunDir]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    for run in runs:
        hist = ConsistencySummary.from_json(run.results).histogram
        ax.stairs(hist.counts, hist.edges, label=str(run.path.name))
    ax.set_xlabel("self-consistency score (1 = samples agree with the greedy answer)")
    ax.set_ylabel("questions")
    ax.legend(fontsize=7)
    return figure(fig, "histogram of self-consistency scores")


def _rows(runs: list[RunDir]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        for record in read_records(ConsistencyRecord, run.samples()):
            rows.append({"_run": run.path.name, "run": run.path.name, "id": record.id,
                         "prompt": record.prompt, "answer": record.answer, "score": record.score,
                         "error": record.error,
                         "_d": {"samples": list(record.samples), "cosines": list(record.cosines),
                                "model": record.model, "embedder": record.embedder,
                                "m": record.m, "temperature": record.temperature,
                                "references": list(record.references)}})
    return rows


def section(runs: list[RunDir]) -> str:
    """Summary table, histogram and the item table of the runs."""
    columns = [Column("run", "run", "cat"), Column("id", "id"), Column("prompt", "prompt"),
               Column("answer", "greedy answer"),
               Column("score", "score", "num", help="(mean cosine of the samples + 1) / 2"),
               Column("error", "not scored because")]
    if len(runs) == 1:
        columns = columns[1:]
    return (_headline(runs) + _summary(runs) + _histogram(runs)
            + item_table("consistency-items", columns, _rows(runs), drill="consistency",
                         range_key="score"))


def _headline(runs: list[RunDir]) -> str:
    """On the first screen, for validated runs: how well the score flags wrong answers."""
    lines = []
    for run in runs:
        if not (run.path / VALIDATION_FILE).is_file():
            continue
        found = json.loads((run.path / VALIDATION_FILE).read_text(encoding="utf-8"))
        a = found["auroc"]
        lines.append(f"<li><b>{esc(run.path.name)}</b>: AUROC of 1 − score for flagging wrong "
                     f"answers {fmt(a['auroc'])} [{fmt(a['ci'][0])}, {fmt(a['ci'][1])}] on "
                     f"{a['n']} answers ({a['n_incorrect']} wrong); 0.5 = chance. It is itself "
                     "the baseline; compare it with the other signals with "
                     "<code>veracity benchmark</code>.</li>")
    return f"<ul class='verdict'>{''.join(lines)}</ul>" if lines else ""


def validation_section(runs: list[RunDir]) -> str:
    """AUROC of 1 - score for flagging incorrect answers, per validated run."""
    rows = []
    for run in runs:
        found = json.loads((run.path / VALIDATION_FILE).read_text(encoding="utf-8"))
        a = found["auroc"]
        rows.append([run.path.name, found["n_labelled"], fmt(found["accuracy"]),
                     f"{fmt(a['auroc'])} [{fmt(a['ci'][0])}, {fmt(a['ci'][1])}]"])
    return table(["run", "labelled", "accuracy", "AUROC of 1 − score (95% CI)"], rows)
