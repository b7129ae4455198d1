"""The paper's Table 8 and Figures 1, 3 and 4 across gamma runs: models x domains.

Table 8 (Kersting et al. 2024): one row per model, one column per domain (Web QA, TruthfulQA,
Programming QA, ...), each cell ⟨γ⟩ ± s.e., the mean human rating R, R of the answers with
γ below the threshold, and the share of answers below it (%γ<0.05, "certified trustworthy").
Under it, §4's cross-domain rankings: models by R and by %γ<0.05, each a mean over domains
weighted by the answers behind it. Ratings made with different rubrics, and shares under
different thresholds, are not pooled into a ranking; the table says so instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from veracity.data.qa import domain_of
from veracity.errors import DataError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.records import GammaAggregate, GammaRecord, GammaResults, GivenCut
from veracity.methods.gamma.validation.annotate import gamma_edges
from veracity.methods.gamma.validation.paper_table8 import published_html
from veracity.records import read_records
from veracity.report.html import esc, figure, pyplot
from veracity.stats import binned_means
from veracity.store import RATINGS_FILE, RunDir

ALL_MODELS = "all models"
Bin = dict[str, float | int]
"""One γ bin of :func:`veracity.stats.binned_means`: lo, hi, n, mean, stderr."""


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    return None if math.isnan(number) else number


@dataclass(frozen=True)
class Rated:
    """What Table 8 and Figure 1 take from a run's ratings.json."""

    R: float | None
    R_stderr: float | None
    R_below: float | None
    R_below_stderr: float | None
    n_rated: int
    rubric: str
    points: list[tuple[float, float]]
    """(γ, mean rating) of each rated answer with a γ."""


def _ratings(run: RunDir) -> Rated | None:
    target = run.path / RATINGS_FILE
    files = run.info.get("files")
    if not target.is_file() or (files is not None and RATINGS_FILE not in files):
        return None
    try:
        found = json.loads(target.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{target} is not valid JSON: {exc}") from None
    if not isinstance(found, dict):
        raise DataError(f"{target}: expected a JSON object")
    return Rated(R=_number(found.get("mean_rating")),
                 R_stderr=_number(found.get("mean_rating_stderr")),
                 R_below=_number(found.get("mean_rating_below_threshold")),
                 R_below_stderr=_number(found.get("mean_rating_below_threshold_stderr")),
                 n_rated=int(found.get("n_rated") or 0),
                 rubric=found.get("rubric_id") or found.get("rubric") or "unnamed",
                 points=[(float(i["gamma"]), float(i["mean_rating"]))
                         for i in found.get("items", []) if i.get("gamma") is not None])


@dataclass(frozen=True)
class CellThreshold:
    """The threshold a cell's share below it is taken at: as applied, and as given."""

    value: float
    form: str
    given: float
    given_form: str


@dataclass(frozen=True)
class Cell:
    """One run's Table 8 cell: γ statistics, and the ratings when the run holds ratings.json."""

    run: str
    model: str
    domain: str
    embedder: str
    form: str
    n: int
    mean_gamma: float | None
    stderr: float | None
    share_below: float | None
    threshold: CellThreshold
    n_truncated: int | None
    R: float | None = None
    R_stderr: float | None = None
    R_below: float | None = None
    R_below_stderr: float | None = None
    n_rated: int = 0
    rubric: str | None = None


@dataclass(frozen=True)
class Ranked:
    model: str
    score: float
    domains: int
    """Domains the model's score is pooled over."""


@dataclass(frozen=True)
class Ranking:
    """Models by a weighted mean over domains, or why the cells are not pooled."""

    order: tuple[Ranked, ...]
    not_pooled: str | None


@dataclass(frozen=True)
class Table8:
    """Table 8 as data: ``cells[model][domain]`` and §4's two rankings."""

    domains: list[str]
    models: list[str]
    cells: dict[str, dict[str, Cell]]
    embedders: list[str]
    by_rating: Ranking
    by_certified: Ranking


def _threshold(agg: GammaAggregate, form: str) -> CellThreshold:
    given = agg.threshold_given or GivenCut(agg.threshold, form)
    return CellThreshold(agg.threshold, agg.threshold_form or form, given.value, given.form)


def cell(run: RunDir) -> Cell:
    """One run's Table 8 cell: γ statistics, and ratings when the run holds ratings.json."""
    results = GammaResults.from_json(run.results)
    agg = results.aggregate
    form = str(results.settings["form"])
    found = Cell(
        run=str(run.path), model=results.model,
        domain=results.domain or domain_of(results.dataset),
        embedder=results.embedder, form=form, n=agg.n_scored,
        mean_gamma=agg.mean, stderr=agg.stderr,
        share_below=agg.share_below_threshold, threshold=_threshold(agg, form),
        n_truncated=agg.n_truncated,
    )
    rated = _ratings(run)
    if rated is None:
        return found
    return replace(found, R=rated.R, R_stderr=rated.R_stderr, R_below=rated.R_below,
                   R_below_stderr=rated.R_below_stderr, n_rated=rated.n_rated,
                   rubric=rated.rubric)


def _weighted(cells: Sequence[Cell], value: Callable[[Cell], float | None],
              weight: Callable[[Cell], int]) -> float | None:
    pairs = [(v, w) for c in cells if (v := value(c)) is not None and (w := weight(c))]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


def _ranking(rows: dict[str, dict[str, Cell]], value: Callable[[Cell], float | None],
             weight: Callable[[Cell], int], key: Callable[[Cell], object], what: str) -> Ranking:
    """Models by the weighted mean of ``value``; refused when the cells differ in ``key``."""
    cells = [c for by_domain in rows.values() for c in by_domain.values() if value(c) is not None]
    kinds = {json.dumps(_plain(key(c)), sort_keys=True) for c in cells}
    if len(kinds) > 1:
        return Ranking((), f"the cells differ in {what}: " + "; ".join(sorted(kinds)))
    scores = {model: _weighted(list(by_domain.values()), value, weight)
              for model, by_domain in rows.items()}
    order = sorted(((m, s) for m, s in scores.items() if s is not None), key=lambda x: -x[1])
    return Ranking(tuple(Ranked(m, s, sum(1 for c in rows[m].values() if value(c) is not None))
                         for m, s in order), None)


def _plain(value: object) -> object:
    return asdict(value) if isinstance(value, CellThreshold) else value


def table8(runs: Sequence[RunDir]) -> Table8:
    """Table 8 as data: ``domains``, ``models``, ``cells[model][domain]`` and the rankings."""
    gamma_runs = [run for run in runs if run.method == "gamma"]
    if not gamma_runs:
        raise DataError("Table 8 compares gamma runs, and none is given")
    rows: dict[str, dict[str, Cell]] = {}
    domains: list[str] = []
    for run in gamma_runs:
        c = cell(run)
        model = c.model
        if c.domain in rows.get(model, {}):  # a second run of the same pair: its own row
            model = f"{model} [{run.path.name}]"
        rows.setdefault(model, {})[c.domain] = c
        if c.domain not in domains:
            domains.append(c.domain)
    embedders = sorted({c.embedder for by in rows.values() for c in by.values()})
    return Table8(
        domains=domains, models=list(rows), cells=rows, embedders=embedders,
        by_rating=_ranking(rows, lambda c: c.R, lambda c: c.n_rated, lambda c: c.rubric,
                           "rubric"),
        by_certified=_ranking(rows, lambda c: c.share_below, lambda c: c.n,
                              lambda c: c.threshold, "threshold"),
    )


def table8_json(runs: Sequence[RunDir]) -> JsonObject:
    """``veracity report --json`` for gamma runs: :func:`table8` as JSON."""
    data = table8(runs)
    return {
        "domains": data.domains, "models": data.models,
        "cells": {m: {d: asdict(c) for d, c in by.items()} for m, by in data.cells.items()},
        "embedders": data.embedders,
        "ranking": {"by_rating": asdict(data.by_rating),
                    "by_certified": asdict(data.by_certified)},
    }


def _fmt(value: float | None, digits: int = 3, scale: float = 1.0) -> str:
    return "—" if value is None else f"{value * scale:.{digits}f}"


def _cell_html(c: Cell | None) -> str:
    if c is None:
        return "—"
    lines = [f"⟨γ⟩ {_fmt(c.mean_gamma, 4)} ± {_fmt(c.stderr, 4)}",
             f"%γ&lt;{c.threshold.given:g}: {_fmt(c.share_below, 1, 100)}%"]
    if c.R is not None:
        lines += [f"R {_fmt(c.R, 2)} ± {_fmt(c.R_stderr, 2)}",
                  f"R<sub>γ&lt;{c.threshold.given:g}</sub> {_fmt(c.R_below, 2)}"]
    if c.n_truncated:
        lines.append(f"{c.n_truncated} truncated")
    return "<br>".join(lines)


def _ranking_html(name: str, ranking: Ranking, scale: float, unit: str) -> str:
    if ranking.not_pooled:
        return f"<p><b>{esc(name)}</b>: not pooled, {esc(ranking.not_pooled)}.</p>"
    if not ranking.order:
        return f"<p><b>{esc(name)}</b>: no run has the values.</p>"
    shown = ", ".join(f"{k}. {esc(r.model)} ({r.score * scale:.{2 if scale == 1 else 1}f}"
                      f"{unit}, {r.domains} domain{'s' * (r.domains != 1)})"
                      for k, r in enumerate(ranking.order, 1))
    return f"<p><b>{esc(name)}</b>: {shown}</p>"


def table8_html(data: Table8) -> str:
    """Table 8's layout, with the rankings under it."""
    head = "".join(f"<th>{esc(h)}</th>" for h in ["model", *data.domains])
    body = "".join(
        f"<tr><td>{esc(model)}</td>"
        + "".join(f"<td class='num'>{_cell_html(data.cells[model].get(d))}</td>"
                  for d in data.domains) + "</tr>"
        for model in data.models)
    html = (f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
            "</table></div>")
    forms = {json.dumps(asdict(c.threshold), sort_keys=True) for by in data.cells.values()
             for c in by.values()}
    note = ("thresholds: " + "; ".join(
        f"{t['value']:.4g} {t['form']} (given {t['given']:g} {t['given_form']})"
        for t in (json.loads(f) for f in sorted(forms))))
    return (html + f"<p class='muted'>{esc(note)}; embedders: {esc(', '.join(data.embedders))}"
            " (γ depends on the embedder).</p>"
            + _ranking_html("ranked by quality (R, weighted over domains)",
                            data.by_rating, 1, "")
            + _ranking_html("ranked by certified trustworthiness (%γ below the threshold, "
                            "weighted over domains)", data.by_certified, 100, "%"))


def _gammas(run: RunDir) -> list[float]:
    return [s.gamma for s in read_records(GammaRecord, run.samples()) if s.gamma is not None]


def distributions_html(runs: Sequence[RunDir], data: Table8) -> str:
    """Figures 3-4: γ distributions per domain, the models overlaid (density histograms)."""
    by_path = {str(run.path): run for run in runs}
    domains = data.domains
    plt = pyplot()
    fig, axes = plt.subplots(1, len(domains), figsize=(4.8 * len(domains), 3.4), squeeze=False)
    for ax, domain in zip(axes[0], domains, strict=True):
        cells = [(m, data.cells[m][domain]) for m in data.models if domain in data.cells[m]]
        values = {m: _gammas(by_path[c.run]) for m, c in cells}
        top = max([v for vs in values.values() for v in vs] or [1.0])
        edges = np.linspace(0.0, max(top, 1e-6), 21)
        for model, vs in values.items():
            if vs:
                ax.hist(vs, bins=edges, density=True, histtype="step", linewidth=1.5, label=model)
        ax.set_title(f"γ distribution: {domain}", fontsize=9)
        ax.set_xlabel("γ", fontsize=8)
        ax.set_ylabel("density", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return figure(fig, "gamma distributions per domain")


def rating_bins(runs: Sequence[RunDir], bins: int = 10) -> dict[str, dict[str, list[Bin]]]:
    """Figure 1's data per model and domain, plus the pooled ``all models`` row: the mean
    rating per γ bin, from each run's ratings.json (runs without ratings are left out)."""
    points: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for run in runs:
        rated = _ratings(run)
        if rated is None:
            continue
        c = cell(run)
        pairs = rated.points
        for model in (c.model, ALL_MODELS):
            points.setdefault((model, c.domain), []).extend(pairs)
    out: dict[str, dict[str, list[Bin]]] = {}
    for (model, domain), pairs in points.items():
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        out.setdefault(model, {})[domain] = binned_means(xs, ys, gamma_edges(xs, bins))
    return out


def figure1_html(binned: dict[str, dict[str, list[Bin]]]) -> str:
    """Figure 1: mean rating against γ, one row per model and a pooled row for all models."""
    if not binned:
        return ""
    models = [m for m in binned if m != ALL_MODELS] + [ALL_MODELS]
    domains = list(dict.fromkeys(d for by in binned.values() for d in by))
    plt = pyplot()
    fig, axes = plt.subplots(len(models), len(domains), squeeze=False,
                             figsize=(4.2 * len(domains), 2.8 * len(models)))
    for r, model in enumerate(models):
        for k, domain in enumerate(domains):
            ax = axes[r][k]
            found = [b for b in binned[model].get(domain, []) if b["n"]]
            if not found:
                ax.set_visible(False)
                continue
            ax.errorbar([(b["lo"] + b["hi"]) / 2 for b in found], [b["mean"] for b in found],
                        yerr=[b["stderr"] or 0.0 for b in found], fmt="o-", markersize=3)
            ax.set_ylim(0, 5.2)
            ax.set_title(f"{model} × {domain}", fontsize=8)
            ax.set_xlabel("γ", fontsize=8)
            ax.set_ylabel("mean rating", fontsize=8)
    fig.tight_layout()
    return figure(fig, "mean rating against gamma")


def section(runs: list[RunDir]) -> str:
    """Table 8, Figures 3-4 and Figure 1 for a group of gamma runs."""
    data = table8(runs)
    parts = ["<h3>Table 8: models × domains</h3>", table8_html(data),
             "<h4>Table 8 as published, for reference</h4>", published_html(),
             "<h3>Figures 3–4: γ distributions per domain</h3>", distributions_html(runs, data)]
    rated = rating_bins(runs)
    if rated:
        parts += ["<h3>Figure 1: rating against γ (last row: all models pooled)</h3>",
                  figure1_html(rated)]
    return "".join(parts)
