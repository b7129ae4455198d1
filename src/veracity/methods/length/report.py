"""The length section of ``veracity report``: summary per run, length histogram, every
question with its drill-down."""

from __future__ import annotations

from typing import Any

from veracity.methods.length.records import LengthRecord, LengthSummary
from veracity.records import read_records
from veracity.report.html import figure, fmt, pyplot, table
from veracity.report.items import Column, item_table
from veracity.store import RunDir


def _summary(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        r = LengthSummary.from_json(run.results)
        q: tuple[float | None, ...] = r.quartiles or (None, None, None)
        rows.append([run.path.name, r.model, r.dataset, r.n_scored, r.n_unscored,
                     f"{fmt(r.mean_score, 1)} ± {fmt(r.stderr, 1)}",
                     f"{fmt(q[0], 0)} / {fmt(q[1], 0)} / {fmt(q[2], 0)}",
                     r.n_cut_at_max_tokens, r.counted_by["words"]])
    return table(["run", "model", "dataset", "scored", "unscored", "mean tokens ± SE",
                  "quartiles", "cut at max tokens", "counted by the word fallback"], rows)


def _histogram(runs: list[RunDir]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    for run in runs:
        hist = LengthSummary.from_json(run.results).histogram
        ax.stairs(hist.counts, hist.edges, label=str(run.path.name))
    ax.set_xlabel("greedy answer length (tokens)")
    ax.set_ylabel("questions")
    ax.legend(fontsize=7)
    return figure(fig, "histogram of answer lengths")


def _rows(runs: list[RunDir]) -> list[dict[str, Any]]:
    return [{"_run": run.path.name, "run": run.path.name, "id": r.id, "prompt": r.prompt,
             "answer": r.answer, "score": r.score, "counted_by": r.counted_by,
             "error": r.error,
             "_d": {"model": r.model, "counted_by": r.counted_by,
                    "finish_reason": r.finish_reason, "references": list(r.references)}}
            for run in runs for r in read_records(LengthRecord, run.samples())]


def section(runs: list[RunDir]) -> str:
    """Summary table, histogram and the item table of the runs."""
    columns = [Column("run", "run", "cat"), Column("id", "id"), Column("prompt", "prompt"),
               Column("answer", "greedy answer"),
               Column("score", "tokens", "num", digits=0, help="answer length in tokens"),
               Column("counted_by", "counted by", "cat"),
               Column("error", "not scored because")]
    if len(runs) == 1:
        columns = columns[1:]
    return (_summary(runs) + _histogram(runs)
            + item_table("length-items", columns, _rows(runs), drill="length",
                         range_key="score"))
