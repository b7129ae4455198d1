"""``veracity doctor``: a table of what this machine can run, with a fix for each failure."""

from __future__ import annotations

import json
import sys

import click


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON (for scripts).")
@click.option("--base-url", default=None, metavar="URL",
              help="Also check that an OpenAI-compatible server answers here.")
@click.option("--no-models", is_flag=True,
              help="Skip loading the bundled model and embedder (the slow checks).")
def doctor(as_json: bool, base_url: str | None, no_models: bool) -> None:
    """Check what this machine can run (Python, extras, CPU, bundled model, embedder, cache,
    browser) and say how to fix what it cannot; exits 1 when a required check fails."""
    from veracity.doctor import table, timed_checks

    if not as_json:
        click.echo("checking (the model and embedder load in subprocesses, a few seconds)...",
                   err=True)
    result = timed_checks(base_url, models=not no_models)
    click.echo(json.dumps(result, indent=2, ensure_ascii=False) if as_json else table(result))
    sys.exit(0 if result["ok"] else 1)
