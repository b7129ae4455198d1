"""Report section for FEWL mitigation runs (``fewl icl`` / ``fewl finetune``): the win-rate
table per selection rule, training figures, and example answer pairs with the judge's replies."""

from __future__ import annotations

from veracity.methods.fewl.mitigation import paper_report as paper
from veracity.methods.fewl.mitigation.records import MitigationResults
from veracity.report.html import esc, fmt, table
from veracity.store import RunDir


def _rows(run: RunDir, r: MitigationResults) -> str:
    if not r.rows:  # icl without a zero-shot arm: Table 6's head-to-head rows only
        return ""
    versus = "ICL" if r.mode == "icl" else "fine-tuned"
    rows = [[row.rule, row.rates.n, paper.pct(row.rates.candidate_better),
             paper.pct(row.rates.base_better), paper.pct(row.rates.inconsistent_or_tie),
             f"{row.rates.unparseable} / {row.rates.replies}",
             None if row.accuracy is None else row.accuracy.mean,
             f"{paper.pct(row.rates.paper_win_rate)} of {row.rates.paper_win_rate.decided}"]
            for row in r.rows]
    base = r.base_accuracy
    caption = (f"<p>{esc(r.mode)} · {esc(r.dataset)} · model {esc(r.model)} · judge "
               f"{esc(r.judge)} · {r.n_train} training / {r.n_test} test questions"
               + (f" · {r.icl.settings['examples']} examples" if r.icl is not None else "")
               + (f" · {esc(r.base_name)} accuracy {fmt(base.mean)}" if base else "")
               + f" ({esc(run.path.name)})</p>")
    return caption + table(["selected by", "pairs", f"{versus} better (95% CI)",
                            f"{r.base_name} better", "inconsistent / tie", "unparseable replies",
                            "accuracy", "win rate over decided pairs (C.10)"], rows)


def _training(r: MitigationResults) -> str:
    if r.finetune is None or not r.finetune.training:
        return ""
    rows = [[rule, t.examples, t.steps, t.seconds, t.train_loss, t.adapter]
            for rule, t in r.finetune.training.items()]
    return table(["selected by", "examples", "steps", "seconds", "final loss", "adapter"], rows)


def section(runs: list[RunDir]) -> str:
    parts = ["<p class='muted'>A rule wins a pair only when the judge prefers its answer in both "
             "presentation orders; a tie, a change of mind or an unparseable reply counts as "
             "inconsistent / tie.</p>"]
    for run in runs:
        results = MitigationResults.from_json(run.results)
        parts += [paper.head_to_head(run, results), _rows(run, results), _training(results),
                  paper.human(run), paper.examples(run)]
    return "".join(parts)
