"""The semantic-entropy section of ``veracity report``: summary per run, entropy histogram,
every question with its drill-down (the samples grouped by meaning cluster)."""

from __future__ import annotations

from typing import Any

from veracity.methods.semantic_entropy.records import (
    SemanticEntropyRecord,
    SemanticEntropySummary,
)
from veracity.records import read_records
from veracity.report.html import figure, fmt, pyplot, table
from veracity.report.items import Column, item_table
from veracity.store import RunDir


def _summary(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        r = SemanticEntropySummary.from_json(run.results)
        rows.append([run.path.name, r.model, r.dataset, r.m, r.temperature, r.entailment,
                     r.n_scored, r.n_unscored, f"{fmt(r.mean_score, 3)} ± {fmt(r.stderr, 3)}",
                     fmt(r.n_clusters.mean, 2),
                     f"{r.forms['likelihood']} / {r.forms['discrete']}"])
    return table(["run", "model", "dataset", "M", "T", "same meaning by", "scored",
                  "unscored", "mean entropy ± SE", "mean clusters",
                  "likelihood / discrete form"], rows)


def _histogram(runs: list[RunDir]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    for run in runs:
        hist = SemanticEntropySummary.from_json(run.results).histogram
        ax.stairs(hist.counts, hist.edges, label=str(run.path.name))
    ax.set_xlabel("semantic entropy (nats; 0 = every sample means the same)")
    ax.set_ylabel("questions")
    ax.legend(fontsize=7)
    return figure(fig, "histogram of semantic entropy")


def _rows(runs: list[RunDir]) -> list[dict[str, Any]]:
    return [{"_run": run.path.name, "run": run.path.name, "id": r.id, "prompt": r.prompt,
             "answer": r.answer, "score": r.score, "n_clusters": r.n_clusters,
             "form": r.form, "error": r.error,
             "_d": {"samples": list(r.samples), "clusters": list(r.clusters),
                    "sample_logprobs": list(r.sample_logprobs), "discrete": r.discrete,
                    "likelihood": r.likelihood, "m": r.m, "temperature": r.temperature,
                    "entailment": r.entailment, "model": r.model,
                    "references": list(r.references)}}
            for run in runs for r in read_records(SemanticEntropyRecord, run.samples())]


def section(runs: list[RunDir]) -> str:
    """Summary table, histogram and the item table of the runs."""
    columns = [Column("run", "run", "cat"), Column("id", "id"), Column("prompt", "prompt"),
               Column("answer", "greedy answer"),
               Column("score", "entropy", "num", help="semantic entropy over the clusters"),
               Column("n_clusters", "clusters", "num", digits=0),
               Column("form", "form", "cat"), Column("error", "not scored because")]
    if len(runs) == 1:
        columns = columns[1:]
    return (_summary(runs) + _histogram(runs)
            + item_table("semantic-entropy-items", columns, _rows(runs),
                         drill="semantic-entropy", range_key="score"))
