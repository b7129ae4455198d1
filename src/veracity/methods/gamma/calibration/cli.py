"""``veracity calibrate``: gamma -> P(correct) from validated gamma runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from veracity.cli.options import handles_errors
from veracity.methods.gamma.calibration.core import describe_key
from veracity.methods.gamma.calibration.report import write_calibration_report
from veracity.methods.gamma.calibration.run import calibrate
from veracity.store import dumps

RUN = click.Path(path_type=Path, exists=True, file_okay=False)


def _num(value: Any, digits: int = 3) -> str:
    return "—" if value is None or value != value else f"{value:.{digits}f}"


@click.command("calibrate")
@click.argument("runs", nargs=-1, required=True, type=RUN)
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Calibration file to write (JSON).")
@click.option("--target-precision", type=click.FloatRange(0.0, 1.0), default=0.9, show_default=True,
              help="Share of 'trustworthy' answers that must be correct.")
@click.option("--target-recall", type=click.FloatRange(0.0, 1.0), default=0.9, show_default=True,
              help="Share of incorrect answers that 'untrustworthy' must flag.")
@click.option("--resamples", type=click.IntRange(min=10), default=200, show_default=True,
              help="Bootstrap refits for the band around the curve.")
@click.option("--holdout", type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
              default=0.5, show_default=True,
              help="Share of answers held out to measure reliability (ECE).")
@click.option("--bins", type=click.IntRange(min=1), default=10, show_default=True,
              help="Bins of the reliability diagram.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--report", "report_path", type=click.Path(path_type=Path),
              help="HTML report to write (default: the --out file with .html).")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON.")
@handles_errors
def calibrate_command(runs: tuple[Path, ...], out: Path, target_precision: float,
                      target_recall: float, resamples: int, holdout: float, bins: int, seed: int,
                      report_path: Path | None, as_json: bool) -> None:
    """Fit P(correct) as a monotone function of γ on validated gamma RUNS.

    Each RUN needs labels (veracity validate gamma RUN). One isotonic curve per model, embedder,
    form, ball and N, with bootstrap bands, verdict thresholds for the targets, and the
    expected calibration error on a held-out part. Use it with `veracity gamma --calibration`.
    """
    calibration = calibrate(list(runs), out, target_precision, target_recall, resamples, holdout,
                            bins, seed)
    report = write_calibration_report(calibration, report_path or out.with_suffix(".html"))
    if as_json:
        click.echo(dumps(calibration.to_dict(), indent=2))
        return
    for curve in calibration.curves:
        t, h = curve.thresholds, curve.holdout
        reached = "" if t["precision_reached"] else " (target precision not reached: none)"
        click.echo(f"{describe_key(curve.key)}")
        click.echo(f"  answers {curve.n}, correct {curve.n_correct} "
                   f"({_num(curve.n_correct / curve.n)}); runs: {', '.join(curve.runs)}")
        click.echo(f"  trustworthy γ < {_num(t['low'], 4)}{reached}: precision {_num(t['precision'])}"
                   f", {_num(100 * t['share_trustworthy'], 1)}% of answers")
        click.echo(f"  untrustworthy γ ≥ {_num(t['high'], 4)}: recall {_num(t['recall'])}, "
                   f"{_num(100 * t['share_untrustworthy'], 1)}% of answers")
        click.echo(f"  held-out ECE {_num(h['ece'])} (fit on {h['n_fit']}, measured on "
                   f"{h['n_eval']} answers)")
    click.echo(f"calibration: {out}\nreport: {report}")
