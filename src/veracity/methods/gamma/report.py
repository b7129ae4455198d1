"""Report section for gamma runs: summary table, histograms per model x dataset, answers."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from veracity.errors import DataError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.calibration.report import calibration_section, control_plot, control_table
from veracity.methods.gamma.records import GammaAggregate, GammaRecord, GammaResults
from veracity.records import read_records
from veracity.report.html import esc, figure, json_block, pyplot, table
from veracity.report.items import Column, item_table, present
from veracity.report.sidecar import column_values, paged_items, too_large
from veracity.store import VALIDATION_FILE, RunDir


def _label(results: GammaResults) -> str:
    return f"{results.model} × {results.dataset}"


def threshold_label(agg: GammaAggregate, form: str) -> str:
    """``0.0707 sin (given 0.05 paper-code)``: the threshold a run applied, in its form."""
    shown = f"{agg.threshold:.4g} {agg.threshold_form or form}"
    given = agg.threshold_given
    if given and given.form != (agg.threshold_form or form):
        shown += f" (given {given.value:g} {given.form})"
    return shown


def _summary(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        r = GammaResults.from_json(run.results)
        agg, settings = r.aggregate, r.settings
        rows.append([
            _label(r), agg.n_items, agg.mean, agg.stderr, agg.median,
            None if agg.share_below_threshold is None else 100 * agg.share_below_threshold,
            threshold_label(agg, settings["form"]), agg.n_truncated,
            r.model, r.embedder, settings["form"], settings["ball"], settings["n"],
        ])
    return table(
        ["run", "items", "mean γ", "± s.e.", "median γ", "% γ < threshold", "threshold",
         "answers cut at max tokens", "model", "embedder", "γ form", "ball", "N"],
        rows,
    ) + "<p class='muted'>The paper's 0.05 is in the authors' sqrt(1 − cos) form (paper-code); " \
        "a run in another form applies it converted. γ depends on the embedder: compare runs " \
        "that share one.</p>"


def _histograms(runs: list[RunDir]) -> str:
    plt = pyplot()
    cols = min(3, len(runs))
    rows = (len(runs) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for ax, run in zip(axes.flat, runs, strict=False):
        r = GammaResults.from_json(run.results)
        every = column_values(run, "gamma")
        values = every[~np.isnan(every)].tolist()
        upper = _upper(r.settings["form"], values)
        ax.hist(values, bins=20, range=(0, upper), color="#4c72b0", edgecolor="white")
        ax.axvline(r.aggregate.threshold, color="#c44e52", linestyle="--", linewidth=1)
        ax.set_title(f"γ distribution: {_label(r)}", fontsize=9)
        ax.set_xlabel(f"γ ({r.settings['form']}, {r.embedder}); dashed: threshold", fontsize=8)
        ax.set_ylabel("answers", fontsize=8)
    fig.tight_layout()
    return figure(fig, "gamma histograms")


def _upper(form: str, values: list[float]) -> float:
    """The largest γ a form allows (magnitude: up to 2 for unit vectors; the data decides)."""
    if form == "sin":
        return 1.0
    if form == "magnitude":
        return max([0.05, *values]) if values else 2.0
    return float(np.sqrt(2))


def labels(runs: list[RunDir]) -> list[str]:
    """``model × dataset`` per run, with the directory name where two would read the same."""
    base = [_label(GammaResults.from_json(run.results)) for run in runs]
    counts = Counter(base)
    return [f"{b} [{run.path.name}]" if counts[b] > 1 else b for b, run in zip(base, runs, strict=True)]


def _correctness(run: RunDir) -> dict[str, bool | None]:
    """Per-item verdicts of ``veracity validate`` when the run holds them."""
    target = run.path / VALIDATION_FILE
    if not target.is_file():
        return {}
    try:
        found = json.loads(target.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{target} is not valid JSON: {exc}") from None
    return {str(i.get("id")): i.get("correct") for i in found.get("items", [])}


def _verdict(gamma: float | None, threshold: float) -> str:
    if gamma is None:
        return "not scored"
    return f"stable (γ < {threshold:g})" if gamma < threshold else f"unstable (γ ≥ {threshold:g})"


def item_rows(runs: list[RunDir], names: list[str]) -> list[dict[str, Any]]:
    """One row per item of every run: the table's cells and the drill-down's data."""
    rows: list[dict[str, Any]] = []
    for index, (run, name) in enumerate(zip(runs, names, strict=True)):
        threshold = GammaResults.from_json(run.results).summary.threshold
        correct = _correctness(run)
        rows.extend(item_row(index, name, threshold, correct, s)
                    for s in read_records(GammaRecord, run.samples()))
    return rows


def item_row(index: int, name: str, threshold: float, correct: dict[str, bool | None],
             s: GammaRecord, stored: dict[str, Any] | None = None) -> JsonObject:
    """The table row of one record of run ``index`` (``stored``: its samples.jsonl shape,
    when at hand)."""
    stored = s.to_json() if stored is None else stored
    return {
        "_run": index, "run": name, "id": s.id,
        "subject": s.metadata.get("subject") or s.metadata.get("category"),
        "prompt": s.prompt, "answer": s.answer, "gamma": s.gamma,
        "gamma_null": s.gamma_null, "p_correct": s.p_correct,
        "correct": correct.get(s.id), "verdict": _verdict(s.gamma, threshold),
        "length": len(s.answer),
        "truncated": "cut at max tokens" if s.extra.get("finish_reason") == "length"
        else None,
        "error": s.error.message if s.gamma is None and s.error else None,
        "_d": {k: stored.get(k) for k in _DETAIL},
    }


_DETAIL = ("form", "ball", "embedder", "seed", "n", "model", "perturbed_prompts",
           "perturbed_answers", "perturbed_cosines", "references")


def _items(runs: list[RunDir], names: list[str]) -> str:
    columns = [Column("run", "run", "cat"), Column("id", "id"), Column("subject", "subject", "cat"),
               Column("prompt", "prompt"), Column("answer", "answer"),
               Column("gamma", "γ", "num", help="0 = the same answer under every perturbation"),
               Column("gamma_null", "γ_null", "num", help="γ a stable answer shows by chance"),
               Column("p_correct", "P(correct)", "num", help="calibrated probability of correct"),
               Column("correct", "correct", "cat", help="from veracity validate"),
               Column("verdict", "verdict", "cat"),
               Column("length", "answer length", "num", digits=0, help="characters"),
               Column("truncated", "truncated", "cat",
                      help="finish_reason length: γ was measured on a prefix of the answer"),
               Column("error", "not scored because")]
    optional = {"subject", "gamma_null", "p_correct", "correct", "error", "truncated"}
    if len(runs) == 1:
        columns = [c for c in columns if c.key != "run"]
    if too_large(sum(GammaResults.from_json(run.results).summary.n_items for run in runs)):
        return _paged(runs, names, columns, optional)
    rows = item_rows(runs, names)
    shown = [c for c in columns if c.key not in optional or present(rows, c.key)]
    return item_table("gamma-items", shown, rows, drill="gamma", range_key="gamma")


def _paged(runs: list[RunDir], names: list[str], columns: list[Column],
           optional: set[str]) -> str:
    """Too many items for one file: the worst, a sample and the errors here, all beside."""
    thresholds = [GammaResults.from_json(run.results).summary.threshold for run in runs]
    correct = [_correctness(run) for run in runs]
    paged, bounded, shown = paged_items(
        "gamma-all", columns, optional, runs,
        lambda i, raw: item_row(i, names[i], thresholds[i], correct[i],
                                GammaRecord.from_json(raw), raw),
        key="gamma", drill="gamma", is_error=lambda raw: raw.get("gamma") is None)
    why = Column("shown", "shown as", "cat", help="worst γ, a random sample, or an error")
    return (item_table("gamma-items", [why, *shown], bounded, drill="gamma", range_key="gamma",
                       caption=f"{len(bounded)} items: the worst γ, a random sample and every "
                               "item with an error.")
            + "<h4>All items</h4>" + paged)


def _comparison(runs: list[RunDir], names: list[str]) -> str:
    datasets = [GammaResults.from_json(run.results).dataset for run in runs]
    pair = next(((a, b) for a in range(len(runs)) for b in range(a + 1, len(runs))
                 if datasets[a] == datasets[b]), (0, 1))
    upper = max(_upper(str(GammaResults.from_json(run.results).settings.get("form")), [])
                for run in runs)
    return ("<h3>Compare two runs item by item</h3><p class='muted'>Items match by id and "
            "prompt: compare runs of the same dataset (different models or settings).</p>"
            + comparison_view("gamma-compare", "gamma-items", names, pair, upper))



def _control(runs: list[RunDir]) -> str:
    with_control = [run for run in runs if run.results.get("control")]
    if not with_control:
        return ""
    typed = [GammaResults.from_json(run.results) for run in with_control]
    summaries = [(_label(r), r.control) for r in typed if r.control is not None]
    pairs = [(_label(r), [(s.gamma, s.gamma_null)
                                    for s in read_records(GammaRecord, run.samples())
                                    if s.gamma is not None and s.gamma_null is not None])
             for r, run in zip(typed, with_control, strict=True)]
    return "".join(["<h3>Numeric control: γ against numerical noise</h3>",
                    control_table(summaries), control_plot(pairs)])


def _calibration(runs: list[RunDir]) -> str:
    used = [c for c in (GammaResults.from_json(run.results).calibration for run in runs) if c]
    if not used:
        return ""
    forced = [f"<p class='error'>{esc(u['source'])} was made for another setup and used with "
              f"--force: {esc(u.get('differs'))}</p>" for u in used if u.get("forced")]
    return "".join(["<h3>Calibration used: P(correct) from γ</h3>", *forced,
                    calibration_section([u["curve"] for u in used])])


def section(runs: list[RunDir]) -> str:
    """HTML for a group of gamma runs."""
    from veracity.methods.gamma.validation.report import headline

    names = labels(runs)
    parts = [headline(runs), _summary(runs), _control(runs), _calibration(runs),
             "<h3>γ distribution per model × dataset</h3>", _histograms(runs),
             "<h3>Every answer</h3>", _items(runs, names)]
    if len(runs) > 1:
        from veracity.methods.gamma.validation.table import section as across

        parts.append(_comparison(runs, names))
        parts.insert(1, across(runs))
    return "".join(parts)


def comparison_view(
    name: str, items: str, runs: Sequence[str], pair: tuple[int, int], upper: float
) -> str:
    """γ of run A against run B over the items of table ``items`` both answered (same id
    and prompt), with the items they disagree on most; ``runs`` labels each ``_run``."""
    spec = {"items": items, "runs": [{"label": label} for label in runs],
            "default_pair": list(pair), "upper": upper}
    return f"<div class='vcompare' data-src=\"{esc(name)}\"></div>{json_block(name, spec)}"
