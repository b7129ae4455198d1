"""The log-probability section of ``veracity report``: summary per run, histogram of the
run's signal, every question with its drill-down (each answer token with its probability)."""

from __future__ import annotations

from typing import Any

from veracity.methods.logprob.records import STATISTICS, LogprobRecord, LogprobSummary
from veracity.records import read_records
from veracity.report.html import figure, fmt, pyplot, table
from veracity.report.items import Column, item_table
from veracity.store import RunDir


def _summary(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        r = LogprobSummary.from_json(run.results)
        stats = [f"{fmt(m.mean, 3)} ± {fmt(m.stderr, 3)}" for m in
                 (r.means[name] for name in STATISTICS)]
        rows.append([run.path.name, r.model, r.dataset, r.top_k, r.n_scored, r.n_unscored,
                     *stats])
    return table(["run", "model", "dataset", "top-k", "scored", "unscored",
                  "mean log p ± SE", "min p ± SE", "mean entropy ± SE", "perplexity ± SE",
                  "tokens ± SE"], rows)


def _histogram(runs: list[RunDir]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    for run in runs:
        hist = LogprobSummary.from_json(run.results).histogram
        ax.stairs(hist.counts, hist.edges, label=str(run.path.name))
    ax.set_xlabel(f"{LogprobSummary.from_json(runs[0].results).signal} of the greedy answer")
    ax.set_ylabel("questions")
    ax.legend(fontsize=7)
    return figure(fig, "histogram of the log-probability signal")


def _rows(runs: list[RunDir]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        for r in read_records(LogprobRecord, run.samples()):
            rows.append({"_run": run.path.name, "run": run.path.name, "id": r.id,
                         "prompt": r.prompt, "answer": r.answer, "score": r.score,
                         "mean_logprob": r.mean_logprob, "min_prob": r.min_prob,
                         "mean_entropy": r.mean_entropy, "perplexity": r.perplexity,
                         "n_tokens": r.n_tokens, "error": r.error,
                         "_d": {"tokens": [list(t) for t in r.tokens], "model": r.model,
                                "signal": r.signal, "top_k": r.top_k,
                                "references": list(r.references)}})
    return rows


def section(runs: list[RunDir]) -> str:
    """Summary table, histogram and the item table of the runs."""
    columns = [Column("run", "run", "cat"), Column("id", "id"), Column("prompt", "prompt"),
               Column("answer", "greedy answer"),
               Column("mean_logprob", "mean log p", "num", help="mean token log-probability"),
               Column("min_prob", "min p", "num", help="smallest token probability"),
               Column("mean_entropy", "entropy", "num",
                      help="mean entropy of the top-k alternatives (nats)"),
               Column("perplexity", "perplexity", "num", help="exp(−mean log p)"),
               Column("n_tokens", "tokens", "num", digits=0),
               Column("error", "not scored because")]
    if len(runs) == 1:
        columns = columns[1:]
    return (_summary(runs) + _histogram(runs)
            + item_table("logprob-items", columns, _rows(runs), drill="logprob",
                         range_key="mean_logprob"))
