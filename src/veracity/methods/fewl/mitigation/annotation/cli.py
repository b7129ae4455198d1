"""``veracity fewl annotate export|import``: human judges for ``fewl icl`` / ``fewl finetune``
runs (blind pairwise rating sheets, agreement between raters)."""

from __future__ import annotations

from pathlib import Path

import click

from veracity.cli.options import SEED, handles_errors
from veracity.cli.output import echo
from veracity.data.jsonl import load_json_file
from veracity.errors import ConfigError, DataError
from veracity.methods.fewl.mitigation.annotation.core import (
    HUMAN_FILE,
    SHEET_FILE,
    analyse_pairs,
    export_pairs,
    read_choices,
)
from veracity.methods.fewl.mitigation.records import MitigationRecord
from veracity.methods.fewl.mitigation.tables import NAMES
from veracity.methods.fewl.validation.reference_sheet import HUMAN_FILE as REFERENCE_RATINGS
from veracity.methods.fewl.validation.reference_sheet import SHEET_FILE as REFERENCE_SHEET
from veracity.methods.fewl.validation.reference_sheet import (
    count_ratings,
    export_references,
    read_reference_ratings,
    reference_rows,
)
from veracity.records import read_records
from veracity.report import build_report
from veracity.store import RunDir

RUN = click.Path(path_type=Path, exists=True, file_okay=False)


def _mitigation(run: Path) -> RunDir:
    directory = RunDir.open(run)
    if directory.method != "mitigation":
        raise ConfigError(f"{run} is a {directory.method} run, not fewl icl / fewl finetune")
    return directory


@click.group("annotate")
def annotate() -> None:
    """Human judges for fewl icl / fewl finetune runs: blind pairwise sheets out, choices in."""


@annotate.command("export")
@click.argument("run", type=RUN)
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Sheet to write: .csv (spreadsheet) or .html (rate in a browser, save CSV).")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the random order of pairs and sides (the same seed, the same sheet).")
@click.option("--references", is_flag=True,
              help="Instead: rate the reference answers of a fewl run 0 / 1 / 2 (Figure 3 by "
                   "people; a .csv sheet).")
@handles_errors
def export_cmd(run: Path, out: Path, seed: int, references: bool) -> None:
    """Write every judged answer pair of RUN as a blind rating sheet (random order and sides);
    with --references, a 0/1/2 sheet of a fewl run's reference answers."""
    if references:
        directory = _fewl(run)
        refs = export_references(list(directory.samples()), out)
        directory.write_json(REFERENCE_SHEET, {"sheet": str(out), "n_rows": len(refs),
                                               "checks": {r.item_id: r.answer_check
                                                          for r in refs}})
        echo(f"{len(refs)} reference answers -> {out}")
        return
    directory = _mitigation(run)
    rows, key = export_pairs(read_records(MitigationRecord, directory.samples()), out, seed,
                             title=f"Which answer is better? ({run.name})")
    directory.write_json(SHEET_FILE, {"sheet": str(out), **key})
    echo(f"{len(rows)} answer pairs -> {out} (key: {run / SHEET_FILE})")


@annotate.command("import")
@click.argument("run", type=RUN)
@click.argument("ratings", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the bootstrap intervals.")
@click.option("--references", is_flag=True,
              help="Instead: read 0 / 1 / 2 sheets of a fewl run's reference answers.")
@handles_errors
def import_cmd(run: Path, ratings: tuple[Path, ...], seed: int, references: bool) -> None:
    """Join raters' CSVs for RUN: the raters' verdicts per comparison beside the judge's,
    Fleiss' kappa and raw agreement; written to human.json and the report. With --references,
    the count of each rating per reference beside the judge's (Figure 3)."""
    if references:
        _import_references(run, ratings)
        return
    directory = _mitigation(run)
    if not (run / SHEET_FILE).is_file():
        raise DataError(f"{run / SHEET_FILE} is missing: export a sheet first")
    key = load_json_file(run / SHEET_FILE)
    stems = [p.stem for p in ratings]
    raters = {(p.stem if stems.count(p.stem) == 1 else str(p)): read_choices(p, key)
              for p in ratings}
    result = analyse_pairs(key, raters, seed)
    directory.write_json(HUMAN_FILE, result.to_json())
    echo(", ".join(f"{name} ({n})" for name, n in result.raters.items())
         + f"; rated pairs {result.n_rated} of {result.n_pairs}")
    echo(f"Fleiss' kappa {_num(result.fleiss_kappa)} over {result.kappa_pairs} pairs "
         f"rated by everyone; raw agreement {_num(result.raw_agreement)}")
    echo(f"{'comparison':<26} {'% base better':>14} {'% rule better':>14} {'% tie':>8} "
         f"{'win rate (decided)':>20} {'agrees with judge':>18}")
    for row in result.rows:
        name = f"{NAMES.get(row.candidate, row.candidate)} vs {NAMES.get(row.base, row.base)}"
        echo(f"{name:<26} {_pct(row.base_better.rate):>14} "
             f"{_pct(row.candidate_better.rate):>14} {_pct(row.tie.rate):>8} "
             f"{_pct(row.paper_win_rate.rate) + ' of ' + str(row.paper_win_rate.decided):>20} "
             f"{_pct(row.judge_rate) + ' of ' + str(row.judge_n):>18}")
    report = build_report([run], run / "report.html", title=f"veracity: {run.name}")
    echo(f"human verdicts: {run / HUMAN_FILE}\nreport: {report}")


def _fewl(run: Path) -> RunDir:
    directory = RunDir.open(run)
    if directory.method != "fewl":
        raise ConfigError(f"{run} is a {directory.method} run, not a fewl run")
    return directory


def _import_references(run: Path, ratings: tuple[Path, ...]) -> None:
    directory = _fewl(run)
    if not (run / REFERENCE_SHEET).is_file():
        raise DataError(f"{run / REFERENCE_SHEET} is missing: export a sheet first "
                        "(fewl annotate export RUN --references)")
    rows = reference_rows(list(directory.samples()))
    checks = {r.item_id: r.answer_check for r in rows}
    stems = [p.stem for p in ratings]
    raters = {(p.stem if stems.count(p.stem) == 1 else str(p)): read_reference_ratings(p, checks)
              for p in ratings}
    judge = (directory.results.get("figures") or {}).get("figure3")
    result = count_ratings(rows, raters, judge)
    directory.write_json(REFERENCE_RATINGS, result.to_json())
    echo(f"{'reference':<30} {'people 0/1/2':>14} {'mean':>6} {'judge 0/1/2':>14}")
    for name, entry in result.references.items():
        judged = entry.judge
        echo(f"{name[:30]:<30} {'/'.join(map(str, entry.counts)):>14} "
             f"{_num(entry.mean):>6} "
             f"{'/'.join(map(str, judged['counts'])) if judged else '—':>14}")
    echo(f"ratings: {run / REFERENCE_RATINGS}")


def _num(value: float | None) -> str:
    return "—" if value is None or value != value else f"{value:.3f}"


def _pct(rate: float | None) -> str:
    return "—" if rate is None or rate != rate else f"{100 * rate:.1f}%"
