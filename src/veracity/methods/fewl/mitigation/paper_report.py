"""The report's view of FEWL §5 as published: Table 6's head-to-head rows, the human judges'
verdicts beside the model judge's, and example answers with the judge's verdict in each order."""

from __future__ import annotations

from typing import Any

from veracity.data.jsonl import load_json_file
from veracity.methods.fewl.mitigation.annotation.core import HUMAN_FILE, pair_view
from veracity.methods.fewl.mitigation.judge import Share
from veracity.methods.fewl.mitigation.records import Comparison, MitigationRecord, MitigationResults
from veracity.report.html import esc, fmt, table
from veracity.store import RunDir

EXAMPLES = 4
"""Questions shown per run."""
NAMES = {"fewl": "FEWL", "baseline": "baseline", "gold": "ground truth"}


def _pct(share: dict[str, Any]) -> str:
    if share["rate"] is None or share["rate"] != share["rate"]:  # no pair (NaN, null in JSON)
        return "—"
    low, high = share["ci95"]
    return f"{fmt(100 * share['rate'], 1)}% [{fmt(100 * low, 0)}–{fmt(100 * high, 0)}]"


def _name(arm: str) -> str:
    return NAMES.get(arm, arm)


def pct(share: Share) -> str:
    """A share in % with its 95% CI; a dash where there was no pair."""
    if share.rate is None or share.rate != share.rate:  # no pair (NaN, null in JSON)
        return "—"
    low, high = share.ci95
    return f"{fmt(100 * share.rate, 1)}% [{fmt(_times_100(low), 0)}–{fmt(_times_100(high), 0)}]"


def _times_100(value: float | None) -> float | None:
    return None if value is None else 100 * value


def head_to_head(run: RunDir, r: MitigationResults) -> str:
    """Table 6: % base better / % rule better / % tie per comparison, and the paper's rate."""
    if r.icl is None or not r.icl.head_to_head:
        return ""
    body = [[f"{_name(x.candidate)} vs {_name(x.base)}", x.rates.n, pct(x.rates.base_better),
             pct(x.rates.candidate_better), pct(x.rates.inconsistent_or_tie),
             f"{x.rates.unparseable} / {x.rates.replies}",
             f"{pct(x.rates.paper_win_rate)} of {x.rates.paper_win_rate.decided}"]
            for x in r.icl.head_to_head]
    s = r.icl.settings
    caption = (f"<p>Table 6 layout: icl · {esc(r.dataset)} · model {esc(r.model)} · judge "
               f"{esc(r.judge)} · {s['examples']} examples per question ({esc(s['format'])}) "
               f"from a pool of {r.icl.pool_size} of {r.n_train} training questions (pool "
               f"{esc(s['pool'])}) · {r.n_test} test questions ({esc(run.path.name)})</p>")
    return caption + table(["comparison", "pairs", "% base better (95% CI)", "% rule better",
                            "% tie", "unparseable replies", "win rate over decided pairs (C.10)"],
                           body)


def human(run: RunDir) -> str:
    """The raters' verdicts (human.json, from ``fewl annotate import``), if any."""
    path = run.path / HUMAN_FILE
    if not path.is_file():
        return ""
    h = load_json_file(path, "human ratings")
    body = [[f"{_name(x['candidate'])} vs {_name(x['base'])}", x["n"], _pct(x["base_better"]),
             _pct(x["candidate_better"]), _pct(x["tie"]),
             f"{_pct(x['paper_win_rate'])} of {x['paper_win_rate']['decided']}",
             _agreement(x["judge_agreement"])]
            for x in h["rows"]]
    raters = ", ".join(f"{esc(x['rater'])} ({x['n_rated']})" for x in h["raters"])
    return (f"<h4>Human judges</h4><p>raters: {raters} · Fleiss' kappa {fmt(h['fleiss_kappa'])} "
            f"over {h['kappa_pairs']} pairs rated by everyone · raw agreement "
            f"{fmt(h['raw_agreement'])} · each pair goes to the raters' majority (a shared top "
            "is a tie)</p>"
            + table(["comparison", "pairs", "% base better", "% rule better", "% tie",
                     "win rate over decided pairs", "agrees with the model judge"], body))


def _agreement(agreement: dict[str, Any]) -> str:
    """How often the raters' majority agrees with the model judge; no rate when no pair counts."""
    rate = agreement["rate"]
    return f"{'—' if rate is None else fmt(100 * rate, 1) + '%'} of {agreement['n']}"


def _order(entry: Comparison, first: bool) -> str:
    judged = entry.judged
    reply = judged.first_reply if first else judged.second_reply
    verdict = judged.first if first else judged.second
    if reply is None:
        return "not asked"
    shown = (_name(entry.candidate), _name(entry.base))
    a, b = shown if first else shown[::-1]
    picked = {"A": a, "B": b, "tie": "not sure"}.get(verdict or "", "unparseable")
    return f"A = {a}, B = {b}: {picked} (reply {reply!r})"


def examples(run: RunDir) -> str:
    """Per question: each arm's answer, then every comparison with the judge's verdict in
    both orders and the outcome."""
    blocks = []
    for k, raw in enumerate(run.samples()):
        if k >= EXAMPLES:
            break
        sample = MitigationRecord.from_json(raw)
        answers, judged = pair_view(sample)
        rows = [[_name(arm), text] for arm, text in answers.items()]
        verdicts = [[f"{_name(j.candidate)} vs {_name(j.base)}", _order(j, True),
                     _order(j, False), j.judged.outcome] for j in judged]
        blocks.append(f"<p><b>{esc(sample.question)}</b></p>"
                      + table(["answer by", "answer"], rows)
                      + table(["comparison", "judge, first order", "judge, second order",
                               "outcome"], verdicts))
    return "<h4>Example answers and verdicts</h4>" + "".join(blocks) if blocks else ""
