"""The printed layouts of FEWL §5: Table 6 (ICL, head to head) and Table 7 (fine-tuning, the
paper's win rate per selection rule)."""

from __future__ import annotations

from typing import Any

from veracity.cli.output import echo

NAMES = {"fewl": "FEWL", "baseline": "baseline", "gold": "ground truth", "zero-shot": "zero-shot",
         "base": "base"}


def _pct(share: dict[str, Any]) -> str:
    if share["rate"] is None or share["rate"] != share["rate"]:
        return "—"
    low, high = share["ci95"]
    return f"{100 * share['rate']:.1f}% [{100 * low:.0f}-{100 * high:.0f}]"


def _acc(value: dict[str, Any] | None) -> str:
    return "—" if value is None else f"{value['mean']:.3f}"


def print_table6(results: dict[str, Any]) -> None:
    """Table 6's layout: % baseline better / % FEWL better / % tie, the judge asked in both
    orders, and the paper's win rate (wins over decided pairs)."""
    rows = results.get("head_to_head") or []
    if not rows:
        return
    echo(f"\nTable 6 layout: head to head, judge in both orders ({results['n_test']} test "
         f"questions; {results['examples']} examples each from a pool of {results['pool_size']} "
         f"training questions, pool '{results['pool']}')")
    echo(f"{'comparison':<26} {'% base better':>20} {'% rule better':>20} {'% tie':>20} "
         f"{'unparseable':>12} {'win rate (decided)':>26}")
    for row in rows:
        name = f"{NAMES.get(row['candidate'], row['candidate'])} vs " \
               f"{NAMES.get(row['base'], row['base'])}"
        paper = row["paper_win_rate"]
        echo(f"{name:<26} {_pct(row['base_better']):>20} {_pct(row['candidate_better']):>20} "
             f"{_pct(row['inconsistent_or_tie']):>20} {row['unparseable']:>5}/{row['replies']:<6}"
             f" {_pct(paper) + ' of ' + str(paper['decided']):>26}")
    echo("tie: the judge was not sure, changed its mind with the order, or gave no parseable "
         "verdict; win rate (decided): the rule's wins over the pairs the judge decided (C.10)")
    accuracy = results.get("accuracy") or {}
    if any(v is not None for v in accuracy.values()):
        echo("accuracy on labels: " + ", ".join(
            f"{NAMES.get(k, k)} {_acc(v)}" for k, v in accuracy.items()))


def print_table7(results: dict[str, Any]) -> None:
    """Table 7's layout: one column per selection rule, the fine-tuned model's win rate over
    the base on the pairs the judge decided (C.10), then the full breakdown."""
    rows = results["rows"]
    head = " ".join(f"{NAMES.get(r['rule'], r['rule']):>22}" for r in rows)
    echo(f"\nTable 7 layout: fine-tuned on the answers each rule picks vs the {results['base_name']} "
         f"model ({results['n_test']} test questions, judge in both orders)")
    echo(f"{'':<26} {head}")
    echo(f"{'win rate (decided, C.10)':<26} " + " ".join(
        f"{_pct(r['paper_win_rate']):>22}" for r in rows))
    echo(f"{'decided pairs':<26} " + " ".join(
        f"{r['paper_win_rate']['decided']:>22}" for r in rows))
    # an empty answer loses and identical answers tie without the judge being asked
    echo(f"{'not asked (empty/same)':<26} " + " ".join(f"{r['not_asked']:>22}" for r in rows))
    for label, key in (("% fine-tuned better", "candidate_better"), ("% base better",
                       "base_better"), ("% tie / inconsistent", "inconsistent_or_tie")):
        echo(f"{label:<26} " + " ".join(f"{_pct(r[key]):>22}" for r in rows))
    echo(f"{'accuracy on labels':<26} " + " ".join(f"{_acc(r['accuracy']):>22}" for r in rows))
