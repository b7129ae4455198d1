"""The printed layouts of FEWL §5: Table 6 (ICL, head to head) and Table 7 (fine-tuning, the
paper's win rate per selection rule)."""

from __future__ import annotations

from veracity.cli.output import echo
from veracity.methods.fewl.mitigation.judge import Share
from veracity.methods.fewl.mitigation.records import Accuracy, MitigationResults

NAMES = {"fewl": "FEWL", "baseline": "baseline", "gold": "ground truth", "zero-shot": "zero-shot",
         "base": "base"}


def pct(share: Share) -> str:
    """A share in % with its 95% CI; a dash where there was no pair."""
    if share.rate is None or share.rate != share.rate:
        return "—"
    low, high = share.ci95
    return f"{100 * share.rate:.1f}% [{100 * (low or 0.0):.0f}-{100 * (high or 0.0):.0f}]"


def acc_text(value: Accuracy | None) -> str:
    return "—" if value is None or value.mean is None else f"{value.mean:.3f}"


def print_table6(results: MitigationResults) -> None:
    """Table 6's layout: % baseline better / % FEWL better / % tie, the judge asked in both
    orders, and the paper's win rate (wins over decided pairs)."""
    icl = results.icl
    if icl is None or not icl.head_to_head:
        return
    echo(f"\nTable 6 layout: head to head, judge in both orders ({results.n_test} test "
         f"questions; {icl.settings['examples']} examples each from a pool of {icl.pool_size} "
         f"training questions, pool '{icl.settings['pool']}')")
    echo(f"{'comparison':<26} {'% base better':>20} {'% rule better':>20} {'% tie':>20} "
         f"{'unparseable':>12} {'win rate (decided)':>26}")
    for row in icl.head_to_head:
        name = f"{NAMES.get(row.candidate, row.candidate)} vs {NAMES.get(row.base, row.base)}"
        r = row.rates
        paper = r.paper_win_rate
        echo(f"{name:<26} {pct(r.base_better):>20} {pct(r.candidate_better):>20} "
             f"{pct(r.inconsistent_or_tie):>20} {r.unparseable:>5}/{r.replies:<6}"
             f" {pct(paper) + ' of ' + str(paper.decided):>26}")
    echo("tie: the judge was not sure, changed its mind with the order, or gave no parseable "
         "verdict; win rate (decided): the rule's wins over the pairs the judge decided (C.10)")
    if any(v is not None for v in icl.accuracy.values()):
        echo("accuracy on labels: " + ", ".join(
            f"{NAMES.get(k, k)} {acc_text(v)}" for k, v in icl.accuracy.items()))


def print_table7(results: MitigationResults) -> None:
    """Table 7's layout: one column per selection rule, the fine-tuned model's win rate over
    the base on the pairs the judge decided (C.10), then the full breakdown."""
    rows = results.rows
    head = " ".join(f"{NAMES.get(r.rule, r.rule):>22}" for r in rows)
    echo(f"\nTable 7 layout: fine-tuned on the answers each rule picks vs the {results.base_name} "
         f"model ({results.n_test} test questions, judge in both orders)")
    echo(f"{'':<26} {head}")
    echo(f"{'win rate (decided, C.10)':<26} " + " ".join(
        f"{pct(r.rates.paper_win_rate):>22}" for r in rows))
    echo(f"{'decided pairs':<26} " + " ".join(
        f"{r.rates.paper_win_rate.decided:>22}" for r in rows))
    # an empty answer loses and identical answers tie without the judge being asked
    echo(f"{'not asked (empty/same)':<26} " + " ".join(f"{r.rates.not_asked:>22}" for r in rows))
    for label, shares in (("% fine-tuned better", [r.rates.candidate_better for r in rows]),
                          ("% base better", [r.rates.base_better for r in rows]),
                          ("% tie / inconsistent", [r.rates.inconsistent_or_tie for r in rows])):
        echo(f"{label:<26} " + " ".join(f"{pct(share):>22}" for share in shares))
    echo(f"{'accuracy on labels':<26} " + " ".join(f"{acc_text(r.accuracy):>22}" for r in rows))
