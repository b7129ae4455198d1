"""The risk mode of ``veracity calibrate`` (``--risk α --delta δ``)."""

from __future__ import annotations

from pathlib import Path

import click

from veracity.decisions.calibrate import calibrate_risk
from veracity.decisions.labelled import read_labelled, traffic_labelled
from veracity.store import dumps


def risk_mode(runs: tuple[Path, ...], traffic: Path | None, model: str | None, alpha: float | None,
              delta: float, out: Path | None, as_json: bool) -> None:
    """Certify a threshold on labelled RUNS or a traffic log's fed-back labels; print it (and
    write ``out``)."""
    if alpha is None:
        raise click.UsageError("--from-traffic calibrates a risk threshold: give --risk α")
    if traffic is not None and runs:
        raise click.UsageError("give labelled RUNS or --from-traffic LOG, not both")
    if traffic is None and not runs:
        raise click.UsageError("give labelled RUNS to calibrate on")
    scores = traffic_labelled(traffic, model) if traffic is not None else read_labelled(list(runs))
    found = calibrate_risk(scores, alpha, delta, out)
    if as_json:
        click.echo(dumps(found.to_dict(), indent=2))
        return
    for line in found.lines():
        click.echo(line)
    if out is not None:
        click.echo(f"threshold file: {out}")
