"""Report section for FEWL mitigation runs (``fewl icl`` / ``fewl finetune``): the win-rate
table per selection rule, training figures, and example answer pairs with the judge's replies."""

from __future__ import annotations

from typing import Any

from veracity.methods.fewl.mitigation import paper_report as paper
from veracity.report.html import esc, fmt, table
from veracity.store import RunDir


def _pct(share: dict[str, Any]) -> str:
    if share["rate"] is None or share["rate"] != share["rate"]:  # no pair (NaN, null in JSON)
        return "—"
    low, high = share["ci95"]
    return f"{fmt(100 * share['rate'], 1)}% [{fmt(100 * low, 0)}–{fmt(100 * high, 0)}]"


def _rows(run: RunDir) -> str:
    r = run.results
    if not r["rows"]:  # icl without a zero-shot arm: Table 6's head-to-head rows only
        return ""
    versus = "ICL" if r["mode"] == "icl" else "fine-tuned"
    rows = [[row["rule"], row["n"], _pct(row["candidate_better"]), _pct(row["base_better"]),
             _pct(row["inconsistent_or_tie"]), f"{row['unparseable']} / {row['replies']}",
             None if row["accuracy"] is None else row["accuracy"]["mean"],
             None if "paper_win_rate" not in row else
             f"{_pct(row['paper_win_rate'])} of {row['paper_win_rate']['decided']}"]
            for row in r["rows"]]
    base = r.get("base_accuracy")
    caption = (f"<p>{esc(r['mode'])} · {esc(r['dataset'])} · model {esc(r['model'])} · judge "
               f"{esc(r['judge'])} · {r['n_train']} training / {r['n_test']} test questions"
               + (f" · {r['examples']} examples" if "examples" in r else "")
               + (f" · {esc(r['base_name'])} accuracy {fmt(base['mean'])}" if base else "")
               + f" ({esc(run.path.name)})</p>")
    return caption + table(["selected by", "pairs", f"{versus} better (95% CI)",
                            f"{r['base_name']} better", "inconsistent / tie", "unparseable replies",
                            "accuracy", "win rate over decided pairs (C.10)"], rows)


def _training(run: RunDir) -> str:
    training = run.results.get("training")
    if not training:
        return ""
    rows = [[rule, t["examples"], t["steps"], t["seconds"], t["train_loss"], t["adapter"]]
            for rule, t in training.items()]
    return table(["selected by", "examples", "steps", "seconds", "final loss", "adapter"], rows)


def section(runs: list[RunDir]) -> str:
    parts = ["<p class='muted'>A rule wins a pair only when the judge prefers its answer in both "
             "presentation orders; a tie, a change of mind or an unparseable reply counts as "
             "inconsistent / tie.</p>"]
    for run in runs:
        parts += [paper.head_to_head(run), _rows(run), _training(run), paper.human(run),
                  paper.examples(run)]
    return "".join(parts)
