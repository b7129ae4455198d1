"""The P(True) section of ``veracity report``: summary per run, P(True) histogram, every
question with its drill-down (the model's verdict on its own answer)."""

from __future__ import annotations

from typing import Any

from veracity.methods.p_true.records import PTrueRecord, PTrueSummary
from veracity.records import read_records
from veracity.report.html import figure, fmt, pyplot, table
from veracity.report.items import Column, item_table
from veracity.store import RunDir


def _summary(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        r = PTrueSummary.from_json(run.results)
        rows.append([run.path.name, r.model, r.dataset, r.prompt, r.n_scored, r.n_unscored,
                     f"{fmt(r.mean_score, 3)} ± {fmt(r.stderr, 3)}",
                     r.sources["logprobs"], r.sources["verdict"]])
    return table(["run", "model", "dataset", "prompt", "scored", "unscored",
                  "mean P(True) ± SE", "from log-probabilities", "from the verdict word"], rows)


def _histogram(runs: list[RunDir]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    for run in runs:
        hist = PTrueSummary.from_json(run.results).histogram
        ax.stairs(hist.counts, hist.edges, label=str(run.path.name))
    ax.set_xlabel("P(True) the model gives its own answer")
    ax.set_ylabel("questions")
    ax.legend(fontsize=7)
    return figure(fig, "histogram of P(True)")


def _rows(runs: list[RunDir]) -> list[dict[str, Any]]:
    return [{"_run": run.path.name, "run": run.path.name, "id": r.id, "prompt": r.prompt,
             "answer": r.answer, "score": r.score, "source": r.source, "error": r.error,
             "_d": {"verdict": r.verdict, "p_true": r.p_true, "p_false": r.p_false,
                    "position": r.position, "model": r.model,
                    "references": list(r.references)}}
            for run in runs for r in read_records(PTrueRecord, run.samples())]


def section(runs: list[RunDir]) -> str:
    """Summary table, histogram and the item table of the runs."""
    columns = [Column("run", "run", "cat"), Column("id", "id"), Column("prompt", "prompt"),
               Column("answer", "greedy answer"),
               Column("score", "P(True)", "num", help="P(True) / (P(True) + P(False))"),
               Column("source", "read from", "cat"), Column("error", "not scored because")]
    if len(runs) == 1:
        columns = columns[1:]
    return (_summary(runs) + _histogram(runs)
            + item_table("p-true-items", columns, _rows(runs), drill="p-true",
                         range_key="score"))
