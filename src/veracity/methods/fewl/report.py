"""Report section for FEWL runs: settings, score distributions per answer source, the
ablation table (validate), the rank comparison (rank), the selection (select)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np

from veracity.methods.fewl.core import LEGACY_VARIANTS
from veracity.methods.fewl.records import (
    AccuracyCell,
    FewlRanking,
    FewlRecord,
    FewlResults,
    FewlValidation,
    Figures,
    SampleLevel,
    SelectionSummary,
)
from veracity.records import read_records
from veracity.report.html import esc, figure, fmt, pyplot, table
from veracity.report.items import Column, item_table
from veracity.report.sidecar import paged_items, too_large
from veracity.store import RunDir

_VARIANT_NAMES = {
    "single": "Single: first reference, no penalty",
    "single_penalty": "Single + Penalty",
    "multi_uniform_no_penalty": "Multi + No Penalty: uniform λ (§4.1)",
    "multi_expertise_no_penalty": "Multi + No Penalty: expertise λ (C.8)",
    "single_best_no_penalty": "Single-best + No Penalty (C.8)",
    "fewl": "FEWL (expertise λ, penalty)",
    "fewl_uniform": "FEWL, uniform λ",
    "fewl_ideal": "FEWL, ideal λ from labels (oracle)",
}


def _results(run: RunDir) -> FewlResults:
    return FewlResults.from_json(run.results)


def _label(run: RunDir) -> str:
    r = _results(run)
    return f"{r.mode} · {r.dataset} ({run.path.name})"


def _settings(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        r = _results(run)
        s = r.settings
        refs = s["references"] or [s["references_file"]]
        rows.append([_label(run), r.n_questions, len(r.pairs_failed),
                     ", ".join(map(str, refs)), s["reference_samples"], r.similarity["spec"],
                     r.divergence, s["R"], s["K"], s.get("neighbours_mode", "nearest"),
                     s["tau"], s["near_duplicate"], s.get("expertise", "gap"),
                     (s.get("pair_prompt") or {}).get("source", "builtin (before C.1 wording)"),
                     r.validation.repeats if r.validation is not None else 1])
    return table(["run", "questions", "pair failures", "references", "J per model", "similarity",
                  "divergence", "R", "K", "neighbours", "τ", "near-dup", "expertise",
                  "pair prompt", "repeats"], rows) + (
        "<p class='muted'>R, K, τ, the near-duplicate threshold, the expertise formula and the "
        "cosine mapping are our reconstruction of the paper; they are parameters.</p>")


def _scores(run: RunDir) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for sample in map(FewlRecord.from_json, run.samples()):
        for name, entry in sample.answers.items():
            if entry.fewl is not None:
                out.setdefault(name, []).append(float(entry.fewl))
    return out


def _distributions(runs: list[RunDir]) -> str:
    rows, panels = [], []
    for run in runs:
        scores = _scores(run)
        models = _results(run).models
        for name, values in scores.items():
            q = np.quantile(values, [0.0, 0.25, 0.5, 0.75, 1.0])
            m = models.get(name)
            rows.append([_label(run), name, len(values), *(
                (m.mean, m.stderr, m.mean_truthfulness, m.mean_penalty) if m is not None
                else (None,) * 4), *map(float, q)])
        if scores:
            panels.append((run, scores))
    html = table(["run", "answers", "n", "mean FEWL", "± s.e.", "mean T", "mean L", "min", "q25",
                  "median", "q75", "max"], rows)
    if not panels:
        return html
    plt = pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.8 * len(panels)), squeeze=False)
    for ax, (run, scores) in zip(axes[:, 0], panels, strict=True):
        low = min(min(v) for v in scores.values())
        high = max(max(v) for v in scores.values())
        bins = np.linspace(low, high if high > low else low + 1e-6, 25)
        for name, values in list(scores.items())[:8]:
            ax.hist(values, bins=bins, alpha=0.5, label=name[:40])
        ax.set_title(f"FEWL per answer: {_label(run)}", fontsize=9)
        ax.set_ylabel("answers", fontsize=8)
        ax.set_xlabel(f"FEWL ({_results(run).divergence}); higher = less hallucination",
                      fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return html + figure(fig, "FEWL score distributions")


def _accuracy_cell(cell: AccuracyCell | None) -> str | None:
    if cell is None or cell.accuracy != cell.accuracy:
        return None
    text = f"{100 * cell.accuracy:.1f}"
    return text + (f" ± {100 * cell.std:.1f}" if cell.std is not None else "")


def _ablation(run: RunDir, summary: FewlValidation) -> str:
    """Table 1's layout: a row per variant, a column per comparison × divergence (%)."""
    validation = summary.comparisons
    divergences = [d for d in ("tv", "js", "kl") if d in next(iter(validation.values())).cells]
    headers = ["variant"] + [f"{c} · {d}" for c in validation for d in divergences]
    rows = []
    for variant, title in _VARIANT_NAMES.items():
        legacy = [old for old, new in LEGACY_VARIANTS.items() if new == variant]
        cells: list[str | None] = []
        for comparison in validation.values():
            for d in divergences:
                found = comparison.cells[d]
                cell = found.get(variant) or next((found[o] for o in legacy if o in found), None)
                cells.append(_accuracy_cell(cell))
        if any(c is not None for c in cells):
            rows.append([title, *cells])
    counts = "; ".join(
        f"{esc(c)}: n = {v.cells[divergences[0]]['fewl'].n}, identical skipped "
        f"{v.identical_skipped}" for c, v in validation.items())
    repeats = summary.repeats
    spread = f"mean ± sample std over {repeats} repeats; " if repeats > 1 else ""
    return (f"<h3>Measurement accuracy (%): {esc(_label(run))}</h3>" + table(headers, rows) +
            f"<p class='muted'>share of questions where the better answer scores higher (ties ½), "
            f"{spread}{counts}</p>")


def _figure_four(run: RunDir) -> str:
    """Figure 4: per reference, agreement with the IW and CO answers (boxes over questions),
    and the distribution of its softmax expertise λ across questions."""
    samples = map(FewlRecord.from_json, run.samples())  # one at a time: runs can be large
    names: list[str] = []
    wrong: dict[str, list[float]] = {}
    corrected: dict[str, list[float]] = {}
    weights: dict[str, list[float]] = {}
    for s in samples:
        iw, co = s.extra.get("agreement_wrong") or [], s.extra.get("agreement_corrected") or []
        for j, name in enumerate(s.reference_models):
            if name not in names:
                names.append(name)
            for target, values in ((wrong, iw), (corrected, co), (weights, s.weights)):
                value = values[j] if j < len(values) else None
                if isinstance(value, int | float):
                    target.setdefault(name, []).append(float(value))
    if not wrong and not weights:
        return ""
    names = names[:12]
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    positions = np.arange(len(names))
    for offset, data, label in ((-0.18, wrong, "IW"), (0.18, corrected, "CO")):
        boxes = [data.get(n, []) for n in names]
        shown = [k for k, b in enumerate(boxes) if b]
        if shown:
            parts = left.boxplot([boxes[k] for k in shown], positions=positions[shown] + offset,
                                 widths=0.32, patch_artist=True, manage_ticks=False)
            for box in parts["boxes"]:
                box.set_facecolor("#d62728" if label == "IW" else "#2ca02c")
                box.set_alpha(0.5)
            left.plot([], [], color="#d62728" if label == "IW" else "#2ca02c", label=label)
    left.set_xticks(positions, [n[-24:] for n in names], rotation=30, ha="right", fontsize=7)
    left.set_ylabel("mean SIM(h_j(x), ·) over the pairs", fontsize=8)
    left.set_title("Agreement with intentionally wrong (IW) and corrected (CO) answers",
                   fontsize=9)
    left.legend(fontsize=7)
    bins = np.linspace(0.0, 1.0, 21)
    for name in names:
        if weights.get(name):
            right.hist(weights[name], bins=bins, alpha=0.5, label=name[-24:])
    right.set_xlabel("softmax expertise λ_j(x)", fontsize=8)
    right.set_ylabel("questions", fontsize=8)
    right.set_title("Expertise weights across questions", fontsize=9)
    right.legend(fontsize=7)
    fig.tight_layout()
    return (f"<h3>Figure 4: reference expertise: {esc(_label(run))}</h3>" +
            figure(fig, "agreement with IW and CO answers and the expertise distribution"))


def _figures_two_three(run: RunDir, figures: Figures) -> str:
    """Figure 2 (neighbours' gold answers judged for each question) and Figure 3 (reference
    answers rated 0/1/2), from a validate run given --judge."""
    two, three = figures.figure2, figures.figure3.references
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    counts = two.histogram
    left.bar(range(len(counts)), counts, color="#1f77b4")
    left.set_xticks(range(len(counts)))
    left.set_xlabel(f"neighbours' gold answers judged correct (of {two.k})", fontsize=8)
    left.set_ylabel("questions", fontsize=8)
    left.set_title(f"Figure 2: mismatched answers judged by {two.judge}"[:80], fontsize=9)
    names = list(three)[:12]
    bottom = np.zeros(len(names))
    for rating, colour in ((0, "#d62728"), (1, "#ff7f0e"), (2, "#2ca02c")):
        values = np.array([three[n].counts[rating] for n in names], dtype=np.float64)
        right.bar(range(len(names)), values, bottom=bottom, color=colour, label=f"rated {rating}")
        bottom += values
    right.set_xticks(range(len(names)), [n[-24:] for n in names], rotation=30, ha="right",
                     fontsize=7)
    right.set_ylabel("reference answers", fontsize=8)
    right.set_title("Figure 3: reference answers rated 0 / 1 / 2", fontsize=9)
    right.legend(fontsize=7)
    fig.tight_layout()
    rows = [[n, *three[n].counts, three[n].unrated, three[n].mean] for n in names]
    return (f"<h3>Figures 2 and 3: {esc(_label(run))}</h3>" +
            figure(fig, "neighbours' answers judged, and reference ratings") +
            table(["reference", "rated 0", "rated 1", "rated 2", "unrated", "mean"], rows) +
            f"<p class='muted'>Figure 2: {two.n_questions} questions judged, mean "
            f"{fmt(two.mean_correct)} of {two.k} neighbours' gold answers accepted; the "
            f"judge sees each question's own gold answer as the reference. Figure 3: each "
            f"reference answer rated 0 (wrong), 1 (partly right) or 2 (right) by the same judge."
            f"</p>")


def _sample_level(level: SampleLevel | None) -> str:
    if level is None:
        return ""
    rows = [[f"{p.a} vs {p.b}", p.with_penalty.agree, p.without_penalty.agree,
             p.with_penalty.n, p.with_penalty.metric_ties] for p in level.pairs]
    return ("<h4>Sample-level ranking (Table 5)</h4>" + table(
        ["answers compared", "agree, with penalty", "agree, without penalty",
         "questions compared", "metric ties"], rows) +
        f"<p class='muted'>Questions where the answer preferred by the TQA metric also gets the "
        f"higher score; metric: {esc(level.metric)}; without penalty = expertise λ, no "
        f"penalty.</p>")


def _ranking(run: RunDir, ranking: FewlRanking) -> str:
    labels = ranking.labels
    errors = labels.error_rate if labels is not None else {}
    by_fewl = {name: i + 1 for i, name in enumerate(ranking.rank_by_fewl)}
    by_error = {name: i + 1 for i, name in
                enumerate(labels.rank_by_error if labels is not None else ())}
    means = ranking.mean_fewl
    rows = [[name, means[name], by_fewl[name], errors.get(name), by_error.get(name)]
            for name in ranking.rank_by_fewl]
    html = f"<h3>Model ranking: {esc(_label(run))}</h3>" + table(
        ["model", "mean FEWL", "rank by FEWL", "true error rate", "rank by error"], rows)
    html += _sample_level(ranking.sample_level)
    if labels is not None:
        html += (f"<p>Spearman ρ between mean FEWL and accuracy: {fmt(labels.spearman)} "
                 f"(p {fmt(labels.spearman_p)}, {labels.n_labelled} labelled questions). "
                 f"<span class='muted'>Correct = {esc(labels.match)}.</span></p>")
        unscored = [n for n in errors if means[n] is None]
        if unscored:
            html += (f"<p class='muted'>No FEWL score, left out of ρ and the plot: "
                     f"{esc(', '.join(unscored))}.</p>")
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(5, 3.5))
        names = [n for n in errors if n not in unscored]
        ax.scatter([errors[n] for n in names], [means[n] for n in names])
        for n in names:
            ax.annotate(n[:30], (errors[n], means[n]), fontsize=7)
        ax.set_title("Mean FEWL against the true error rate, one point per model", fontsize=9)
        ax.set_xlabel("true error rate")
        ax.set_ylabel("mean FEWL (higher = less hallucination)")
        html += figure(fig, "mean FEWL vs true error rate")
    return html


def _selection(run: RunDir, sel: SelectionSummary) -> str:
    rows: list[list[Any]] = [["selected answers: mean FEWL", sel.mean], ["questions", sel.n]]
    if sel.n_labelled:
        rows += [["accuracy first candidate", sel.accuracy_first_candidate],
                 ["accuracy selected", sel.accuracy_selected]]
    return (f"<h3>Selection: {esc(_label(run))}</h3>" + table(["", "value"], rows) +
            "<p class='muted'>exports: icl_prompts.jsonl, finetune.jsonl</p>")


_DETAIL = ("references", "reference_models", "lambda", "expertise", "pairs", "pairs_error",
           "neighbours", "neighbour_cosine", "answers")


class ItemRow(TypedDict):
    """One answer's row in the item table (``_d``: what its drill-down shows)."""

    _run: int
    run: str
    id: str
    source: str
    question: str
    answer: str | None
    fewl: float | None
    truthfulness: float | None
    penalty: float | None
    scored: bool
    pairs_failed: bool
    length: int | None
    _d: dict[str, Any]


def _rows(index: int, label: str, s: FewlRecord,
          questions: Mapping[str, str] | None) -> list[ItemRow]:
    """A record's rows, one per answer source, with what the drill-down shows (the
    neighbours' questions when ``questions`` maps their ids)."""
    stored = s.to_json()
    detail = {k: stored.get(k) for k in _DETAIL}
    if questions is not None:
        detail["neighbour_questions"] = [questions.get(str(n)) for n in s.neighbours]
    rows: list[ItemRow] = []
    for source, entry in s.answers.items():
        answer = entry.answer
        rows.append({
            "_run": index, "run": label, "id": s.id, "source": source,
            "question": s.question, "answer": answer, "fewl": entry.fewl,
            "truthfulness": entry.truthfulness, "penalty": entry.penalty,
            "scored": bool(s.scored), "pairs_failed": bool(s.pairs_failed),
            "length": None if answer is None else len(answer), "_d": detail,
        })
    return rows


def _item_rows(runs: list[RunDir]) -> list[ItemRow]:
    """One row per question and answer source, with what the drill-down shows."""
    rows: list[ItemRow] = []
    for index, run in enumerate(runs):
        samples = read_records(FewlRecord, run.samples())
        questions = {s.id: s.question for s in samples}
        for s in samples:
            rows += _rows(index, _label(run), s, questions)
    return rows


_SOURCE = "_source"
"""Key of the answer source a part of a split record stands for."""


def _by_source(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored record as one part per answer source, its FEWL on top (to sort and pick by)."""
    answers = raw.get("answers")
    if not isinstance(answers, dict):
        return []
    return [raw | {_SOURCE: source, "fewl": entry.get("fewl") if isinstance(entry, dict) else None}
            for source, entry in answers.items()]


def _items(runs: list[RunDir]) -> str:
    columns = [Column("run", "run", "cat"), Column("id", "id"),
               Column("source", "answers from", "cat"), Column("question", "question"),
               Column("answer", "answer"),
               Column("fewl", "FEWL", "num", help="T − L; higher = less hallucination"),
               Column("truthfulness", "T", "num", help="λ-weighted agreement with the references"),
               Column("penalty", "L", "num", help="agreement with neighbours' references"),
               Column("scored", "scored", "cat"), Column("pairs_failed", "pairs failed", "cat"),
               Column("length", "answer length", "num", digits=0, help="characters")]
    if len(runs) == 1:
        columns = columns[1:]
    rows = sum(r.n_questions * max(len(r.models), 1) for r in map(_results, runs))
    if too_large(rows):
        return _paged(runs, columns)
    return item_table("fewl-items", columns, _item_rows(runs), drill="fewl", range_key="fewl")


def _paged(runs: list[RunDir], columns: list[Column]) -> str:
    """Too many answers for one file: the lowest FEWL, a sample and the unscored here, every
    answer beside (the drill-down names neighbours by id only)."""
    labels = [_label(run) for run in runs]

    def row_of(index: int, part: dict[str, Any]) -> ItemRow:
        source = str(part[_SOURCE])
        record = FewlRecord.from_json({k: v for k, v in part.items() if k not in (_SOURCE, "fewl")})
        return next(r for r in _rows(index, labels[index], record, None) if r["source"] == source)

    paged, bounded, shown = paged_items(
        "fewl-all", columns, set(), runs, row_of, key="fewl", drill="fewl",
        is_error=lambda part: part.get("fewl") is None, split=_by_source, high_is_worse=False)
    why = Column("shown", "shown as", "cat", help="lowest FEWL, a random sample, or unscored")
    return (item_table("fewl-items", [why, *shown], bounded, drill="fewl", range_key="fewl",
                       caption=f"{len(bounded)} answers: the lowest FEWL, a random sample and "
                               "every unscored answer.")
            + "<h4>All answers</h4>" + paged)


def _ranks(runs: list[RunDir]) -> str:
    """Every answer source of every run ranked by mean FEWL, beside its true error rate."""
    rows = []
    for run in runs:
        results = _results(run)
        models = results.models
        labels = results.ranking.labels if results.ranking is not None else None
        errors = labels.error_rate if labels is not None else {}
        scored = sorted((n for n, m in models.items() if m.mean is not None),
                        key=lambda n: -(models[n].mean or 0.0))
        by_error = {n: i + 1 for i, n in
                    enumerate(labels.rank_by_error if labels is not None else ())}
        for name, m in models.items():
            rows.append({"run": _label(run), "source": name, "mean": m.mean,
                         "stderr": m.stderr, "n": m.n,
                         "rank": scored.index(name) + 1 if name in scored else None,
                         "error_rate": errors.get(name), "rank_error": by_error.get(name)})
    columns = [Column("run", "run", "cat"), Column("source", "answers from", "cat"),
               Column("mean", "mean FEWL", "num"), Column("stderr", "± s.e.", "num"),
               Column("n", "questions", "num", digits=0),
               Column("rank", "rank by FEWL", "num", digits=0),
               Column("error_rate", "true error rate", "num"),
               Column("rank_error", "rank by error", "num", digits=0)]
    if not any(r["error_rate"] is not None for r in rows):
        columns = [c for c in columns if c.key not in ("error_rate", "rank_error")]
    if len(runs) == 1:
        columns = columns[1:]
    rows.sort(key=lambda r: (r["run"], r["rank"] is None, r["rank"] or 0))
    return item_table("fewl-ranks", columns, rows, page_size=100)


def section(runs: list[RunDir]) -> str:
    """HTML for a group of FEWL runs."""
    parts = ["<h3>Settings</h3>", _settings(runs), "<h3>Score distributions</h3>",
             _distributions(runs)]
    for run in runs:
        results = _results(run)
        if results.validation is not None:
            parts.append(_ablation(run, results.validation))
            if results.validation.figures is not None:
                parts.append(_figures_two_three(run, results.validation.figures))
        parts.append(_figure_four(run))
        if results.ranking is not None:
            parts.append(_ranking(run, results.ranking))
        if results.selection is not None:
            parts.append(_selection(run, results.selection))
    parts += ["<h3>Models ranked by mean FEWL</h3>", _ranks(runs), "<h3>Every answer</h3>",
              _items(runs)]
    return "".join(parts)
