"""The risk mode of ``veracity calibrate`` (``--risk α --delta δ``)."""

from __future__ import annotations

from pathlib import Path

import click

from veracity.decisions.calibrate import calibrate_risk
from veracity.decisions.labelled import read_labelled
from veracity.store import dumps


def risk_mode(runs: tuple[Path, ...], alpha: float, delta: float, out: Path | None,
              as_json: bool) -> None:
    """Certify a threshold on labelled RUNS; print it (and write ``out``)."""
    if not runs:
        raise click.UsageError("give labelled RUNS to calibrate on")
    found = calibrate_risk(read_labelled(list(runs)), alpha, delta, out)
    if as_json:
        click.echo(dumps(found.to_dict(), indent=2))
        return
    for line in found.lines():
        click.echo(line)
    if out is not None:
        click.echo(f"threshold file: {out}")
